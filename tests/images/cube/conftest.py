"""Fixtures for the cube tests: the native server binary, real processes, a 3-shard cluster.

Every process a test starts is stopped by PID when the test ends, pass or fail.
"""

from __future__ import annotations

import pytest
from elasticctr_cube.server import build_server

from tests.support.cube import CubeCluster, Procs


@pytest.fixture(scope="session")
def cube_server_bin() -> str:
    """The native cube-server, built once per session by cargo (incremental in target/)."""
    return build_server()


@pytest.fixture
def procs(tmp_path):
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.stop_all()


@pytest.fixture
def cube_cluster(procs, tmp_path, cube_server_bin):
    """Factory: cube_cluster(shards=3, transfer_args=[...], replicas=1, **cube.conf fields)
    -> a running CubeCluster."""

    def make(shards: int = 3, transfer_args: list[str] | None = None, replicas: int = 1,
             **conf) -> CubeCluster:  # fmt: skip
        args = ["--max-attempts", "1", "--unload-previous-after", "0.5", *(transfer_args or [])]
        return CubeCluster(procs, tmp_path, shards, args, replicas, **conf)

    return make
