"""Fixtures of the serving tests: the native cube-server and request parser, processes
stopped by PID, and a running stack (3 cube shards + transfer + serving) with synthetic
version 1."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from elasticctr_cube.server import build_server
from elasticctr_cube.shardfile import write_shard_file
from elasticctr_serving.native import NativeParser, build_parser

from tests.images.cube.cubetest import CubeCluster, control_call, free_port, load_version
from tests.images.serving.make_model import table
from tests.images.serving.servingtest import Processes, Serving, probe_instances, publish


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


NAN_KEY, HUGE_KEY = 1234, 1500  # poisoned sparse keys of start_poisoned_stack


def clean_instances(spec: dict, count: int, seed: int) -> list[dict]:
    """`count` probe instances that use neither poisoned key."""
    poisoned = {NAN_KEY, HUGE_KEY}
    return [
        i
        for i in probe_instances(spec, count * 2, seed)
        if not any(f % spec["sparse_dim"] in poisoned for e in i["slots"] for f in e["feasigns"])
    ][:count]


def serve_directly(cluster: CubeCluster, version: int, keys, values) -> None:
    """Shard files of `version` written and switched in through each server's control
    port: no build, no agent, no transfer (nothing of this is committed)."""
    for s in range(cluster.shards):
        mine = keys % np.uint64(cluster.shards) == s
        path = cluster.root / f"direct-v{version}-{s}.cube"
        write_shard_file(path, version=version, shard=s, shard_num=cluster.shards,
                         keys=keys[mine], values=values[mine])  # fmt: skip
        port = cluster.node(s).port
        assert load_version(port, version, path)["bg_version"] == version
        assert control_call(port, "POST", "/control/switch", {"version": version})[0] == 200


def start_poisoned_stack(procs: Processes, root) -> Stack:
    """3 cube-servers holding synthetic version 1 with a NaN in the vector of NAN_KEY and
    3e38 (finite, the float32 range ends at 3.4e38) in every value of HUGE_KEY's; serving
    on version 1. The shard files are loaded through the servers' control ports, past the
    builder's and the agents' checks (which refuse NaN): serving must not rely on them.
    Serving is given no transfer (nothing is committed): it follows the servers."""
    cluster = CubeCluster(procs, root, 3, ["--max-attempts", "1"])
    spec = publish(cluster, [1], publish=False)
    keys, values = table(spec, 1)
    values[NAN_KEY - 1, 4] = np.nan  # keys are 1..K
    values[HUGE_KEY - 1] = 3e38
    serve_directly(cluster, 1, keys, values)
    dead = f"http://127.0.0.1:{free_port()}"
    serving = Serving(procs, "serving", cluster, "--cube-transfer-url", dead)
    serving.wait_version(1)
    return Stack(cluster, serving, spec, procs)


def poisoned_stack(tmp_path_factory) -> Iterator[Stack]:
    """The body of a module fixture: start_poisoned_stack, stopped when the module ends."""
    root = tmp_path_factory.mktemp("poisoned")
    procs = Processes(root)
    try:
        yield start_poisoned_stack(procs, root)
    finally:
        procs.stop_all()


@pytest.fixture(scope="module")
def stack(tmp_path_factory, cube_server_bin):
    """Shared by a module's tests, which must leave version 1 serving."""
    root = tmp_path_factory.mktemp("stack")
    procs = Processes(root)
    try:
        yield start_stack(procs, root, "--max-body-bytes", "200000", "--max-instances", "1000")
    finally:
        procs.stop_all()
