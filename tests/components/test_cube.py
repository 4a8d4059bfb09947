"""The cube component: shards of replicas, agents, transfer, and the shard list serving
reads (Paddle Serving's cube.conf form, checked with Paddle's own readers' logic)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.cube import Cube, CubeArgs, cube_conf
from infra.config import CubeConfig
from tests.support.components import STORE, env_of, run_component
from tests.support.paddle_cube import PythonMeta, cpp_meta

DOMAIN = "test-ns.svc.cluster.local"


def cube_graph(shards: int, replicas: int = 1, **more: Any):
    return run_component(
        lambda t: Cube(
            "cube",
            CubeArgs(
                target=t, image="r.test/cube:1", store=STORE, shards=shards,
                **{**CubeConfig().model_dump(), "replicas": replicas, **more},
            ),
        )
    )  # fmt: skip


def shard_sets(graph) -> list[dict[str, Any]]:
    sets = [r.inputs for r in graph.of_type("kubernetes:apps/v1:StatefulSet")]
    return sorted(sets, key=lambda s: int(s["metadata"]["name"].rsplit("-", 1)[1]))


def layout_of(graph) -> str:
    return graph.one("elasticctr:cube:Cube").outputs["layout"]


@pytest.mark.parametrize(("shards", "replicas"), [(1, 1), (3, 2), (8, 3)])
def test_one_stateful_set_per_shard_and_its_replicas_in_cube_conf(
    shards: int, replicas: int
) -> None:
    graph = cube_graph(shards, replicas)
    text = graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]["cube.conf"]
    (conf,) = json.loads(text)  # Paddle's form: a list of dicts
    assert (conf["shard"], conf["dup"], conf["type"]) == (shards, replicas, "ipport_list")
    sets = shard_sets(graph)
    layout = layout_of(graph)
    assert len(layout) == 8 and int(layout, 16) >= 0
    assert [s["metadata"]["name"] for s in sets] == [f"cube-{layout}-{i}" for i in range(shards)]
    assert {s["spec"]["replicas"] for s in sets} == {replicas}
    channels = cpp_meta(text)["ctr_embedding"]["channels"]  # Paddle's C++ client
    assert channels == [
        [(f"cube-{layout}-{s}-{r}.cube-headless.{DOMAIN}", 8027) for r in range(replicas)]
        for s in range(shards)
    ]
    python = PythonMeta(text).server_meta["ctr_embedding"]  # Paddle's Python client
    assert [(n["ip"], n["port"]) for n in python["nodes"]] == [
        (f"cube-{layout}-{s}.{DOMAIN}", 8027) for s in range(shards)
    ]
    services = {s.inputs["metadata"]["name"]: s.inputs["spec"]
                for s in graph.of_type("kubernetes:core/v1:Service")}  # fmt: skip
    for s in range(shards):  # the address Paddle's Python client asks: the shard's pods
        selector = services[f"cube-{layout}-{s}"]["selector"]
        assert selector["elasticctr.io/cube-shard"] == str(s)
        assert selector["elasticctr.io/cube-layout"] == layout
    assert graph.one("elasticctr:cube:Cube").outputs["shards"] == shards


def test_cube_conf_carries_the_clients_options() -> None:
    graph = cube_graph(2, 2, timeout_ms=300, retry=1, backup_request_ms=20, load_balancer="la")
    (conf,) = json.loads(graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]["cube.conf"])
    assert {k: conf[k] for k in ("timeout", "retry", "backup_request", "load_balancer")} == {
        "timeout": 300, "retry": 1, "backup_request": 20, "load_balancer": "la"
    }  # fmt: skip
    # serving's per-request key limit is cube's: one number for the servers and cube.conf
    server = shard_sets(graph)[0]["spec"]["template"]["spec"]["containers"][0]
    assert f"--max-keys={conf['max_keys']}" in server["args"]


def test_a_drain_takes_one_replica_of_a_shard_at_a_time_on_different_nodes() -> None:
    graph = cube_graph(3, 2)
    budgets = {b.inputs["metadata"]["name"]: b.inputs["spec"]
               for b in graph.of_type("kubernetes:policy/v1:PodDisruptionBudget")}  # fmt: skip
    layout = layout_of(graph)
    assert sorted(budgets) == [f"cube-{layout}-{s}" for s in range(3)]
    for s, spec in enumerate(shard_sets(graph)):
        name = spec["metadata"]["name"]
        shard = {
            "app.kubernetes.io/component": "cube",
            "elasticctr.io/cube-shard": str(s),
            "elasticctr.io/cube-layout": layout,
        }
        assert budgets[name]["maxUnavailable"] == 1
        assert budgets[name]["selector"]["matchLabels"].items() >= shard.items()
        pod = spec["spec"]["template"]
        assert pod["metadata"]["labels"].items() >= shard.items()
        preferred = pod["spec"]["affinity"]["podAntiAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        # Apart on nodes first, then on zones.
        weights = {p["podAffinityTerm"]["topologyKey"]: p["weight"] for p in preferred}
        assert weights == {"kubernetes.io/hostname": 100, "topology.kubernetes.io/zone": 50}
        for term in (p["podAffinityTerm"] for p in preferred):
            assert term["labelSelector"]["matchLabels"].items() >= shard.items()


def test_shard_pods_know_their_shard() -> None:
    graph = cube_graph(3, 2)
    for s, spec in enumerate(shard_sets(graph)):
        pod = spec["spec"]["template"]["spec"]
        server, agent = pod["containers"]
        assert (server["name"], agent["name"]) == ("server", "agent")
        for container in (server, agent):
            env = env_of(container)
            assert (env["CUBE_SHARD_INDEX"], env["CUBE_SHARD_NUM"]) == (str(s), "3")
        assert "AWS_ENDPOINT_URL" in env_of(agent) and "AWS_ENDPOINT_URL" not in env_of(server)
        assert server["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8027}


def test_stable_dns_even_before_a_first_version() -> None:
    graph = cube_graph(2)
    services = {
        s.inputs["metadata"]["name"]: s.inputs["spec"]
        for s in graph.of_type("kubernetes:core/v1:Service")
    }
    assert services["cube-headless"]["clusterIP"] == "None"
    assert services["cube-headless"]["publishNotReadyAddresses"] is True
    assert {s["spec"]["serviceName"] for s in shard_sets(graph)} == {"cube-headless"}


def test_transfer_follows_the_models_and_reads_the_shard_list() -> None:
    graph = cube_graph(2)
    transfer = graph.one("kubernetes:apps/v1:Deployment").inputs
    container = transfer["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert (
        env["MODEL_URI"] == "s3://test-bucket/models" and env["CUBE_URI"] == "s3://test-bucket/cube"
    )
    assert env["CUBE_CONF"] == "/etc/elasticctr/cube.conf" and env["CUBE_KEEP_VERSIONS"] == "3"
    assert (env["CUBE_BASE_EVERY"], env["CUBE_MAX_CHAIN_FRACTION"]) == ("10", "0.5")
    changed = cube_graph(2, base_every=4, max_chain_fraction=0.25)
    env = env_of(changed.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
                 ["containers"][0])  # fmt: skip
    assert (env["CUBE_BASE_EVERY"], env["CUBE_MAX_CHAIN_FRACTION"]) == ("4", "0.25")
    assert transfer["spec"]["replicas"] == 1 and transfer["spec"]["strategy"] == {
        "type": "Recreate"
    }


def test_config_hash_changes_with_the_shard_list() -> None:
    hashes = {
        cube_graph(n, r).one("elasticctr:cube:Cube").outputs["config_hash"]
        for n, r in ((2, 1), (3, 1), (3, 2))
    }
    assert len(hashes) == 3


def test_cube_conf_routes_key_mod_shard() -> None:
    args = CubeArgs(target=None, image="", store=STORE, shards=4, **CubeConfig().model_dump())  # type: ignore[arg-type]
    conf = cube_conf("ns", "0123abcd", args)
    assert conf.dict_name == "ctr_embedding" and conf.shard == len(conf.nodes) == 4
    assert conf.nodes[3].ip == "cube-0123abcd-3.ns.svc.cluster.local"


def test_the_layout_is_new_whenever_the_shard_pods_would_change() -> None:
    """A new layout means new shard pods beside the old ones (components/cube.py); the same
    config gives the same layout, so a no-op `up` changes nothing."""
    base = layout_of(cube_graph(2, 1))
    assert layout_of(cube_graph(2, 1)) == base
    changed = {
        "shards": layout_of(cube_graph(3, 1)),
        "replicas": layout_of(cube_graph(2, 2)),
        "cpu": layout_of(cube_graph(2, 1, cpu=2.0)),
        "mem": layout_of(cube_graph(2, 1, mem=8.0)),
        "storage": layout_of(cube_graph(2, 1, storage="50Gi")),
        "node_pool": layout_of(cube_graph(2, 1, node_pool="cube")),
    }
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed
    # What only serving and the transfer read leaves the shard pods, and their layout, alone.
    for more in (
        {"timeout_ms": 300}, {"transfer_cpu": 2.0}, {"keep_versions": 5}, {"base_every": 3},
        {"max_chain_fraction": 0.1},
    ):  # fmt: skip
        assert layout_of(cube_graph(2, 1, **more)) == base, more


def test_zero_shards_or_replicas_fail_before_any_child() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1, got 0"):
        cube_graph(0)
    with pytest.raises(ValueError, match="replicas must be >= 1, got 0"):
        cube_graph(2, 0)


def test_version_changes_listen_on_loopback_apart_from_the_readers_port() -> None:
    """The port serving reads (8027) takes no load, switch or unload, and the transfer's
    port (8099) no rollback: those are on control ports the pods bind to loopback (the
    agent beside its server; people through a port-forward), which no NetworkPolicy need
    open and no other pod can reach."""
    graph = cube_graph(2)
    server, agent = shard_sets(graph)[0]["spec"]["template"]["spec"]["containers"]
    assert {"--port=8027", "--control-port=8028"} <= set(server["args"])
    assert "--server=http://127.0.0.1:8028" in agent["args"]
    assert [p["containerPort"] for p in server["ports"]] == [8027]
    transfer = graph.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    assert {"--port=8099", "--control-port=8098"} <= set(transfer["containers"][0]["args"])
    assert not any(
        "--control-host" in a for c in (server, *transfer["containers"]) for a in c["args"]
    )
