"""storage-bucket-not-public and s3-public-access-block, on synthetic cloud resources.

The rule knows buckets by type token; these are the tokens of the cloud providers the
program uses (pulumi-aws, pulumi-huaweicloud) and of its Baidu BOS dynamic resource.
"""

from __future__ import annotations

import json

import pytest

from policy.storage import storage_kind
from tests.policy.support import (
    UNKNOWN_STRING,
    container,
    pod,
    policy_resources,
    stack_violations,
    synthetic,
    violations,
)
from tests.support.stacks import graph

RULE = "storage-bucket-not-public"
S3_BUCKET = "aws:s3/bucket:Bucket"
S3_BUCKET_V2 = "aws:s3/bucketV2:BucketV2"
S3_ACL = "aws:s3/bucketAclV2:BucketAclV2"
S3_POLICY = "aws:s3/bucketPolicy:BucketPolicy"
S3_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
OBS_BUCKET = "huaweicloud:Obs/bucket:Bucket"
OBS_POLICY = "huaweicloud:Obs/bucketPolicy:BucketPolicy"
BOS_BUCKET = "pulumi-python:dynamic/baidu:BosBucket"
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
BLOCK_ALL = {
    "bucket": "models",
    "blockPublicAcls": True,
    "blockPublicPolicy": True,
    "ignorePublicAcls": True,
    "restrictPublicBuckets": True,
}


def _policy(**statement: object) -> str:
    base = {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::models/*"}
    return json.dumps({"Version": "2012-10-17", "Statement": [{**base, **statement}]})


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        (S3_BUCKET, "bucket"),
        (S3_BUCKET_V2, "bucket"),
        (OBS_BUCKET, "bucket"),
        (BOS_BUCKET, "bucket"),
        (S3_ACL, "acl"),
        ("aws:s3/bucketAcl:BucketAcl", "acl"),
        (S3_POLICY, "policy"),
        (OBS_POLICY, "policy"),
        (S3_BLOCK, "access-block"),
        ("aws:s3/accountPublicAccessBlock:AccountPublicAccessBlock", "access-block"),
        ("aws:s3/bucketObject:BucketObject", None),
        ("aws:s3/bucketVersioning:BucketVersioning", None),
        ("kubernetes:core/v1:ConfigMap", None),
        ("pulumi-python:dynamic:Resource", None),
    ],
)
def test_buckets_are_known_by_type_token(token: str, kind: str | None) -> None:
    assert storage_kind(token) == kind


@pytest.mark.parametrize(
    ("token", "props"),
    [
        (S3_BUCKET, {"bucket": "models"}),
        (S3_BUCKET_V2, {"bucket": "models", "acl": "private"}),
        (OBS_BUCKET, {"bucket": "models", "acl": "private", "versioning": True}),
        (BOS_BUCKET, {"bucket": "models", "endpoint": "https://s3.bj.bcebos.com"}),
        (S3_ACL, {"bucket": "models", "acl": "private"}),
        (
            S3_POLICY,
            {"bucket": "models", "policy": _policy(Principal={"AWS": "arn:aws:iam::1:root"})},
        ),
        (
            S3_POLICY,
            {"bucket": "models", "policy": _policy(Principal="*", Condition={"IpAddress": {}})},
        ),
        (S3_BLOCK, BLOCK_ALL),
        (S3_BUCKET, {"bucket": "models", "acl": UNKNOWN_STRING, "policy": UNKNOWN_STRING}),
    ],
)
def test_private_buckets_pass(token: str, props: dict) -> None:
    assert violations(RULE, token, props) == []


@pytest.mark.parametrize(
    ("token", "props", "problem"),
    [
        (S3_BUCKET, {"bucket": "m", "acl": "public-read"}, "acl is public-read"),
        (OBS_BUCKET, {"bucket": "m", "acl": "public-read-write"}, "acl is public-read-write"),
        (BOS_BUCKET, {"bucket": "m", "acl": "public-read"}, "acl is public-read"),
        (
            S3_ACL,
            {
                "bucket": "m",
                "accessControlPolicy": {
                    "owner": {"id": "o"},
                    "grants": [
                        {"grantee": {"type": "Group", "uri": ALL_USERS}, "permission": "READ"}
                    ],
                },
            },
            f"grants access to {ALL_USERS}",
        ),
        (
            S3_POLICY,
            {"bucket": "m", "policy": _policy(Principal="*")},
            "policy Statement[0] allows Principal *",
        ),
        (
            OBS_POLICY,
            {"bucket": "m", "policy": _policy(Principal={"ID": ["*"]})},
            "policy Statement[0] allows Principal *",
        ),
        (
            S3_BLOCK,
            {**BLOCK_ALL, "blockPublicPolicy": False, "restrictPublicBuckets": UNKNOWN_STRING},
            "blockPublicPolicy not true",
        ),
        (
            BOS_BUCKET,
            {
                "bucket": "m",
                "policy": {
                    "accessControlList": [{"grantee": [{"id": "*"}], "permission": ["READ"]}]
                },
            },
            "policy accessControlList[0] grants to id *",
        ),
    ],
)
def test_public_buckets_fail(token: str, props: dict, problem: str) -> None:
    assert violations(RULE, token, props, name="models") == [
        f'"models" ({token}): {problem}. Buckets stay private: workloads reach them with their '
        "own credentials."
    ]


def test_a_minio_client_opening_a_bucket_fails() -> None:
    script = "mc alias set local http://minio:9000 u p; mc anonymous set download local/elasticctr"
    job = {
        "metadata": {"name": "minio-create-bucket"},
        "spec": {
            "template": {"spec": {"containers": [container(command=["/bin/sh", "-c", script])]}}
        },
    }
    assert violations(RULE, "kubernetes:batch/v1:Job", job) == [
        'Job "minio-create-bucket": container "app" (spec.template.spec.containers[0]) runs '
        "`mc anonymous set` to open a bucket to anonymous access. Buckets stay private."
    ]


def test_the_programs_minio_bucket_job_passes() -> None:
    job = graph("dev").one("kubernetes:batch/v1:Job", "storage-create-bucket")
    assert "mc mb" in json.dumps(job.inputs)
    assert violations(RULE, job.type, job.inputs) == []
    assert violations(RULE, "kubernetes:apps/v1:Deployment", pod([container()])) == []


def test_every_s3_bucket_needs_a_public_access_block() -> None:
    bucket = synthetic(S3_BUCKET, "models-bucket", {"bucket": "models"})
    other = synthetic(S3_BUCKET_V2, "logs-bucket", {"bucket": "logs"})
    by_dependency = synthetic(S3_BLOCK, "models-private", {**BLOCK_ALL, "bucket": UNKNOWN_STRING})
    by_dependency.dependencies.append(bucket)
    assert stack_violations("s3-public-access-block", [bucket, other, by_dependency]) == [
        (
            'S3 bucket "logs-bucket" has no BucketPublicAccessBlock. Add '
            "aws.s3.BucketPublicAccessBlock(bucket=<bucket>.id) with block_public_acls, "
            "block_public_policy, ignore_public_acls and restrict_public_buckets true.",
            other.urn,
        )
    ]
    by_name = synthetic(S3_BLOCK, "logs-private", {**BLOCK_ALL, "bucket": "logs"})
    assert stack_violations("s3-public-access-block", [bucket, other, by_dependency, by_name]) == []


def test_other_clouds_buckets_need_no_s3_access_block() -> None:
    buckets = [
        synthetic(OBS_BUCKET, "obs", {"bucket": "m"}),
        synthetic(BOS_BUCKET, "bos", {"bucket": "m"}),
    ]
    assert stack_violations("s3-public-access-block", buckets) == []


@pytest.mark.parametrize(
    ("stack", "bucket_type"),
    [("aws-prod", S3_BUCKET), ("huawei-prod", OBS_BUCKET), ("baidu-prod", BOS_BUCKET)],
)
def test_the_cloud_stacks_buckets_are_found_and_private(stack: str, bucket_type: str) -> None:
    bucket = graph(stack).one(bucket_type)
    assert violations(RULE, bucket.type, bucket.inputs, bucket.name) == []
    public = {**bucket.inputs, "acl": "public-read"}
    assert violations(RULE, bucket.type, public, bucket.name)


def test_the_aws_stack_blocks_public_access_and_is_checked() -> None:
    aws = graph("aws-prod")
    block = aws.one(S3_BLOCK)
    assert violations(RULE, block.type, block.inputs, block.name) == []
    assert stack_violations("s3-public-access-block", policy_resources(aws.resources)) == []
    without = [r for r in aws.resources if r.type != S3_BLOCK]
    [(message, urn)] = stack_violations("s3-public-access-block", policy_resources(without))
    assert urn == aws.one(S3_BUCKET).urn and "has no BucketPublicAccessBlock" in message
    opened = {**block.inputs, "blockPublicPolicy": False}
    [message] = violations(RULE, block.type, opened, block.name)
    assert "blockPublicPolicy not true" in message
