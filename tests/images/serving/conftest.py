"""Fixtures of the serving tests: the native cube-server and request parser, processes
stopped by PID, and a running stack (3 cube shards + transfer + serving) with synthetic
version 1."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from elasticctr_cube.server import build_server
from elasticctr_serving.native import NativeParser, build_parser

from tests.images.cube.cubetest import CubeCluster
from tests.images.serving.servingtest import Processes, Serving, publish


@pytest.fixture(scope="session")
def cube_server_bin() -> str:
    return build_server()


@pytest.fixture(scope="session", autouse=True)
def native_parser() -> NativeParser:
    """Built before any serving process starts: they load it (docs/serving.md)."""
    return NativeParser(build_parser())


@pytest.fixture
def procs(tmp_path):
    p = Processes(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@dataclass
class Stack:
    cluster: CubeCluster
    serving: Serving
    spec: dict
    procs: Processes


def start_stack(procs: Processes, root, *serving_args: str, unload_after: str = "5",
                server_args: tuple[str, ...] = (), replicas: int = 1,
                transfer_args: tuple[str, ...] = (),
                serving_env: dict[str, str] | None = None, **conf) -> Stack:  # fmt: skip
    """3 cube shards (of `replicas` servers each) + transfer + serving, version 1 served;
    `conf`: cube.conf settings (CubeConf's fields)."""
    cluster = CubeCluster(procs, root, 3, ["--max-attempts", "1", "--unload-previous-after",
                                           unload_after, *transfer_args], replicas,
                          server_args, **conf)  # fmt: skip
    spec = publish(cluster, [1])
    result = cluster.wait_result(1)
    # A failed first rollout (one attempt) left serving nothing to wait for: say so here.
    assert result.get("result") == "committed", f"version 1: {result}\n{cluster.dump()}"
    serving = Serving(procs, "serving", cluster, *serving_args, env=serving_env)
    serving.wait_version(1)
    return Stack(cluster, serving, spec, procs)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, cube_server_bin):
    """Shared by a module's tests, which must leave version 1 serving."""
    root = tmp_path_factory.mktemp("stack")
    procs = Processes(root)
    try:
        yield start_stack(procs, root, "--max-body-bytes", "200000", "--max-instances", "1000")
    finally:
        procs.stop_all()
