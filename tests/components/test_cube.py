"""The cube component: shard servers, agents, transfer, and the shard list serving reads."""

from __future__ import annotations

import json

import pytest

from components.cube import Cube, CubeArgs, cube_conf
from tests.support.components import STORE, env_of, run_component


def cube_graph(shards: int):  # type: ignore[no-untyped-def]
    return run_component(
        lambda t: Cube(
            "cube", CubeArgs(target=t, image="r.test/cube:1", store=STORE, shards=shards)
        )
    )


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_one_pod_per_shard_and_one_conf_entry_per_pod(shards: int) -> None:
    graph = cube_graph(shards)
    statefulset = graph.one("kubernetes:apps/v1:StatefulSet").inputs
    conf = json.loads(graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]["cube.conf"])
    assert statefulset["spec"]["replicas"] == conf["shard"] == len(conf["nodes"]) == shards
    assert [n["ip"] for n in conf["nodes"]] == [
        f"cube-{i}.cube-headless.test-ns.svc.cluster.local" for i in range(shards)
    ]
    assert {(n["port"], n["agent_port"]) for n in conf["nodes"]} == {(8027, 8001)}
    assert graph.one("elasticctr:cube:Cube").outputs["shards"] == shards


def test_shard_pods_know_their_shard() -> None:
    graph = cube_graph(3)
    pod = graph.one("kubernetes:apps/v1:StatefulSet").inputs["spec"]["template"]["spec"]
    server, agent = pod["containers"]
    assert (server["name"], agent["name"]) == ("server", "agent")
    for container in (server, agent):
        env = env_of(container)
        assert env["CUBE_SHARD_NUM"] == "3"
        assert env["CUBE_SHARD_INDEX"] == {
            "fieldRef": {"fieldPath": "metadata.labels['apps.kubernetes.io/pod-index']"}
        }
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
    assert (
        graph.one("kubernetes:apps/v1:StatefulSet").inputs["spec"]["serviceName"] == "cube-headless"
    )


def test_transfer_follows_the_models_and_reads_the_shard_list() -> None:
    graph = cube_graph(2)
    transfer = graph.one("kubernetes:apps/v1:Deployment").inputs
    container = transfer["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert (
        env["MODEL_URI"] == "s3://test-bucket/models" and env["CUBE_URI"] == "s3://test-bucket/cube"
    )
    assert env["CUBE_CONF"] == "/etc/elasticctr/cube.conf" and env["CUBE_KEEP_VERSIONS"] == "3"
    assert transfer["spec"]["replicas"] == 1 and transfer["spec"]["strategy"] == {
        "type": "Recreate"
    }


def test_config_hash_changes_with_the_shard_list() -> None:
    hashes = {cube_graph(n).one("elasticctr:cube:Cube").outputs["config_hash"] for n in (2, 3)}
    assert len(hashes) == 2


def test_cube_conf_routes_key_mod_shard() -> None:
    conf = cube_conf("ns", 4)
    assert conf["dict_name"] == "ctr_embedding" and conf["shard"] == 4


def test_zero_shards_fail_before_any_child() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1, got 0"):
        cube_graph(0)
