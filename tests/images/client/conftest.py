"""Fixtures of the client tests: a running stack (3 cube shards + transfer + serving with
synthetic version 1), and the CLI run as a process."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
import string
import subprocess
import sys

import pytest
from elasticctr_cube.server import build_server

# procs: the serving tests' processes of one test, stopped by PID at its end.
from tests.support.serving import PYTHONPATH, Processes, procs, start_stack  # noqa: F401


@pytest.fixture(scope="session")
def cube_server_bin() -> str:
    return build_server()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, cube_server_bin):
    root = tmp_path_factory.mktemp("client-stack")
    processes = Processes(root)
    try:
        yield start_stack(processes, root)
    finally:
        processes.stop_all()


# Serving's bearer token in the guarded stack: as the stack makes it
# (components/generated_secret.py), letters and digits.
TOKEN = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(40))


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, cube_server_bin):
    """The stack with serving.auth token: serving wants TOKEN."""
    root = tmp_path_factory.mktemp("client-auth-stack")
    processes = Processes(root)
    try:
        yield start_stack(processes, root, serving_env={"SERVING_AUTH_TOKEN": TOKEN})
    finally:
        processes.stop_all()


def run_client(*args: str, env: dict | None = None, timeout: float = 120, stdin: str = "",
               drop: tuple[str, ...] = ()):  # fmt: skip
    """python -m elasticctr_client ARGS; the CompletedProcess (text). `drop`: prefixes of
    environment variables the client must not see."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(drop or ("\0",))}
    full_env = {**inherited, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "elasticctr_client", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def fake_pulumi(tmp_path, outputs: dict | None) -> dict:
    """A `pulumi` on PATH that records its arguments and prints `outputs` as JSON, or,
    for None, fails as the real one does without a login."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "pulumi"
    answer = (
        f"cat <<'EOF'\n{json.dumps(outputs)}\nEOF\n"
        if outputs is not None
        else f"echo '{NO_LOGIN}' >&2\nexit 255\n"
    )
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/pulumi-args\n{answer}')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


NO_LOGIN = "error: PULUMI_ACCESS_TOKEN must be set for login during non-interactive CLI sessions"


def with_kubectl() -> str:
    """PATH with the set-up's kubectl on it (the client runs it to port-forward)."""
    from tests.support.prerequisites import unavailable
    from tests.support.pulumi_cli import search_path

    path = search_path()
    if shutil.which("kubectl", path=path) is None:
        unavailable("kubectl not found: build it with `bash tools/build-tools.sh`")
    return path
