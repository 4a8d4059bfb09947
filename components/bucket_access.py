"""What each workload may do in the bucket (docs/architecture.md, "Security"), and the S3
policy document that says it, one language for MinIO's users and AWS IAM roles.

A workload is one identity: its ServiceAccount, its Secret `storage-<name>` (keys), its
MinIO user, its IAM role. It reads some prefixes, writes some (read, put, abort an upload)
and deletes in some; nothing else, the bucket's other prefixes included.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# The bucket's layout: the contract's prefixes (docs/architecture.md, "Model versions").
from elasticctr_common.contract import CHECKPOINTS as CHECKPOINTS
from elasticctr_common.contract import CUBE as CUBE
from elasticctr_common.contract import MLFLOW as MLFLOW
from elasticctr_common.contract import MODELS as MODELS

# The keys of a workload's Secret `storage-<name>`: its access key id and secret key.
KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_KEY = "AWS_SECRET_ACCESS_KEY"


def credentials_secret(user: str) -> str:
    """The name of workload `user`'s Secret."""
    return f"storage-{user}"


@dataclass(frozen=True)
class BucketUser:
    name: str  # the workload: ServiceAccount, Secret storage-<name>, MinIO user, IAM role
    components: tuple[str, ...]  # its pods' component labels (who connects to MinIO)
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()  # put objects (and read them)
    delete: tuple[str, ...] = ()  # delete objects (prefixes it also writes)

    def __post_init__(self) -> None:
        if not set(self.delete) <= set(self.write):
            raise ValueError(f"{self.name}: deletes outside what it writes: {self.delete}")

    @property
    def prefixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.read, *self.write)))


def _objects(bucket_arn: str, prefixes: tuple[str, ...]) -> list[str]:
    return [
        f"{bucket_arn}/{p.strip('/')}/*" if p.strip("/") else f"{bucket_arn}/*" for p in prefixes
    ]


def s3_policy(bucket_arn: str, user: BucketUser) -> dict[str, Any]:
    """An IAM policy (AWS and MinIO read the same): list within its prefixes, get in them,
    put where it writes, delete where it deletes."""
    prefixes = [p.strip("/") for p in user.prefixes]
    listing: dict[str, Any] = {
        "Effect": "Allow",
        "Action": ["s3:ListBucket"],
        "Resource": [bucket_arn],
    }
    if all(prefixes):  # "" (the whole bucket) needs no condition
        listing["Condition"] = {
            "StringLike": {"s3:prefix": [form for p in prefixes for form in (p, f"{p}/*")]}
        }
    statements = [
        listing,
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": _objects(bucket_arn, user.prefixes),
        },
    ]
    if user.write:
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload"],
                "Resource": _objects(bucket_arn, user.write),
            }
        )
    if user.delete:
        statements.append(
            {
                "Effect": "Allow",
                "Action": ["s3:DeleteObject"],
                "Resource": _objects(bucket_arn, user.delete),
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def s3_policy_json(bucket_arn: str, user: BucketUser) -> str:
    return json.dumps(s3_policy(bucket_arn, user), indent=1)
