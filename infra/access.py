"""Who may do what in the stack's bucket: the workloads the config runs, each with what it
does there (docs/architecture.md, "Security"), and their own keys when the config gives
them. The cluster (IAM roles on AWS) and the object storage (MinIO users, Secrets) both
read this."""

from __future__ import annotations

import pulumi

from components import cube, joiner, mlflow, serving, training
from components.bucket_access import BucketUser
from infra.config import StackConfig
from infra.load_config import as_secret


def bucket_users(config: StackConfig) -> tuple[BucketUser, ...]:
    paths = (config.data.dataset_path, config.training.eval_path)
    datasets = [p.strip("/") for p in paths if p] if config.data.source == "storage" else []
    users: tuple[BucketUser, ...] = (
        training.bucket_user(*datasets),
        cube.SHARD_BUCKET_USER,
        cube.TRANSFER_BUCKET_USER,
        serving.BUCKET_USER,
    )
    users += (mlflow.BUCKET_USER,) if config.mlflow.enabled else ()
    if joins_into_bucket(config):  # the joiner writes the partitions the trainer reads
        users += (joiner.bucket_user(config.data.dataset_path.strip("/")),)
    return users


def joins_into_bucket(config: StackConfig) -> bool:
    return config.feedback.enabled and config.data.source == "storage"


def workload_keys(config: StackConfig) -> dict[str, tuple[pulumi.Output[str], pulumi.Output[str]]]:
    """storage.workload_keys, as Pulumi secrets by workload (BucketUser.name)."""
    keys = {}
    for name, pair in config.storage.workload_keys.given().items():
        access, secret = as_secret(pair.access_key), as_secret(pair.secret_key)
        assert access is not None and secret is not None  # KeyPair: both or neither
        keys[name] = (access, secret)
    return keys
