"""A BOS bucket through BOS's S3-compatible endpoint (https://s3.<region>.bcebos.com), as a
Pulumi dynamic resource: boto3 with the deployer's Baidu keys (the same env variables as
the CCE calls). Private (BOS's default ACL). Deleting fails while the bucket holds objects:
trained models are never thrown away by `pulumi destroy`.
"""

from __future__ import annotations

from typing import Any

import boto3
import pulumi
from botocore.exceptions import ClientError
from pulumi.dynamic import CreateResult, DiffResult, ReadResult, Resource, ResourceProvider

from components.cluster.baidu.openapi import credentials_from_env


def _s3(props: dict[str, Any]) -> Any:
    access_key, secret_key = credentials_from_env()
    return boto3.client(
        "s3",
        endpoint_url=str(props["endpoint"]),
        region_name=str(props["region"]),
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
    )


def _missing(err: ClientError) -> bool:
    return str(err.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket", "NotFound")


class _BucketProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        _s3(props).create_bucket(Bucket=props["bucket"], ACL="private")
        return CreateResult(str(props["bucket"]), dict(props))

    def read(self, id_: str, props: dict[str, Any]) -> ReadResult:
        try:
            _s3(props).head_bucket(Bucket=id_)
        except ClientError as err:
            if _missing(err):
                return ReadResult("", {})
            raise
        return ReadResult(id_, dict(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        replaces = [k for k in ("endpoint", "region", "bucket") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=True)

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        try:
            _s3(props).delete_bucket(Bucket=id_)
        except ClientError as err:
            if not _missing(err):
                raise


class BosBucket(Resource, module="baidu", name="BosBucket"):
    def __init__(
        self,
        name: str,
        *,
        endpoint: str,
        region: str,
        bucket: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__(
            _BucketProvider(),
            name,
            {"endpoint": endpoint, "region": region, "bucket": bucket},
            opts,
        )
