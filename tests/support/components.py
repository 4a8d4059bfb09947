"""Run one component under mocks, on a Kubernetes provider of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi_kubernetes as k8s

from components.kube import KubeTarget
from components.object_storage import ObjectStore
from tests.support import pulumi_harness as harness

STORE = ObjectStore(
    endpoint="http://minio.test-ns.svc.cluster.local:9000",
    bucket="test-bucket",
    region="us-east-1",
    credentials_secret="object-storage-credentials",
)


def run_component(build: Callable[[KubeTarget], Any], skip_await: bool = False) -> harness.Graph:
    def program() -> None:
        provider = k8s.Provider("k8s")
        build(KubeTarget(provider=provider, namespace="test-ns", skip_await=skip_await))

    return harness.run(program, {})


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    """name -> value (or valueFrom) of a container's env."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}
