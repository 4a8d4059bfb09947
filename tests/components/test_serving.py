"""Serving: Deployment + Service + HPA, cube.conf mounted, rolled when the shard list changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from components.kube import KubeTarget
from components.serving import Serving, ServingArgs
from infra.config import FeedbackConfig, ServingConfig
from tests.support.components import STORE, env_of, run_component, secret_file_of
from tests.support.pulumi_harness import Graph


def args(target: KubeTarget, **overrides: Any) -> ServingArgs:
    base = ServingArgs(
        target=target,
        image="r.test/serving:1",
        store=STORE,
        slot_conf_map="slot-conf",
        cube_conf_map="cube-conf",
        cube_conf_hash="abc123",
        cube_transfer_url="http://t:8099",
        sparse_dim=1000,
        **{**ServingConfig().model_dump(), "source_ranges": (), "auth": False},
        feedback_sample_rate=FeedbackConfig().sample_rate,
        feedback_buffer_records=FeedbackConfig().buffer_records,
        feedback_compression=FeedbackConfig().compression,
    )
    base = dataclasses.replace(base, replicas=2, max_replicas=6)
    return dataclasses.replace(base, **overrides)


def test_deployment_autoscaled_with_config_mounted() -> None:
    graph = run_component(lambda t: Serving("serving", args(t)))
    deployment = graph.one("kubernetes:apps/v1:Deployment")
    spec = deployment.inputs["spec"]
    assert spec["replicas"] == 2 and "spec.replicas" in deployment.ignore_changes
    pod = spec["template"]
    assert pod["metadata"]["annotations"]["elasticctr.io/cube-conf-sha256"] == "abc123"
    sources = pod["spec"]["volumes"][0]["projected"]["sources"]
    assert [s["configMap"]["name"] for s in sources] == ["cube-conf", "slot-conf"]
    env = env_of(pod["spec"]["containers"][0])
    assert (
        env["CUBE_CONF"] == "/etc/elasticctr/cube.conf"
        and env["MODEL_URI"] == "s3://test-bucket/models"
    )
    hpa = graph.one("kubernetes:autoscaling/v2:HorizontalPodAutoscaler").inputs["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 6)
    assert hpa["scaleTargetRef"]["name"] == deployment.inputs["metadata"]["name"]


def test_url_of_a_load_balancer() -> None:
    graph = run_component(lambda t: Serving("serving", args(t, service_type="LoadBalancer")))
    outputs = graph.component_outputs("elasticctr:serving:Serving")
    assert outputs["url"] == "http://lb.example.test:8010"
    assert outputs["grpc_address"] == "lb.example.test:8011"


def test_grpc_beside_http_on_the_pods_and_the_service() -> None:
    graph = run_component(lambda t: Serving("serving", args(t)))
    container = graph.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "--grpc-port=8011" in container["args"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        ("http", 8010),
        ("grpc", 8011),
    ]
    service = graph.one("kubernetes:core/v1:Service").inputs["spec"]
    assert [(p["name"], p["port"]) for p in service["ports"]] == [("http", 8010), ("grpc", 8011)]
    outputs = graph.component_outputs("elasticctr:serving:Serving")
    assert outputs["grpc_address"] == "serving.test-ns.svc.cluster.local:8011"


def test_replicas_above_maximum_fail() -> None:
    with pytest.raises(ValueError, match=r"replicas must be from 1 to max_replicas \(6\), got 7"):
        run_component(lambda t: Serving("serving", args(t, replicas=7)))


def test_source_ranges_limit_the_load_balancer_and_the_pods() -> None:
    ranges = ("203.0.113.0/24", "2001:db8::/32")
    graph = run_component(
        lambda t: Serving(
            "serving",
            args(
                t,
                service_type="LoadBalancer",
                source_ranges=ranges,
                service_annotations={"lb.example.test/type": "nlb"},
            ),
        )
    )
    service = graph.one("kubernetes:core/v1:Service").inputs
    assert service["spec"]["loadBalancerSourceRanges"] == list(ranges)
    # Client addresses reach the pods unchanged, for the NetworkPolicy to judge them.
    assert service["spec"]["externalTrafficPolicy"] == "Local"
    # The user's annotations, plus skipAwait (serving is ready only after a first model).
    assert service["metadata"]["annotations"] == {
        "lb.example.test/type": "nlb",
        "pulumi.com/skipAwait": "true",
    }
    assert policy(graph, "allow-serving")["ingress"] == [
        {
            "ports": [{"port": 8010, "protocol": "TCP"}, {"port": 8011, "protocol": "TCP"}],
            "from": [{"ipBlock": {"cidr": cidr}} for cidr in ranges],
        }
    ]


def test_without_source_ranges_any_address_and_cluster_routing() -> None:
    graph = run_component(lambda t: Serving("serving", args(t, service_type="NodePort")))
    spec = graph.one("kubernetes:core/v1:Service").inputs["spec"]
    assert "loadBalancerSourceRanges" not in spec and "externalTrafficPolicy" not in spec
    assert "from" not in policy(graph, "allow-serving")["ingress"][0]


def test_auth_gives_the_pods_a_generated_token_from_a_secret() -> None:
    graph = run_component(lambda t: Serving("serving", args(t, auth=True)))
    (credential,) = graph.of_type("pulumi-python:dynamic:Resource")
    assert credential.inputs["length"] == 40 and "value" in credential.additional_secret_outputs
    secret = graph.one("kubernetes:core/v1:Secret")
    assert secret.inputs["metadata"]["name"] == "serving-auth"
    assert "stringData" in secret.secret_paths
    pod = graph.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    assert "SERVING_AUTH_TOKEN" not in env_of(pod["containers"][0])
    assert secret_file_of(pod, pod["containers"][0], "SERVING_AUTH_TOKEN") == {
        "name": "serving-auth",
        "key": "SERVING_AUTH_TOKEN",
    }
    outputs = graph.component_outputs("elasticctr:serving:Serving")
    assert outputs["token"] == "g" * 40  # the mocks' generated value


def test_without_auth_no_token() -> None:
    graph = run_component(lambda t: Serving("serving", args(t)))
    assert graph.of_type("kubernetes:core/v1:Secret") == []
    container = graph.one("kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "SERVING_AUTH_TOKEN" not in env_of(container)


def policy(graph: Graph, name: str) -> dict[str, Any]:
    (found,) = [
        p.inputs["spec"]
        for p in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["name"] == name
    ]
    return dict(found)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_drain_takes_one_serving_pod_at_a_time(replicas: int) -> None:
    """One pod at a time at any count the HPA scales to; with one replica a drain still
    goes through; a pod that is not ready never holds a drain up."""
    graph = run_component(lambda t: Serving("serving", args(t, replicas=replicas)))
    budget = graph.one("kubernetes:policy/v1:PodDisruptionBudget").inputs
    deployment = graph.one("kubernetes:apps/v1:Deployment").inputs
    assert budget["metadata"]["name"] == "serving"
    assert budget["spec"] == {
        "maxUnavailable": 1,
        "selector": deployment["spec"]["selector"],
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels.items() >= budget["spec"]["selector"]["matchLabels"].items()
