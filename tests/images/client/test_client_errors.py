"""Every failure a user can meet, row by row from the table in docs/serving.md ("Errors and
exit codes"): the client, run as a process, prints that one line on stderr (no traceback)
and exits with that code; with --debug, the traceback comes first."""

from __future__ import annotations

import json
import random
import re
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.images.client.conftest import TOKEN, fake_pulumi, run_client, with_kubectl
from tests.images.client.test_client_logs import kubeconfig_of

DOC = Path(__file__).resolve().parents[3] / "docs" / "serving.md"
SECTION = "### Errors and exit codes"
CLIENT = "python -m elasticctr_client"
LINE = "1 1 5:101 7:102\n"


def doc_rows() -> dict[str, tuple[str, int]]:
    """{case: (message, exit code)} of the docs' table."""
    section = DOC.read_text().split(SECTION, 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) != 3 or not cells[2].isdigit():
            continue
        message = cells[1].strip("`").strip()
        rows[cells[0]] = (message, int(cells[2]))
    return rows


def pattern(message: str) -> re.Pattern[str]:
    """The message with each `<...>` (what varies: a path, a port) as a wildcard."""
    pieces = re.split(r"<[^<>]+>", message)
    return re.compile(".+?".join(re.escape(p) for p in pieces))


class Context:
    """What a scenario may need: a directory, data files, a closed and a silent port."""

    def __init__(self, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.tmp, self.request = tmp_path, request
        self.lines = tmp_path / "lines"
        self.lines.write_text(LINE * 3)
        self._sockets: list[socket.socket] = []

    def closed_url(self) -> str:
        """A port bound but not listening: every connection is refused."""
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self._sockets.append(s)
        return f"http://127.0.0.1:{s.getsockname()[1]}"

    def silent_url(self) -> str:
        """A port that takes connections into its backlog and never answers."""
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        self._sockets.append(s)
        return f"http://127.0.0.1:{s.getsockname()[1]}"

    def guarded(self) -> Any:
        return self.request.getfixturevalue("guarded")

    def close(self) -> None:
        for s in self._sockets:
            s.close()


class Refusing(BaseHTTPRequestHandler):
    """A Kubernetes API server that refuses every caller's credentials."""

    def do_GET(self) -> None:
        body = json.dumps({"kind": "Status", "code": 401, "reason": "Unauthorized"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def kubeconfig_file(ctx: Context, server: str) -> str:
    path = ctx.tmp / "kubeconfig"
    path.write_text(json.dumps(kubeconfig_of(server)))
    return str(path)


def refusing_api(ctx: Context) -> list[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ctx.request.addfinalizer(server.server_close)
    ctx.request.addfinalizer(server.shutdown)
    config = kubeconfig_file(ctx, f"http://127.0.0.1:{server.server_port}")
    return ["logs", "--kubeconfig", config, "--namespace", "ns", "--job", "job"]


def hours(ctx: Context) -> Path:
    hour = ctx.tmp / "data" / "20191221" / "00"
    hour.mkdir(parents=True)
    (hour / "part-00000").write_text(LINE)
    (hour / "donefile").write_text("")
    return ctx.tmp / "data"


def hdfs(url: str) -> str:
    """The dataset under a namenode at `url`'s address."""
    return url.replace("http://", "hdfs://", 1) + "/train_data"


NO_AWS = {
    "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata lookup for keys
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
    "AWS_CONFIG_FILE": "/nonexistent",
}
WITH_KEYS = {**NO_AWS, "AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "minio123"}


def no_pulumi(ctx: Context) -> dict[str, str]:
    empty = ctx.tmp / "empty-path"
    empty.mkdir(exist_ok=True)
    return {"PATH": str(empty)}


def noise(ctx: Context) -> str:
    path = ctx.tmp / "noise"
    path.write_bytes(random.Random(22).randbytes(5000))
    return str(path)


def bad_slot_conf(ctx: Context) -> str:
    path = ctx.tmp / "slot.conf"
    path.write_text("101\nabc\n")
    return str(path)


# A scenario: (arguments, extra environment, prefixes of variables to drop).
Scenario = tuple[list[str], dict[str, str], tuple[str, ...]]
L = "--no-progress"
IN_CLUSTER = "http://serving.elasticctr.svc.cluster.local:8010"
IN_CLUSTER_HDFS = "hdfs://hdfs-namenode.elasticctr.svc.cluster.local:8020/train_data"


SCENARIOS: dict[str, Callable[[Context], Scenario]] = {
    "a flag's value is not allowed": lambda c: (
        ["predict", str(c.lines), "--batch-size", "0"], {}, ()),
    "a URL that is not http(s)": lambda c: (
        ["predict", str(c.lines), "--serving-url", "localhost:8010"], {}, ()),
    "a click that is not REQUEST_ID:INSTANCE": lambda c: (
        ["click", "3", "--serving-url", c.closed_url()], {}, ()),
    "a data file is missing": lambda c: (
        ["predict", str(c.tmp / "missing.txt"), "--serving-url", c.closed_url()], {}, ()),
    "a data file cannot be read": lambda c: (
        ["predict", str(c.tmp), "--serving-url", c.closed_url()], {}, ()),
    "a data file is not text": lambda c: (
        ["predict", noise(c), "--serving-url", c.closed_url()], {}, ()),
    "`--output` cannot be written": lambda c: (
        ["predict", str(c.lines), "--serving-url", c.closed_url(), "--output",
         str(c.tmp / "no-dir" / "rows.tsv")], {}, ()),
    "`upload`'s directory is missing": lambda c: (
        ["upload", str(c.tmp / "missing"), "--dest", f"file://{c.tmp}/dest"], {}, ()),
    "`upload`'s directory has no hours": lambda c: (
        ["upload", str(c.tmp), "--dest", f"file://{c.tmp}/dest"], {}, ()),
    "slot.conf has a bad line": lambda c: (
        ["upload", str(hours(c)), "--dest", f"file://{c.tmp}/dest", "--slot-conf",
         bad_slot_conf(c)], {}, ()),
    "the stack has no such output": lambda c: (
        ["predict", str(c.lines)], fake_pulumi(c.tmp, {"namespace": "elasticctr"}), ()),
    "the stack's outputs cannot be read": lambda c: (
        ["predict", str(c.lines)], fake_pulumi(c.tmp, None), ()),
    "the pulumi CLI is not installed": lambda c: (
        ["predict", str(c.lines)], no_pulumi(c), ()),
    "`status` has nothing to ask": lambda c: (["status"], fake_pulumi(c.tmp, {}), ()),
    "the kubeconfig file is missing": lambda c: (
        ["logs", "--kubeconfig", str(c.tmp / "kubeconfig"), "--namespace", "ns", "--job", "j"],
        {}, ()),
    "no kubeconfig at all": lambda c: (
        ["logs", "--namespace", "ns", "--job", "j"],
        {"KUBECONFIG": str(c.tmp / "nothing"), "HOME": str(c.tmp)}, ("KUBERNETES_",)),
    "the Kubernetes API refuses the credentials": lambda c: (refusing_api(c), {}, ()),
    "S3 without credentials": lambda c: (
        ["upload", str(hours(c)), "--dest", "s3://bucket/train_data"],
        {**NO_AWS, "AWS_ENDPOINT_URL": c.closed_url(), "HOME": str(c.tmp)}, ("AWS_",)),
    "serving refuses the token": lambda c: (
        ["predict", str(c.lines), "--serving-url", c.guarded().serving.url, L], {},
        ("ELASTICCTR_",)),
    "a service refuses the connection": lambda c: (
        ["predict", str(c.lines), "--serving-url", c.closed_url(), L], {}, ()),
    "a service does not answer in time": lambda c: (
        ["--timeout", "1", "predict", str(c.lines), "--serving-url", c.silent_url(), L], {}, ()),
    "the Kubernetes API cannot be reached": lambda c: (
        ["logs", "--kubeconfig", kubeconfig_file(c, c.closed_url()), "--namespace", "ns",
         "--job", "j"], {}, ()),
    "an in-cluster address, and no kubectl to reach it": lambda c: (
        ["predict", str(c.lines), "--serving-url", IN_CLUSTER], {"PATH": str(c.tmp)},
        ("KUBERNETES_",)),
    "the port-forward to an in-cluster address fails": lambda c: (
        ["predict", str(c.lines), "--serving-url", IN_CLUSTER, L],
        {"KUBECONFIG": kubeconfig_file(c, c.closed_url()), "PATH": with_kubectl()},
        ("KUBERNETES_",)),
    "an in-cluster HDFS, and no kubectl to write through it": lambda c: (
        ["upload", str(hours(c)), "--dest", IN_CLUSTER_HDFS], {"PATH": str(c.tmp)},
        ("KUBERNETES_",)),
    "writing through a datanode pod fails": lambda c: (
        ["upload", str(hours(c)), "--dest", IN_CLUSTER_HDFS],
        {"KUBECONFIG": kubeconfig_file(c, c.closed_url()), "PATH": with_kubectl()},
        ("KUBERNETES_",)),
    "the storage cannot be reached": lambda c: (
        ["upload", str(hours(c)), "--dest", "s3://bucket/train_data"],
        {**WITH_KEYS, "AWS_ENDPOINT_URL": c.closed_url(), "HOME": str(c.tmp)}, ("AWS_",)),
    "the HDFS namenode cannot be reached": lambda c: (
        ["upload", str(hours(c)), "--dest", hdfs(c.closed_url())], {}, ()),
    "the HDFS namenode does not answer": lambda c: (
        ["--timeout", "1", "upload", str(hours(c)), "--dest", hdfs(c.silent_url())], {}, ()),
    "serving refuses a request": lambda c: (
        ["--token", TOKEN, "predict", str(c.lines), "--serving-url",
         c.guarded().serving.url + "/nope", L], {}, ()),
}  # fmt: skip
NEEDS_STACK = {"serving refuses the token", "serving refuses a request"}


@pytest.fixture
def ctx(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Context]:
    context = Context(tmp_path, request)
    try:
        yield context
    finally:
        context.close()


def test_the_table_and_the_scenarios_are_the_same_cases() -> None:
    assert sorted(doc_rows()) == sorted(SCENARIOS)


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[pytest.mark.slow] if c in NEEDS_STACK else []) for c in SCENARIOS],
)
def test_each_error_is_one_line_with_its_exit_code(case: str, ctx: Context) -> None:
    message, code = doc_rows()[case]
    args, env, drop = SCENARIOS[case](ctx)
    done = run_client(*args, env=env, drop=drop, timeout=60)
    assert done.stderr.count("\n") == 1, done.stderr
    line = done.stderr.rstrip("\n")
    assert pattern(message).fullmatch(line), f"\n{line}\n{message}"
    assert done.returncode == code, (done.returncode, line)


def test_debug_shows_the_traceback_first(ctx: Context) -> None:
    done = run_client("--debug", "predict", str(ctx.tmp / "missing.txt"), "--serving-url",
                      ctx.closed_url())  # fmt: skip
    assert done.returncode == 3
    assert done.stderr.startswith("Traceback (most recent call last):"), done.stderr
    assert done.stderr.splitlines()[-1].startswith(f"error: {ctx.tmp}/missing.txt: no such")
