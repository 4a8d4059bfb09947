"""`logs` through the real Kubernetes Python client, against a small fake API server
(pods and their log streams; no cluster runs here): trainer 0, the transfer and any
failed pod of the job are followed at once, each line prefixed, until every stream ends."""

from __future__ import annotations

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from tests.images.client.conftest import fake_pulumi, run_client

NAMESPACE, JOB = "elasticctr", "elasticctr-train"
PODS = {
    f"{JOB}-trainer-0": ["pass 1 started", "pass 1 auc 0.71", "exported version 1"],
    "cube-transfer-5d8f": ["following donefile", "version 1 committed"],
    # The trainer that met the bad file: Failed, kept by Volcano after TerminateJob.
    f"{JOB}-trainer-2": ["bad lines: hdfs://nn:8020/train_data/20191221/06/part-00000"],
    f"{JOB}-trainer-1": ["still training"],  # Running: not shown
}
FAILED = {f"{JOB}-trainer-2"}


class FakeApi(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        FakeApi.requests.append(self.path)
        parts = url.path.strip("/").split("/")  # api v1 namespaces NS pods [NAME [log]]
        if parts[:4] != ["api", "v1", "namespaces", NAMESPACE] or parts[4] != "pods":
            return self._json(404, {"kind": "Status", "code": 404})
        if len(parts) == 5:
            selector = parse_qs(url.query).get("labelSelector", [""])[0]
            if selector == f"volcano.sh/job-name={JOB}":
                items = [self._pod(n) for n in PODS if n.startswith(f"{JOB}-")]
            else:
                items = [
                    self._pod(n) for n in PODS if "cube-transfer" in selector and "transfer" in n
                ]
            return self._json(200, {"kind": "PodList", "apiVersion": "v1", "items": items})
        name = parts[5]
        if name not in PODS:
            return self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        if len(parts) == 6:
            return self._json(200, self._pod(name))
        assert parse_qs(url.query)["follow"][0].lower() == "true"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in PODS[name]:  # streamed as the pod writes, then the pod ends
            data = (line + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            time.sleep(0.05)
        self.wfile.write(b"0\r\n\r\n")

    def _pod(self, name: str) -> dict:
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "status": {"phase": "Failed" if name in FAILED else "Running"},
        }

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


TOKEN = "token-that-must-never-reach-the-disk"


def kubeconfig_of(server: str) -> dict:
    """A kubeconfig with a bearer token and a client key (both credentials)."""
    secret = base64.b64encode(b"-----BEGIN PRIVATE KEY-----" + TOKEN.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": server}}],
        "users": [{"name": "fake", "user": {"token": TOKEN, "client-key-data": secret}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
    }


@pytest.fixture
def kubeconfig(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(kubeconfig_of(f"http://127.0.0.1:{server.server_port}")))
    try:
        yield path
    finally:
        server.shutdown()
        server.server_close()


def test_logs_follow_trainer0_and_the_transfer(kubeconfig):
    done = run_client(
        "logs",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--job",
        JOB,
        "--wait",
        "5",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    trainer = [line for line in lines if line.startswith("[trainer-0] ")]
    transfer = [line for line in lines if line.startswith("[transfer] ")]
    assert trainer == [f"[trainer-0] {line}" for line in PODS[f"{JOB}-trainer-0"]]
    assert transfer == [f"[transfer] {line}" for line in PODS["cube-transfer-5d8f"]]
    assert any("tailLines=100" in r for r in FakeApi.requests)
    # The failed trainer names its file; a running one other than trainer 0 is not shown.
    assert "[trainer-2] bad lines: hdfs://nn:8020/train_data/20191221/06/part-00000" in lines
    assert not any(line.startswith("[trainer-1]") for line in lines)


def test_logs_says_when_a_pod_never_appears(kubeconfig):
    done = run_client(
        "logs",
        "--kubeconfig",
        str(kubeconfig),
        "--namespace",
        NAMESPACE,
        "--job",
        "other-job",
        "--wait",
        "1",
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert f"[trainer-0] (no pod other-job-trainer-0 in {NAMESPACE} after 1s)" in done.stdout
    assert "[transfer] version 1 committed" in done.stdout


def test_the_stacks_kubeconfig_never_stays_on_disk(kubeconfig, tmp_path):
    """A cluster the stack created: its kubeconfig (token and key) is a secret stack
        output. `logs` must not leave it in $TMPDIR, where other users of the machine
    could read it."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    config = json.loads(kubeconfig.read_text())
    outputs = {"kubeconfig": json.dumps(config), "namespace": NAMESPACE, "training_job": JOB}
    env = {**fake_pulumi(tmp_path, outputs), "TMPDIR": str(tmpdir), "KUBECONFIG": "/nonexistent"}
    done = run_client("logs", "--wait", "5", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "[transfer] version 1 committed" in done.stdout
    assert list(tmpdir.rglob("*")) == []  # nothing left behind, the token least of all


def test_logs_json(kubeconfig):
    done = run_client("logs", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
                      "--job", JOB, "--wait", "5", "--json", timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["line"] for r in records if r["source"] == "trainer-0"] == PODS[f"{JOB}-trainer-0"]
    assert [r["line"] for r in records if r["source"] == "transfer"] == PODS["cube-transfer-5d8f"]
