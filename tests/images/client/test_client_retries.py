"""The client's HTTP retries, against a real local HTTP server in front of which the first
attempts fail: a refused batch is sent again after a connection reset or a 502/503/504
(bounded, with backoff), so one failed batch does not abort a whole `predict`; a 4xx is
never sent again."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from elasticctr_client.errors import RefusedError, UnreachableError
from elasticctr_client.httpjson import Retry, request_json

from tests.images.client.conftest import run_client

INFERENCE = "/ElasticCTRPredictionService/inference"
FAST = Retry(retries=3, first_delay=0.01, max_delay=0.05)


class Flaky(BaseHTTPRequestHandler):
    """Answers inference as serving does (prob1 0.25 per instance), after failing the
    first `fail` POSTs with `how`: an HTTP status, or "reset" (the connection closed
    without an answer)."""

    protocol_version = "HTTP/1.1"
    fail: ClassVar[int] = 0
    how: ClassVar[int | str] = 503
    posts: ClassVar[list[int]] = []  # instances per POST, failed ones included

    def do_GET(self) -> None:
        self._answer(404, {"error": "no /status here"})  # the client takes the defaults

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Flaky.posts.append(len(body["instances"]))
        if len(Flaky.posts) <= Flaky.fail:
            if Flaky.how == "reset":
                self.close_connection = True
                self.connection.shutdown(2)  # no status line: the client sees the reset
                return
            return self._answer(int(Flaky.how), {"err_code": 1, "err_msg": "not now"})
        predictions = [{"prob1": 0.25} for _ in body["instances"]]
        self._answer(200, {"err_code": 0, "predictions": predictions, "version": 3})

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    Flaky.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def failing(fail: int, how: int | str) -> None:
    Flaky.fail, Flaky.how = fail, how


BODY: dict[str, Any] = {"instances": [{"slots": []}]}


@pytest.mark.parametrize("how", [502, 503, 504, "reset"])
def test_a_call_succeeds_after_failed_attempts(flaky, how):
    failing(3, how)
    answer = request_json("POST", flaky + INFERENCE, BODY, 10, retry=FAST)
    assert answer["version"] == 3 and len(Flaky.posts) == 4


def test_the_attempts_are_bounded(flaky):
    failing(10, 503)
    with pytest.raises(RefusedError) as err:
        request_json("POST", flaky + INFERENCE, BODY, 10, retry=FAST)
    assert len(Flaky.posts) == 4
    assert str(err.value) == f"serving answered 503 at {flaky + INFERENCE} (4 attempts): not now"
    failing(10, "reset")
    Flaky.posts = []
    with pytest.raises(UnreachableError) as broken:
        request_json("POST", flaky + INFERENCE, BODY, 10, retry=FAST)
    assert len(Flaky.posts) == 4 and "4 attempts" in str(broken.value)


@pytest.mark.parametrize("code", [400, 404, 413, 500])
def test_a_4xx_or_500_is_not_sent_again(flaky, code):
    failing(1, code)
    with pytest.raises(RefusedError):
        request_json("POST", flaky + INFERENCE, BODY, 10, retry=FAST)
    assert len(Flaky.posts) == 1


def test_the_backoff_doubles_up_to_its_bound():
    retry = Retry(retries=6, first_delay=0.5, max_delay=8.0)
    delays = [retry.delay(attempt) for attempt in range(6)]
    for attempt, delay in enumerate(delays):
        bound = min(8.0, 0.5 * 2**attempt)
        assert bound / 2 <= delay <= bound


@pytest.mark.parametrize("how", [503, "reset"])
def test_one_failed_batch_does_not_abort_predict(flaky, tmp_path, how):
    """Five batches of one line; the second batch's first two attempts fail."""
    lines = tmp_path / "lines"
    lines.write_text("1 1 5:101\n1 0 5:102\n" * 2 + "1 0 5:103\n")
    failing(0, how)

    class SecondBatchFails(Flaky):
        def do_POST(self) -> None:
            Flaky.fail = 3 if len(Flaky.posts) >= 1 else 0  # POSTs 2 and 3 fail
            super().do_POST()

    server = ThreadingHTTPServer(("127.0.0.1", 0), SecondBatchFails)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        done = run_client("predict", str(lines), "--serving-url", url, "--batch-size", "1",
                          "--no-progress")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert "examples: 5 (model version 3)" in done.stdout, done.stdout + done.stderr
    assert Flaky.posts == [1] * 7  # 5 batches, the second sent 3 times
    # Without retries the same failure ends the command at the second batch.
    Flaky.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), SecondBatchFails)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        done = run_client("--retries", "0", "predict", str(lines), "--serving-url", url,
                          "--batch-size", "1", "--no-progress")  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode in (6, 7) and Flaky.posts == [1, 1], done.stderr


def test_predict_json(flaky, tmp_path):
    lines = tmp_path / "lines"
    lines.write_text("1 1 5:101\n1 0 5:102\nnot a line\n")
    failing(0, 503)
    done = run_client("predict", str(lines), "--serving-url", flaky, "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary | {"examples_per_sec": 0} == {
        "examples": 2, "model_versions": [3], "skipped_lines": {"non-integer show/click": 1},
        "failed_examples": {}, "failures": [], "auc": 0.5, "examples_per_sec": 0,
    }  # fmt: skip
