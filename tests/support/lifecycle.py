"""What the lifecycle tests (tests/lifecycle) do as a user would: the project's client and
generator as processes on the host, the cluster's Services at their ClusterIPs (the node
reaches them through kube-proxy, as a pod would), Volcano's objects through the API.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elasticctr_client.forward import KeptForward
from elasticctr_client.predict import INFERENCE_PATH, parse_line

from tests.support.cluster import ROOT, LocalStack, pods
from tests.support.pulumi_cli import search_path

# The workload packages, importable by the host's processes as in their images.
PYTHONPATH = os.pathsep.join(
    str(ROOT / "images" / part) for part in ("trainer", "common", "client", "serving", "cube")
)
VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")
# The lifecycle's data: the local stack's hours (stacks/Pulumi.local.yaml data.start..end)
# for its slot.conf's 26 slots; enough examples that one pass comes within 0.03 of Bayes
# with room to spare (0.023 at 10,000 per hour, 3 runs).
START, HOURS = "20191221/00", 6
EXAMPLES_PER_HOUR, HELDOUT = 20000, 4000


def generate_argv(out: Path, seed: int | None = None) -> list[str]:
    """`elasticctr_trainer generate`'s arguments for the lifecycle's data in `out` (the
    generator's own default seed unless given)."""
    return [
        "generate", "--out", f"file://{out}", "--slots", "26", "--first-slot", "1",
        "--vocab", "50", "--start", START, "--hours", str(HOURS),
        "--examples-per-hour", str(EXAMPLES_PER_HOUR), "--files-per-hour", "2",
        "--heldout", str(HELDOUT), *(["--seed", str(seed)] if seed is not None else []),
    ]  # fmt: skip


PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")


def workload_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONUNBUFFERED": "1"}
    for key in [k for k in env if k.startswith(("PADDLE_", "TRAINING_ROLE", "KUBECONFIG"))]:
        del env[key]
    return env


def run_module(module: str, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m module argv...` with the workload packages; fails with its output."""
    result = subprocess.run(
        [sys.executable, "-m", module, *argv],
        env=workload_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{module} {' '.join(argv)}: exit {result.returncode}\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


# `python -m MODULE ...` as from a terminal, where Ctrl-C works: a process started from a
# shell's background job (CI's runner, nohup) inherits SIGINT ignored, and Python then
# installs no KeyboardInterrupt handler, so the SIGINT below would not stop it.
_AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)"
)


def run_until_interrupted(module: str, *argv: str, after: float) -> str:
    """`python -m module argv...` for `after` seconds, then Ctrl-C; its output."""
    process = subprocess.Popen(
        [sys.executable, "-c", _AS_FROM_A_TERMINAL, module, *argv],
        env=workload_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = process.communicate(timeout=after)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    return out


def service_url(stack: LocalStack, name: str, port_name: str | None = None) -> str:
    """http://<ClusterIP>:<port> of the Service `name` (its first port, or `port_name`)."""
    from kubernetes import client

    service = client.CoreV1Api(stack.api()).read_namespaced_service(name, stack.NAMESPACE)
    ports = service.spec.ports
    port = next(p for p in ports if port_name in (None, p.name))
    return f"http://{service.spec.cluster_ip}:{port.port}"


@contextlib.contextmanager
def port_forward(stack: LocalStack, target: str, port: int) -> Iterator[str]:
    """`kubectl port-forward <target> :<port>` as a user runs it (MLflow answers only its
    own host names and localhost), run again whenever it exits (the client's forward);
    yields http://127.0.0.1:<local port>."""
    kubectl = shutil.which("kubectl", path=search_path())
    assert kubectl, "kubectl is missing (tools/build-tools.sh builds it)"
    command = [
        kubectl, "--kubeconfig", str(stack.cluster.kubeconfig), "-n", stack.NAMESPACE,
        "port-forward", "--address", "127.0.0.1", target, f":{port}",
    ]  # fmt: skip
    forward = KeptForward(command, f"{target} in namespace {stack.NAMESPACE}", start_seconds=60)
    try:
        yield f"http://127.0.0.1:{forward.start()}"
    finally:
        forward.stop()


def pod_ip(stack: LocalStack, selector: str) -> str:
    running = [p for p in pods(stack.api(), stack.NAMESPACE, selector) if p.status.pod_ip]
    assert running, f"no pod with an address for {selector}"
    return str(running[0].status.pod_ip)


def get_json(url: str, token: str | None = None, timeout: float = 10) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
        return json.loads(r.read())


def try_json(url: str, token: str | None = None) -> Any:
    try:
        return get_json(url, token)
    except (OSError, ValueError):
        return None


def volcano_job(stack: LocalStack, name: str) -> dict[str, Any] | None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    group, version, plural = VOLCANO
    try:
        return dict(
            client.CustomObjectsApi(stack.api()).get_namespaced_custom_object(
                group, version, stack.NAMESPACE, plural, name
            )
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def podgroups_of(stack: LocalStack, job_uid: str) -> list[dict[str, Any]]:
    from kubernetes import client

    group, version, plural = PODGROUPS
    listed = client.CustomObjectsApi(stack.api()).list_namespaced_custom_object(
        group, version, stack.NAMESPACE, plural
    )
    return [
        g
        for g in listed["items"]
        if any(o.get("uid") == job_uid for o in g["metadata"].get("ownerReferences", []))
    ]


@dataclass
class LoadGenerator:
    """Predict requests to serving, one batch after another, until stopped; counts each
    request's outcome (a failure is any error: refused, HTTP status, err_code, timeout)."""

    url: str
    token: str | None
    instances: list[dict[str, Any]]
    ok: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    messages: dict[str, int] = field(default_factory=dict)  # serving's err_msg of failures
    versions: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LoadGenerator:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> LoadGenerator:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        return self

    def _run(self) -> None:
        body = json.dumps({"instances": self.instances}).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        while not self._stop.is_set():
            request = urllib.request.Request(self.url.rstrip("/") + INFERENCE_PATH, body, headers)
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    answer = json.loads(response.read())
                if answer.get("err_code", 0) != 0 or len(answer["predictions"]) != len(
                    self.instances
                ):
                    raise ValueError(f"err_code {answer.get('err_code')}")
                self.ok += 1
                if answer.get("version") is not None:
                    self.versions.add(int(answer["version"]))
            except (OSError, ValueError, KeyError) as err:
                reason = type(err).__name__
                if isinstance(err, urllib.error.HTTPError):
                    reason = f"HTTP {err.code}"
                    self._keep_message(err)
                self.errors[reason] = self.errors.get(reason, 0) + 1
                self.failed += 1
                time.sleep(0.05)
            time.sleep(0.02)

    def _keep_message(self, err: urllib.error.HTTPError) -> None:
        """Count the answer's err_msg (its first 160 characters): what serving said."""
        try:
            message = str(json.loads(err.read()).get("err_msg", ""))[:160]
        except (OSError, ValueError, AttributeError):
            message = "(no JSON answer)"
        if message in self.messages or len(self.messages) < 5:
            self.messages[message] = self.messages.get(message, 0) + 1

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "failed": self.failed,
            "errors": self.errors,
            "messages": self.messages,
        }


def instances_of(lines: list[str]) -> list[dict[str, Any]]:
    """Serving's request instances for ElasticCTR lines, read by the client's own reader."""
    examples = [parse_line(line, number, None) for number, line in enumerate(lines, 1)]
    bad = [e for e in examples if isinstance(e, str)]
    assert not bad, bad
    return [
        {"slots": [{"slot_name": s, "feasigns": f} for s, f in e.slots.items()]}
        for e in examples
        if not isinstance(e, str)
    ]


@dataclass
class Timings:
    phases: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)

    def phase(self, name: str, started: float) -> None:
        self.phases[name] = round(time.monotonic() - started, 1)
        print(f"\n[lifecycle] {name}: {self.phases[name]} s", flush=True)

    def report(self, path: Path) -> None:
        path.write_text(json.dumps({"phases": self.phases, "figures": self.figures}, indent=2))
