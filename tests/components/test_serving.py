"""Serving: Deployment + Service + HPA, cube.conf mounted, rolled when the shard list changes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from components.kube import KubeTarget
from components.serving import Serving, ServingArgs
from tests.support.components import STORE, env_of, run_component


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
        replicas=2,
        max_replicas=6,
    )
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
    assert graph.one("elasticctr:serving:Serving").outputs["url"] == "http://lb.example.test:8010"


def test_replicas_above_maximum_fail() -> None:
    with pytest.raises(ValueError, match=r"replicas must be from 1 to max_replicas \(6\), got 7"):
        run_component(lambda t: Serving("serving", args(t, replicas=7)))
