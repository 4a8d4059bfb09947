"""Run one component under mocks, on a Kubernetes provider of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pulumi_kubernetes as k8s
from elasticctr_common.secrets import file_variable

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


def secret_file_of(pod_spec: dict[str, Any], container: dict[str, Any], var: str) -> dict[str, str]:
    """The Secret key a container reads as secret `var` (elasticctr_common.secrets: the file
    `<var>_FILE` names, in a Secret volume mounted read-only): {"name": ..., "key": ...}, in
    the shape of a secretKeyRef. Fails when any link of that chain is missing."""
    path = env_of(container)[file_variable(var)]
    directory, _, file = path.rpartition("/")
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount.get("readOnly") is True, f"{var}: {directory} is mounted writable"
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    (item,) = [i for i in secret.get("items", [{"key": file, "path": file}]) if i["path"] == file]
    return {"name": secret["secretName"], "key": item["key"]}
