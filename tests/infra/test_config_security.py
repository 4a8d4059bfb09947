"""Config of the stack's exposure and credentials (docs/architecture.md, "Security"):
what reaches serving, the bucket keys per workload, the ports of an external HDFS."""

from __future__ import annotations

from typing import Any

import pytest

from infra.load_config import ConfigError
from infra.program import main
from tests.infra.test_config import problems_of
from tests.support import pulumi_harness as harness
from tests.support.stacks import graph as stack_graph
from tests.support.stacks import run_stack


def _egress(graph: harness.Graph, component: str) -> list[dict[str, Any]]:
    [policy] = [
        p.inputs["spec"]
        for p in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["name"] == f"egress-{component}"
    ]
    return list(policy["egress"])


def test_an_external_hdfs_is_reached_on_its_namenode_and_datanode_ports() -> None:
    graph = harness.run(
        main,
        {
            "elasticctr:hdfs": {
                "mode": "external",
                "address": "hdfs://10.20.0.4:9000",
                "datanode_port": 50010,
            },
            "elasticctr:data": {"ugi": "alice,pw"},
        },
        ("elasticctr:data",),
    )
    rules = _egress(graph, "trainer")
    namenode = {"ipBlock": {"cidr": "10.20.0.4/32"}}
    assert {"to": [namenode], "ports": [{"port": 9000, "protocol": "TCP"}]} in rules
    assert {"ports": [{"port": 50010, "protocol": "TCP"}]} in rules


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"hdfs": {"mode": "in-cluster", "datanode_port": 50010}},
            "elasticctr:hdfs.datanode_port is only for mode external, got 50010 with mode in-cluster",
        ),
        (
            {"hdfs": {"mode": "none", "address": "hdfs://nn:8020"}, "data": {"source": "storage"}},
            'elasticctr:hdfs.address is only for mode external, got "hdfs://nn:8020" with mode none',
        ),
    ],
)
def test_refused(config: dict[str, Any], expected: str) -> None:
    assert problems_of({f"elasticctr:{k}": v for k, v in config.items()}) == [expected]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"serving": {"service_type": "LoadBalancer"}},
            "elasticctr:serving.service_type LoadBalancer is reachable from the internet: set "
            "serving.source_ranges (the address blocks clients connect from) or serving.auth "
            'token, or both, got "LoadBalancer" with neither',
        ),
        (
            {"serving": {"source_ranges": ["10.0.0.1/8"]}},
            "elasticctr:serving.source_ranges.0 must be an address block such as 203.0.113.0/24 "
            '(10.0.0.1/8 has host bits set), got "10.0.0.1/8"',
        ),
        (
            {"serving": {"source_ranges": ["office"]}},
            "elasticctr:serving.source_ranges.0 must be an address block such as 203.0.113.0/24 "
            "('office' does not appear to be an ipv4 or ipv6 network), got \"office\"",
        ),
        (
            {"serving": {"auth": "password"}},
            'elasticctr:serving.auth must be one of none, token, got "password"',
        ),
    ],
)
def test_serving_exposure_refused(config: dict[str, Any], expected: str) -> None:
    assert problems_of({f"elasticctr:{k}": v for k, v in config.items()}) == [expected]


@pytest.mark.parametrize("stack", ["baidu-prod", "huawei-prod"])
def test_source_ranges_where_the_load_balancer_hides_client_addresses(stack: str) -> None:
    serving = {**harness.stack_config(stack)["elasticctr:serving"], "source_ranges": ["10.0.0.0/8"]}
    with pytest.raises(ConfigError) as failure:
        run_stack(stack, {"elasticctr:serving": serving})
    cloud = stack.split("-")[0]
    assert failure.value.problems == [
        f"elasticctr:serving.source_ranges cannot be kept by a LoadBalancer on cloud {cloud}: its "
        "default load balancer does not pass client addresses on, so the pods' NetworkPolicy "
        "would refuse every client; use serving.auth token (and the load balancer's own access "
        'control, docs/architecture.md), got ["10.0.0.0/8"]'
    ]


@pytest.mark.parametrize("stack", ["aws-prod", "baidu-prod", "huawei-prod"])
def test_prod_stacks_guard_their_public_serving(stack: str) -> None:
    graph = stack_graph(stack)
    assert graph.stack_outputs["serving_token"] and "serving_token" in graph.stack_secret_outputs
    service = next(
        s.inputs for s in graph.of_type("kubernetes:core/v1:Service")
        if s.inputs["metadata"]["name"] == "serving"
    )  # fmt: skip
    if stack == "aws-prod":  # an NLB, which passes client addresses on to the pods
        assert service["spec"]["loadBalancerSourceRanges"] == ["198.51.100.0/24", "203.0.113.0/24"]
        assert service["spec"]["externalTrafficPolicy"] == "Local"
        annotations = service["metadata"]["annotations"]
        assert annotations["service.beta.kubernetes.io/aws-load-balancer-type"] == "nlb"


def test_a_load_balancer_with_a_token_alone_is_accepted() -> None:
    graph = harness.run(
        main, {"elasticctr:serving": {"service_type": "LoadBalancer", "auth": "token"}}
    )
    assert "serving_token" in graph.stack_secret_outputs


WORKLOADS = ("training", "serving", "cube", "cube_transfer", "mlflow")


def _baidu(storage: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    config = harness.stack_config("baidu-prod")
    config["elasticctr:data"] = {**config["elasticctr:data"], "ugi": "alice,pw"}
    config["elasticctr:storage"] = {**config["elasticctr:storage"], **storage}
    return config, ("elasticctr:data", "elasticctr:storage")


def _keys_of(graph: harness.Graph) -> dict[str, str]:
    return {
        s.inputs["metadata"]["name"]: s.inputs["stringData"]["AWS_ACCESS_KEY_ID"]
        for s in graph.of_type("kubernetes:core/v1:Secret")
        if s.inputs["metadata"]["name"].startswith("storage-")
    }


def test_each_workload_its_own_keys_and_no_shared_ones() -> None:
    own = {w: {"access_key": f"AK-{w}", "secret_key": f"SK-{w}"} for w in WORKLOADS}
    graph = harness.run(main, *_baidu({"workload_keys": own}), stack="baidu-prod")
    assert _keys_of(graph) == {f"storage-{w.replace('_', '-')}": f"AK-{w}" for w in WORKLOADS}


def test_workloads_without_keys_of_their_own_use_the_shared_ones() -> None:
    storage = {
        "access_key": "AK-shared",
        "secret_key": "SK-shared",
        "workload_keys": {"serving": {"access_key": "AK-serving", "secret_key": "SK-serving"}},
    }
    keys = _keys_of(harness.run(main, *_baidu(storage), stack="baidu-prod"))
    assert keys.pop("storage-serving") == "AK-serving"
    assert set(keys.values()) == {"AK-shared"} and len(keys) == 4


@pytest.mark.parametrize(
    ("stack", "storage", "expected"),
    [
        (
            "baidu-prod",
            {"workload_keys": {"serving": {"access_key": "a", "secret_key": "b"}}},
            "elasticctr:storage.access_key must be set (with --secret) in mode cloud on baidu: "
            "the workloads without keys of their own (cube, cube-transfer, mlflow, training) "
            "reach the bucket with these keys",
        ),
        (
            "baidu-prod",
            {"access_key": "a", "secret_key": "b", "workload_keys": {"cube": {"access_key": "a"}}},
            "elasticctr:storage.workload_keys.cube.secret_key must be set together with "
            "access_key (both or neither)",
        ),
        (
            "aws-prod",
            {"workload_keys": {"serving": {"access_key": "a", "secret_key": "b"}}},
            "elasticctr:storage.workload_keys must not be set in mode cloud on aws: each "
            "workload reaches S3 as its own role (EKS Pod Identity)",
        ),
        (
            "dev",
            {"workload_keys": {"serving": {"access_key": "a", "secret_key": "b"}}},
            "elasticctr:storage.workload_keys must be unset in mode minio: the stack makes a "
            "MinIO user per workload, got keys for serving",
        ),
    ],
)
def test_workload_keys_refused(stack: str, storage: dict[str, Any], expected: str) -> None:
    config = harness.stack_config(stack)
    if stack == "baidu-prod":
        config["elasticctr:data"] = {**config["elasticctr:data"], "ugi": "alice,pw"}
    config["elasticctr:storage"] = {**config.get("elasticctr:storage", {}), **storage}
    secret = ("elasticctr:data", "elasticctr:storage")
    assert problems_of(config, secret) == [expected]


def test_keys_of_a_workload_the_stack_does_not_run_are_refused() -> None:
    config = {
        "elasticctr:mlflow": {"enabled": False},
        "elasticctr:storage": {
            "mode": "external",
            "endpoint": "https://s3.example.test",
            "workload_keys": {"mlflow": {"access_key": "a", "secret_key": "b"}},
        },
    }
    assert problems_of(config, ("elasticctr:storage",)) == [
        "elasticctr:storage.workload_keys.mlflow is for a stack with mlflow.enabled true"
    ]


def test_workload_keys_must_be_set_as_secrets() -> None:
    config = {
        "elasticctr:storage": {
            "mode": "external",
            "endpoint": "https://s3.example.test",
            "workload_keys": {"serving": {"access_key": "a", "secret_key": "b"}},
        }
    }
    assert problems_of(config) == [
        f"elasticctr:storage.workload_keys.serving.{key} must be set as a secret: pulumi "
        f"config set --secret --path storage.workload_keys.serving.{key} <value>"
        for key in ("access_key", "secret_key")
    ]


def test_workload_keys_holding_no_key_hold_no_secret() -> None:
    # Pulumi.yaml's default as an older generator wrote it: objects, but no value in them.
    empty: dict[str, dict[str, str]] = {
        name: {} for name in ("training", "serving", "cube", "cube_transfer", "mlflow")
    }
    harness.run(main, {"elasticctr:storage": {"mode": "minio", "workload_keys": empty}})


def test_an_external_endpoint_by_ip_is_one_address() -> None:
    graph = harness.run(
        main,
        {
            "elasticctr:storage": {
                "mode": "external",
                "endpoint": "http://10.0.0.5:9000",
                "access_key": "a",
                "secret_key": "b",
            }
        },
        ("elasticctr:storage",),
    )
    store = {
        "to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}],
        "ports": [{"port": 9000, "protocol": "TCP"}],
    }
    for component in ("pserver", "trainer", "cube", "cube-transfer", "serving", "mlflow"):
        assert store in _egress(graph, component), component
