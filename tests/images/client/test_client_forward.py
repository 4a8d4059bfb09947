"""The client's kept port-forward: kubectl run again on the same local port whenever it
exits (its pod replaced, a connection lost), until the command ends; against a stand-in
kubectl that exits after two connections (fake_kubectl.py)."""

from __future__ import annotations

import http.server
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticctr_client.errors import UnreachableError
from elasticctr_client.forward import KeptForward

FAKE = Path(__file__).with_name("fake_kubectl.py")


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"served " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def fake_env(tmp_path: Path, backend: int, refusals: int = 0) -> Path:
    os.environ.update(
        FAKE_RUNS=str(tmp_path / "runs"),
        FAKE_REFUSALS=str(tmp_path / "refusals"),
        FAKE_BACKEND_PORT=str(backend),
        FAKE_CONNECTIONS_PER_RUN="2",
    )
    (tmp_path / "refusals").write_text(str(refusals))
    return tmp_path / "runs"


@pytest.fixture(autouse=True)
def restore_environment() -> Iterator[None]:
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def get(url: str, within: float = 20.0) -> str:
    """GET `url`, retried while refused (the moment between two runs of kubectl)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return str(answer.read().decode())
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def command() -> list[str]:
    return [
        sys.executable, str(FAKE), "-n", "elasticctr", "port-forward",
        "--address", "127.0.0.1", "svc/serving", ":8010",
    ]  # fmt: skip


def runs_of(record: Path) -> list[tuple[str, int]]:
    return [(a, int(p)) for a, p in (line.split() for line in record.read_text().splitlines())]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_forward_outlives_kubectl_exiting_and_stops_with_its_command(tmp_path, backend):
    record = fake_env(tmp_path, backend)
    forward = KeptForward(command(), "svc/serving in namespace elasticctr")
    local = forward.start()
    try:
        # Seven requests, two per run of kubectl: it is run three times more, each time on
        # the local port of the first.
        answers = [get(f"http://127.0.0.1:{local}/{n}") for n in range(7)]
        assert answers == [f"served /{n}" for n in range(7)]
    finally:
        forward.stop()
    runs = runs_of(record)
    assert [a for a, _ in runs] == [":8010"] + [f"{local}:8010"] * (len(runs) - 1)
    assert len(runs) >= 4 and forward.runs == len(runs)
    # Stopped: no kubectl left running, nothing listening on the port, none started again.
    time.sleep(1.5)
    assert not [pid for _, pid in runs if alive(pid)]
    assert len(runs_of(record)) == len(runs)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=2)


def test_a_restart_refused_is_tried_again_later(tmp_path, backend):
    record = fake_env(tmp_path, backend, refusals=2)
    forward = KeptForward(command(), "svc/serving in namespace elasticctr")
    local = forward.start()
    try:
        assert [get(f"http://127.0.0.1:{local}/{n}") for n in range(3)] == [
            f"served /{n}" for n in range(3)
        ]
    finally:
        forward.stop()
    # The first run, two refused (the port taken), then one that forwards again.
    assert [a for a, _ in runs_of(record)][:4] == [":8010"] + [f"{local}:8010"] * 3
    assert (tmp_path / "refusals").read_text() == "0"


def test_a_first_run_that_fails_is_the_commands_error(tmp_path, backend):
    fake_env(tmp_path, backend)
    # A fixed local port already taken by the backend: kubectl cannot listen.
    taken = [*command()[:-1], f"{backend}:8010"]
    os.environ["FAKE_REFUSALS"] = str(tmp_path / "refusals")
    (tmp_path / "refusals").write_text("1")
    forward = KeptForward(taken, "svc/serving in namespace elasticctr")
    with pytest.raises(UnreachableError) as failed:
        forward.start()
    assert str(failed.value) == (
        "kubectl port-forward to svc/serving in namespace elasticctr failed: unable to listen "
        f"on port {backend}: address already in use"
    )
    assert forward.runs == 1
