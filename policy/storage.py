"""Storage buckets are not public: models, shards and checkpoints are the product's data.

Buckets are recognised by type token, whatever creates them: the kind of `<package>:<module>:
<Kind>` names a bucket (`aws:s3/bucket:Bucket`, `huaweicloud:Obs/bucket:Bucket`, the Baidu BOS
bucket of a dynamic provider `pulumi-python:dynamic/baidu:BosBucket`), a bucket ACL, a bucket
policy or an S3 public access block. In-cluster MinIO buckets are made by `mc`; a workload
running `mc anonymous set public|download|upload` would open one to anonymous access.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy.kube import (
    UNKNOWN,
    containers,
    entries,
    get,
    is_list,
    items,
    object_label,
    parse_type,
)

# Kinds by the end of their name: Bucket, BucketV2, BosBucket, BucketAclV2, ...
BUCKET_KIND = re.compile(r"Bucket(?:V\d+)?$")
ACL_KIND = re.compile(r"BucketAcl(?:V\d+)?$")
POLICY_KIND = re.compile(r"BucketPolicy$")
ACCESS_BLOCK_KIND = re.compile(r"PublicAccessBlock$")
# Canned ACLs of S3, OBS and BOS that let someone outside the account in.
PUBLIC_ACLS = {
    "public-read",
    "public-read-write",
    "authenticated-read",
    "public-read-delivered",
    "public-read-write-delivered",
}
PUBLIC_GRANTEES = ("/groups/global/AllUsers", "/groups/global/AuthenticatedUsers")
ACCESS_BLOCK_FLAGS = (
    "blockPublicAcls",
    "blockPublicPolicy",
    "ignorePublicAcls",
    "restrictPublicBuckets",
)
S3_BUCKETS = {"aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"}
S3_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"
MC_PUBLIC = re.compile(r"\bmc\s+(?:anonymous|policy)\s+set\s+(?:public|download|upload)\b")


def storage_kind(resource_type: str) -> str | None:
    """What an object-storage resource is ("bucket", "acl", "policy", "access-block"), or None."""
    token = parse_type(resource_type)
    if token is None or token.package == "kubernetes":
        return None
    for kind, pattern in (
        ("bucket", BUCKET_KIND),
        ("acl", ACL_KIND),
        ("policy", POLICY_KIND),
        ("access-block", ACCESS_BLOCK_KIND),
    ):
        if pattern.search(token.kind):
            return kind
    return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for _, item in entries(value):
            yield from _strings(item)
    else:
        for item in items(value):
            yield from _strings(item)


def _is_wildcard(principal: Any) -> bool:
    if principal == "*":
        return True
    if isinstance(principal, Mapping):
        return any(_is_wildcard(v) for v in principal.values())
    if isinstance(principal, list):
        return any(_is_wildcard(v) for v in principal)
    return False


def public_statements(document: Any) -> list[str]:
    """The statements of a bucket policy (S3/OBS JSON, or BOS ACL JSON) open to everyone."""
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except ValueError:
            return []
    if not isinstance(document, dict):
        return []
    found = []
    statements = document.get("Statement", [])
    for i, statement in enumerate(statements if isinstance(statements, list) else [statements]):
        if (
            isinstance(statement, dict)
            and statement.get("Effect") == "Allow"
            and _is_wildcard(statement.get("Principal"))
            and not statement.get("Condition")
        ):
            found.append(f"Statement[{i}] allows Principal *")
    for i, entry in enumerate(document.get("accessControlList", [])):
        grantees = entry.get("grantee", []) if isinstance(entry, dict) else []
        if any(isinstance(g, dict) and g.get("id") == "*" for g in grantees):
            found.append(f"accessControlList[{i}] grants to id *")
    return found


def _plain(value: Any) -> Any:
    """A proxied JSON value as plain dicts and lists (unknown parts become None)."""
    if value is UNKNOWN:
        return None
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in entries(value)}
    if is_list(value):
        return [_plain(item) for item in items(value)]
    return value


def bucket_problems(kind: str, props: Any) -> list[str]:
    problems = []
    if kind in ("bucket", "acl"):
        acl = get(props, "acl")
        if isinstance(acl, str) and acl.lower() in PUBLIC_ACLS:
            problems.append(f"acl is {acl}")
        grants = [s for s in _strings(props) if s.endswith(PUBLIC_GRANTEES)]
        if grants:
            problems.append(f"grants access to {', '.join(sorted(set(grants)))}")
    if kind in ("bucket", "policy"):
        policy = get(props, "policy")
        if policy is not UNKNOWN:
            problems += [f"policy {s}" for s in public_statements(_plain(policy))]
    if kind == "access-block":
        flags = {flag: get(props, flag) for flag in ACCESS_BLOCK_FLAGS}
        off = [flag for flag, on in flags.items() if on is not UNKNOWN and on is not True]
        if off:
            problems.append(f"{', '.join(off)} not true")
    return problems


def validate_bucket_not_public(args: ResourceValidationArgs, report: ReportViolation) -> None:
    kind = storage_kind(args.resource_type)
    if kind is not None:
        problems = bucket_problems(kind, args.props)
        if problems:
            report(
                f'"{args.name}" ({args.resource_type}): {"; ".join(problems)}. Buckets '
                "stay private: workloads reach them with their own credentials.",
                None,
            )
        return
    for container in containers(args.resource_type, args.props):
        command = [s for field in ("command", "args") for s in items(get(container.spec, field))]
        script = " ".join(s for s in command if isinstance(s, str))
        if MC_PUBLIC.search(script):
            report(
                f"{object_label(args.resource_type, args.props, args.name)}: {container.label} "
                "runs `mc anonymous set` to open a bucket to anonymous access. Buckets stay "
                "private.",
                None,
            )


def _refers_to(block: PolicyResource, bucket: PolicyResource) -> bool:
    """Whether a public access block is applied to `bucket` (by dependency or by name)."""
    if bucket in block.property_dependencies.get("bucket", []) or bucket in block.dependencies:
        return True
    target = get(block.props, "bucket")
    names = {get(bucket.props, "bucket"), get(bucket.props, "id")} - {None, UNKNOWN}
    return isinstance(target, str) and target in names


def validate_s3_access_block(args: StackValidationArgs, report: ReportViolation) -> None:
    blocks = [r for r in args.resources if r.resource_type == S3_ACCESS_BLOCK]
    for bucket in args.resources:
        if bucket.resource_type in S3_BUCKETS and not any(_refers_to(b, bucket) for b in blocks):
            report(
                f'S3 bucket "{bucket.name}" has no BucketPublicAccessBlock. Add '
                "aws.s3.BucketPublicAccessBlock(bucket=<bucket>.id) with block_public_acls, "
                "block_public_policy, ignore_public_acls and restrict_public_buckets true.",
                bucket.urn,
            )


bucket_not_public = ResourceValidationPolicy(
    name="storage-bucket-not-public",
    description=(
        "No storage bucket (S3, OBS, BOS, MinIO) is public: no public ACL, grant or policy, "
        "and S3 public access blocks block everything."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_bucket_not_public,
)

s3_public_access_block = StackValidationPolicy(
    name="s3-public-access-block",
    description="Every S3 bucket has a public access block that blocks all public access.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_s3_access_block,
)
