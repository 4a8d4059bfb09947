"""Object storage: MinIO with a user per workload, or an external bucket with each
workload's keys; one S3 interface, each workload its own credentials."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest

from components import kube
from components.bucket_access import BucketUser
from components.object_storage import ObjectStorage, ObjectStorageArgs, ObjectStore
from tests.support.components import env_of, run_component, secret_file_of
from tests.support.pulumi_harness import Graph

READER = BucketUser("serving", ("serving",), read=("models",))
WRITER = BucketUser(
    "training", ("pserver", "trainer"), write=("models", "checkpoints"), delete=("checkpoints",)
)
USERS = (READER, WRITER)


def storage(mode: str = "minio", **fields: Any) -> tuple[Graph, dict[str, ObjectStore]]:
    found: dict[str, ObjectStore] = {}

    def build(target):
        base: dict[str, Any] = {"bucket": "models", "region": "us-east-1", "users": USERS}
        if mode == "minio":
            base["minio_image"] = "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z"
            base["minio_resources"] = ("20Gi", 0.5, 1.0)
        else:
            base["endpoint"] = "https://s3.bj.bcebos.com"
        args = ObjectStorageArgs(target=target, mode=mode, **{**base, **fields})  # type: ignore[arg-type]
        found.update(ObjectStorage("storage", args).stores)

    return run_component(build), found


def secrets(graph: Graph) -> dict[str, Any]:
    return {s.inputs["metadata"]["name"]: s for s in graph.of_type("kubernetes:core/v1:Secret")}


def test_minio_runs_with_root_keys_of_its_own() -> None:
    graph, _ = storage(minio_resources=("5Gi", 0.5, 1.0))
    # Root keys (same resource names as the keys all workloads once shared: an existing
    # MinIO keeps its root user), and two per workload.
    generated = {
        r.name: r.inputs["length"] for r in graph.of_type("pulumi-python:dynamic:Resource")
    }
    assert generated == {
        "storage-access-key": 20,
        "storage-secret-key": 40,
        **{f"storage-{u}-{k}-key": n for u in ("serving", "training") for k, n in (("access", 20), ("secret", 40))},
    }  # fmt: skip
    root = secrets(graph)["minio-root"]
    assert set(root.inputs["stringData"]) == {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}
    assert "stringData" in root.secret_paths
    minio = graph.one("kubernetes:apps/v1:StatefulSet").inputs["spec"]
    assert minio["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert minio["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    pod = minio["template"]["spec"]
    # MinIO reads MINIO_ROOT_USER_FILE and MINIO_ROOT_PASSWORD_FILE itself.
    for var in ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"):
        assert var not in env_of(pod["containers"][0])
        assert secret_file_of(pod, pod["containers"][0], var) == {"name": "minio-root", "key": var}
    outputs = graph.one("elasticctr:storage:ObjectStorage").outputs
    assert outputs == {
        "endpoint": "http://minio.test-ns.svc.cluster.local:9000",
        "bucket": "models",
    }


def test_minio_makes_a_user_per_workload_with_its_policy() -> None:
    graph, stores = storage()
    for name in ("serving", "training"):
        secret = secrets(graph)[f"storage-{name}"]
        assert set(secret.inputs["stringData"]) == {
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "credentials",
        }
        assert "stringData" in secret.secret_paths
        files = stores[name].secret_files()
        pod = kube.api_fields({"volumes": list(files.volumes)})
        container = kube.api_fields({"env": list(files.env), "volume_mounts": list(files.mounts)})
        # (the Secret's name is an output here: the rendered pods' tests check it)
        assert secret_file_of(pod, container, "AWS_SHARED_CREDENTIALS")["key"] == "credentials"
        assert not {e["name"] for e in stores[name].env()} & {
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        }
    policies = graph.one("kubernetes:core/v1:ConfigMap").inputs["data"]
    serving = json.loads(policies["serving.json"])["Statement"]
    assert [s["Action"] for s in serving] == [["s3:ListBucket"], ["s3:GetObject"]]
    assert serving[1]["Resource"] == ["arn:aws:s3:::models/models/*"]
    job = graph.one("kubernetes:batch/v1:Job")
    assert job.replace_on_changes == ["spec"] and job.delete_before_replace
    pod = job.inputs["spec"]["template"]
    assert pod["metadata"]["annotations"]["elasticctr.io/policies-sha256"]
    container = pod["spec"]["containers"][0]
    script = container["command"][-1]
    assert "mc mb --ignore-existing local/models" in script
    assert (
        "mc admin policy create local elasticctr-serving /etc/elasticctr/minio/serving.json"
        in script
    )
    assert 'mc admin user add local "$TRAINING_ACCESS_KEY" "$TRAINING_SECRET_KEY"' in script
    pod_spec = pod["spec"]
    assert secret_file_of(pod_spec, container, "SERVING_SECRET_KEY") == {
        "name": "storage-serving",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    assert secret_file_of(pod_spec, container, "MINIO_ROOT_PASSWORD")["name"] == "minio-root"
    assert not any("valueFrom" in e for e in container["env"])


def test_minio_takes_connections_from_the_workloads_and_its_job_only() -> None:
    graph, _ = storage()
    (ingress,) = [
        p.inputs["spec"]
        for p in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["name"] == "allow-minio"
    ]
    clients = [
        f["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for f in ingress["ingress"][0]["from"]
    ]
    assert clients == ["serving", "pserver", "trainer", "minio-client"]


def test_external_keys_per_workload_else_the_shared_ones() -> None:
    graph, stores = storage(
        "external",
        access_key="AK-shared",
        secret_key="SK-shared",
        user_keys={"serving": ("AK-serving", "SK-serving")},
    )
    made = secrets(graph)
    assert made["storage-serving"].inputs["stringData"]["AWS_ACCESS_KEY_ID"] == "AK-serving"
    assert made["storage-training"].inputs["stringData"]["AWS_ACCESS_KEY_ID"] == "AK-shared"
    kinds = {r.type for r in graph.resources if r.custom}
    assert kinds == {"pulumi:providers:kubernetes", "kubernetes:core/v1:Secret"}
    assert set(stores) == {"serving", "training"}


def test_external_without_keys_relies_on_pod_identity() -> None:
    graph, stores = storage("external", endpoint="https://s3.amazonaws.com", region="us-west-2")
    assert secrets(graph) == {}
    names = [e["name"] for e in stores["serving"].env()]
    assert names == ["AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "AWS_DEFAULT_REGION"]
    assert stores["serving"].uri("/models/") == "s3://models/models"


def test_missing_or_misplaced_parts_fail_before_any_child() -> None:
    def make(mode: Literal["minio", "external"], **fields: Any) -> None:
        run_component(
            lambda t: ObjectStorage(
                "s",
                ObjectStorageArgs(
                    target=t, mode=mode, bucket="b", region="r", users=USERS, **fields
                ),
            )
        )

    with pytest.raises(ValueError, match="minio_image and minio_resources are required"):
        make("minio")
    with pytest.raises(ValueError, match="endpoint is required"):
        make("external")
    with pytest.raises(ValueError, match=r"user_keys for workloads without access: \['mlflow'\]"):
        make("external", endpoint="https://e", user_keys={"mlflow": ("a", "b")})
    with pytest.raises(ValueError, match="MinIO makes its users' keys"):
        make(
            "minio",
            minio_image="m:1",
            minio_resources=("1Gi", 0.5, 1.0),
            user_keys={"serving": ("a", "b")},
        )
