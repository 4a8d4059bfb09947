"""Fixtures of the client tests: a running stack (3 cube shards + transfer + serving with
synthetic version 1), and the CLI run as a process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from elasticctr_cube.server import build_server

from tests.images.serving.conftest import start_stack
from tests.images.serving.servingtest import PYTHONPATH, Processes


@pytest.fixture(scope="session")
def cube_server_bin() -> str:
    return build_server()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, cube_server_bin):
    root = tmp_path_factory.mktemp("client-stack")
    procs = Processes(root)
    try:
        yield start_stack(procs, root)
    finally:
        procs.stop_all()


def run_client(*args: str, env: dict | None = None, timeout: float = 120, stdin: str = ""):
    """python -m elasticctr_client ARGS; the CompletedProcess (text)."""
    full_env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "elasticctr_client", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )
