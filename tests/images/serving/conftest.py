"""Fixtures of the serving tests: the native cube-server and request parser, processes
stopped by PID, and a running stack (3 cube shards + transfer + serving) with synthetic
version 1, also one whose serving wants a bearer token."""

from __future__ import annotations

import secrets

import pytest
from elasticctr_cube.server import build_server
from elasticctr_serving.native import NativeParser, build_parser

# procs: the processes of one test, stopped by PID at its end.
from tests.support.serving import Processes, procs, start_stack  # noqa: F401


@pytest.fixture(scope="session")
def cube_server_bin() -> str:
    return build_server()


@pytest.fixture(scope="session", autouse=True)
def native_parser() -> NativeParser:
    """Built before any serving process starts: they load it (docs/serving.md)."""
    return NativeParser(build_parser())


@pytest.fixture(scope="module")
def stack(tmp_path_factory, cube_server_bin):
    """Shared by a module's tests, which must leave version 1 serving."""
    root = tmp_path_factory.mktemp("stack")
    processes = Processes(root)
    try:
        yield start_stack(processes, root, "--max-body-bytes", "200000", "--max-instances", "1000")
    finally:
        processes.stop_all()


TOKEN = secrets.token_urlsafe(30)  # guarded_stack's serving token


@pytest.fixture(scope="module")
def guarded_stack(tmp_path_factory, cube_server_bin):
    """A module's stack whose serving wants `Authorization: Bearer TOKEN` (the Open
    Inference Protocol tests, REST and gRPC)."""
    root = tmp_path_factory.mktemp("guarded")
    processes = Processes(root)
    try:
        yield start_stack(processes, root, "--max-instances", "1000",
                          serving_env={"SERVING_AUTH_TOKEN": TOKEN})  # fmt: skip
    finally:
        processes.stop_all()
