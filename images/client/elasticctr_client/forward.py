"""Reach the stack's in-cluster addresses from outside the cluster.

Stack outputs name Services by their cluster DNS names (`http://serving.<ns>.svc.cluster.
local:8010`), which resolve only in a pod. Outside one (no $KUBERNETES_SERVICE_HOST), each
such address is reached through `kubectl port-forward svc/<name>` on a free local port,
started the first time the command needs it and stopped (by its PID) when the command
ends. kubectl reads $KUBECONFIG, or the stack's own kubeconfig output (a cluster the stack
created), written to a private file that is deleted with the forward.

A forward goes to one pod of the Service, chosen when kubectl starts, and kubectl exits for
good when that pod goes away (a rollout) or one forwarded connection fails ("lost
connection to pod"). A user would run it again: so does the forward, on the same local
port, for as long as the command lasts (`status --wait` across a rollout); a request in
the moment between is refused and retried as any other.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from types import TracebackType
from typing import IO

from .errors import CredentialsError, EndpointError, UnreachableError, one_line

# <service>.<namespace>.svc[.cluster.local]: a Service's DNS name inside its cluster.
IN_CLUSTER_HOST = re.compile(
    r"^(?P<service>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.(?P<namespace>[a-z0-9]([-a-z0-9]*[a-z0-9])?)"
    r"\.svc(\.cluster\.local)?$"
)
FORWARDING = re.compile(r"^Forwarding from 127\.0\.0\.1:(\d+) -> \d+")
START_SECONDS = 30.0  # for kubectl to reach the API server and a ready pod
STOP_SECONDS = 5.0
# Between runs of kubectl: the first wait, doubled after each run that did not start, up to
# the longest (the API server or the Service's pods may be away for a while).
RESTART_SECONDS = (0.5, 5.0)
IN_A_POD = "KUBERNETES_SERVICE_HOST"  # set by the kubelet in every container


def in_cluster_service(url: str) -> tuple[str, str, int] | None:
    """(namespace, service, port) when `url` names a Service by its cluster DNS name."""
    parts = urllib.parse.urlsplit(url)
    found = IN_CLUSTER_HOST.match(parts.hostname or "")
    if not found:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return found["namespace"], found["service"], port


class Forwarder:
    """`reach(url)`: the URL itself where it resolves, else a local one forwarded to it.
    A context manager: leaving it stops every forward it started."""

    def __init__(self, kubeconfig_text: str | None = None, kubectl: str | None = None) -> None:
        self._kubeconfig_text = kubeconfig_text  # the stack's output, when it made the cluster
        self._kubectl = kubectl
        self._ports: dict[tuple[str, str, int], int] = {}
        self._forwards: list[KeptForward] = []
        self._private: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> Forwarder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def reach(self, url: str, flag: str) -> str:
        target = in_cluster_service(url)
        if target is None or os.environ.get(IN_A_POD):
            return url
        local = self._ports.get(target)
        if local is None:
            local = self._ports[target] = self._start(*target, url=url, flag=flag)
        parts = urllib.parse.urlsplit(url)
        return urllib.parse.urlunsplit(parts._replace(netloc=f"127.0.0.1:{local}"))

    def close(self) -> None:
        for forward in self._forwards:
            forward.stop()
        self._forwards.clear()
        self._ports.clear()
        if self._private is not None:
            self._private.cleanup()
            self._private = None

    def kubectl(self, address: str, to: str, instead: str) -> list[str]:
        """kubectl and the kubeconfig to reach the cluster with; EndpointError without
        kubectl on PATH, saying what it was `to` do for `address`, and what to do `instead`."""
        kubectl = self._kubectl or shutil.which("kubectl")
        if kubectl is None:
            raise EndpointError(
                f"{address} resolves only inside the cluster, and kubectl is not on PATH to "
                f"{to}: put kubectl on PATH (tools/build-tools.sh --print-path prints where "
                f"the set-up built it), or {instead}"
            )
        command = [kubectl]
        if self._kubeconfig_text and not os.environ.get("KUBECONFIG"):
            command += ["--kubeconfig", str(self._kubeconfig_file())]
        return command

    def _command(self, namespace: str, service: str, port: int, url: str, flag: str) -> list[str]:
        instead = (
            f"run `kubectl -n {namespace} port-forward svc/{service} {port}` and pass {flag} "
            f"http://127.0.0.1:{port}"
        )
        return [
            *self.kubectl(url, "port-forward to it", instead), "--namespace", namespace,
            "port-forward",
            "--address", "127.0.0.1", f"svc/{service}", f":{port}",
        ]  # fmt: skip

    def _kubeconfig_file(self) -> Path:
        if self._private is None:
            self._private = tempfile.TemporaryDirectory(prefix="elasticctr-forward-")
        path = Path(self._private.name) / "kubeconfig"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(self._kubeconfig_text or "", encoding="utf-8")
        return path

    def _start(self, namespace: str, service: str, port: int, url: str, flag: str) -> int:
        forward = KeptForward(
            self._command(namespace, service, port, url, flag),
            f"svc/{service} in namespace {namespace}",
        )
        self._forwards.append(forward)
        return forward.start()


class KeptForward:
    """One `kubectl port-forward` (`command`, its last argument `:<remote port>`), run again
    on the local port it was given whenever it exits, until `stop()`. `start()` waits for
    the first run and returns its local port, or raises what kept it from forwarding."""

    def __init__(self, command: list[str], what: str, start_seconds: float = START_SECONDS):
        self._command = command
        self._start_seconds = start_seconds
        self._what = what  # for errors: "svc/serving in namespace elasticctr"
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self.runs = 0  # kubectl processes started (1 + the restarts)

    def start(self) -> int:
        process = self._run(self._command)
        first = self._first_line(process)
        found = FORWARDING.match(first)
        if not found:
            said = one_line(first) or _said(process)
            error = CredentialsError if credentials_problem(said) else UnreachableError
            raise error(f"kubectl port-forward to {self._what} failed: {said}")
        local = int(found[1])
        remote = self._command[-1].rpartition(":")[2]
        again = [*self._command[:-1], f"{local}:{remote}"]
        threading.Thread(
            target=self._keep, args=(process, again), name=f"port-forward {self._what}",
            daemon=True,
        ).start()  # fmt: skip
        return local

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            process = self._process
        if process is not None:
            _stop(process)

    def _run(self, command: list[str]) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._stopping.is_set():
                raise UnreachableError(f"the port-forward to {self._what} was stopped")
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            self.runs += 1
            return self._process

    def _first_line(self, process: subprocess.Popen[bytes]) -> str:
        """kubectl's first line on stdout ("Forwarding from ..."), or what it wrote before
        it exited ("" when nothing: its error is on stderr); UnreachableError when it is not
        ready in time."""
        assert process.stdout is not None
        deadline = time.monotonic() + self._start_seconds
        first = b""
        while not first.endswith(b"\n"):
            left = deadline - time.monotonic()
            readable, _, _ = select.select([process.stdout], [], [], max(left, 0))
            if not readable:
                raise UnreachableError(
                    f"kubectl port-forward to {self._what} was not ready within "
                    f"{self._start_seconds:.0f} s ({_said(process)}); is the cluster up and the "
                    "service's pod ready?"
                )
            chunk = os.read(process.stdout.fileno(), 4096)
            if not chunk:
                break
            first += chunk
        return first.decode(errors="replace")

    def _keep(self, process: subprocess.Popen[bytes], again: list[str]) -> None:
        """Drain the running kubectl's output (a line per connection: a full pipe would
        stall it); when it exits, run `again`, waiting longer after each run that fails."""
        wait = RESTART_SECONDS[0]
        while True:
            assert process.stdout is not None and process.stderr is not None
            errors = threading.Thread(target=_drain, args=(process.stderr,), daemon=True)
            errors.start()
            _drain(process.stdout)
            process.wait()
            errors.join()
            if self._stopping.wait(wait):
                return
            try:
                process = self._run(again)
                started = FORWARDING.match(self._first_line(process)) is not None
            except (UnreachableError, OSError):
                if self._stopping.is_set():
                    return
                started = False
            wait = RESTART_SECONDS[0] if started else min(wait * 2, RESTART_SECONDS[1])


def _said(process: subprocess.Popen[bytes]) -> str:
    """kubectl's last words on stderr (it has exited, or is about to be stopped)."""
    assert process.stderr is not None
    _stop(process)
    return last_words(process.stderr.read(), process.returncode)


def last_words(stderr: bytes, returncode: int | None) -> str:
    """kubectl's error from its stderr: the last line is the error, the ones above it
    client-go's log of the retries."""
    lines = stderr.decode(errors="replace").strip().splitlines()
    last = one_line(lines[-1]).removeprefix("error: ") if lines else ""
    return last[-300:] or f"kubectl exited {returncode}"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to this one process (its PID), SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def credentials_problem(said: str) -> bool:
    lowered = said.lower()
    return any(
        word in lowered
        for word in ("forbidden", "unauthorized", "kubeconfig", "no configuration", "credentials")
    )


def _drain(stream: IO[bytes]) -> None:
    while stream.read(65536):
        pass
