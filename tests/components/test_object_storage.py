"""Object storage: MinIO with generated keys, or an external bucket; one S3 interface."""

from __future__ import annotations

import pytest

from components.object_storage import ObjectStorage, ObjectStorageArgs
from tests.support.components import env_of, run_component


def test_minio_mode_runs_minio_with_generated_secret_keys() -> None:
    graph = run_component(
        lambda t: ObjectStorage(
            "storage",
            ObjectStorageArgs(
                target=t,
                mode="minio",
                bucket="models",
                region="us-east-1",
                minio_image="quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z",
                size="5Gi",
            ),
        )
    )
    assert len(graph.of_type("pulumi-python:dynamic:Resource")) == 2
    secret = graph.one("kubernetes:core/v1:Secret")
    assert set(secret.inputs["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert "stringData" in secret.secret_paths
    minio = graph.one("kubernetes:apps/v1:StatefulSet").inputs["spec"]
    assert minio["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert minio["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "5Gi"
    env = env_of(minio["template"]["spec"]["containers"][0])
    assert env["MINIO_ROOT_USER"]["secretKeyRef"]["key"] == "AWS_ACCESS_KEY_ID"
    job = graph.one("kubernetes:batch/v1:Job").inputs["spec"]["template"]["spec"]["containers"][0]
    assert "mc mb --ignore-existing local/models" in job["command"][-1]
    outputs = graph.one("elasticctr:storage:ObjectStorage").outputs
    assert outputs == {
        "endpoint": "http://minio.test-ns.svc.cluster.local:9000",
        "bucket": "models",
    }


def test_external_mode_with_keys_makes_only_the_secret() -> None:
    graph = run_component(
        lambda t: ObjectStorage(
            "storage",
            ObjectStorageArgs(
                target=t,
                mode="external",
                bucket="b",
                region="bj",
                endpoint="https://s3.bj.bcebos.com",
                access_key="AK",
                secret_key="SK",
            ),
        )
    )
    kinds = {r.type for r in graph.resources if r.custom}
    assert kinds == {"pulumi:providers:kubernetes", "kubernetes:core/v1:Secret"}


def test_external_mode_without_keys_relies_on_pod_identity() -> None:
    stores = []
    run_component(
        lambda t: stores.append(
            ObjectStorage(
                "storage",
                ObjectStorageArgs(
                    target=t,
                    mode="external",
                    bucket="b",
                    region="us-west-2",
                    endpoint="https://s3.amazonaws.com",
                ),
            ).store
        )
    )
    names = [e["name"] for e in stores[0].env()]
    assert names == ["AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL", "AWS_DEFAULT_REGION"]
    assert stores[0].uri("/models/") == "s3://b/models"


def test_missing_parts_fail_before_any_child() -> None:
    with pytest.raises(ValueError, match="minio_image is required"):
        run_component(
            lambda t: ObjectStorage(
                "s", ObjectStorageArgs(target=t, mode="minio", bucket="b", region="r")
            )
        )
    with pytest.raises(ValueError, match="endpoint is required"):
        run_component(
            lambda t: ObjectStorage(
                "s", ObjectStorageArgs(target=t, mode="external", bucket="b", region="r")
            )
        )
