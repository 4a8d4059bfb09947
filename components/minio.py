"""MinIO in the cluster (storage mode minio): the server, and a Job that makes the bucket
and one MinIO user per workload, each with a policy of what that workload may do
(components/bucket_access.py). The root user is MinIO's and the Job's alone.

Resources are children of the ObjectStorage component (their names predate this module).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.secrets import file_variable

from components import kube
from components.bucket_access import (
    KEY_ID,
    SECRET_KEY,
    BucketUser,
    credentials_secret,
    s3_policy_json,
)
from components.kube import KubeTarget
from components.network import Route, allow_egress, allow_ingress

PORT = 9000
SERVICE_ACCOUNT = "minio"
ROOT_SECRET = "minio-root"
ROOT_KEYS = ("MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD")  # the root Secret's keys
POLICIES_MAP = "minio-policies"
POLICIES_DIR = f"{kube.CONFIG_DIR}/minio"
ROUTE = Route("minio", (PORT,))  # how pods reach it


def policy_name(user: BucketUser) -> str:
    return f"elasticctr-{user.name}"


def key_variables(user: BucketUser) -> tuple[str, str]:
    """The set-up Job's variables holding a workload's access key id and secret key."""
    stem = re.sub(r"[^A-Z0-9]", "_", user.name.upper())
    return f"{stem}_ACCESS_KEY", f"{stem}_SECRET_KEY"


def setup_script(
    bucket: str,
    users: tuple[BucketUser, ...],
    url: str = f"http://minio:{PORT}",
    policies_dir: str = POLICIES_DIR,
) -> str:
    """The Job's shell script: wait for MinIO at `url`, make the bucket, then per workload
    its policy (from `policies_dir`, replaced), its user (keys from the environment; a
    re-run sets the same ones) and the policy attached to it (already attached on a re-run:
    fine). Runs again harmlessly. Every key is read from the file its `<VAR>_FILE` names
    (elasticctr_common.secrets) into a shell variable, never exported."""
    variables = [*ROOT_KEYS, *(var for user in users for var in key_variables(user))]
    lines = [
        "set -eu",
        *(f'{var}="$(cat "${file_variable(var)}")"' for var in variables),
        f'until mc alias set local {url} "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"; '
        "do sleep 2; done",
        f"mc mb --ignore-existing local/{bucket}",
    ]
    for user in users:
        (key, secret), policy = key_variables(user), policy_name(user)
        lines += [
            f"mc admin policy create local {policy} {policies_dir}/{user.name}.json",
            f'mc admin user add local "${key}" "${secret}"',
            f'mc admin policy attach local {policy} --user "${key}" || '
            f'mc admin user info local "${key}" | grep -q "{policy}"',
        ]
    return "\n".join(lines) + "\n"


def deploy(
    parent: pulumi.Resource,
    name: str,
    target: KubeTarget,
    image: str,
    bucket: str,
    users: tuple[BucketUser, ...],
    user_secrets: Mapping[str, pulumi.Input[str]],
    root_secret: pulumi.Input[str],
    resources: tuple[str, float, float],  # volume size, CPU cores, GiB
) -> None:
    size, cpu, mem = resources
    # MinIO reads MINIO_ROOT_USER_FILE and MINIO_ROOT_PASSWORD_FILE itself.
    root_files = kube.secret_files("minio-root", root_secret, ROOT_KEYS)
    account = kube.service_account(target, SERVICE_ACCOUNT, "minio", parent)
    service = kube.service(target, f"{name}-minio-service", "minio", "minio", {"s3": PORT}, parent)
    server = kube.container(
        target,
        "minio",
        image,
        ["minio", "server", "/data", "--address", f":{PORT}"],
        env=[*root_files.env, *kube.env({"HOME": "/tmp"})],
        ports={"s3": PORT},
        cpu=cpu,
        mem=mem,
        readiness=kube.http_probe("/minio/health/ready", PORT),
        liveness=kube.http_probe("/minio/health/live", PORT, 20),
        mounts=[{"name": "data", "mount_path": "/data"}, *root_files.mounts],
    )
    minio = k8s.apps.v1.StatefulSet(
        f"{name}-minio",
        metadata=target.metadata("minio", "minio"),
        spec={
            "service_name": "minio",
            "replicas": 1,
            "selector": {"match_labels": kube.labels("minio")},
            "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
            "template": kube.pod_template(
                "minio", [server], root_files.volumes, service_account=account.metadata["name"]
            ),
            "volume_claim_templates": [kube.volume_claim("data", size)],
        },
        opts=target.opts(parent, depends_on=[service]),
    )
    policies = {f"{u.name}.json": s3_policy_json(f"arn:aws:s3:::{bucket}", u) for u in users}
    policy_map = k8s.core.v1.ConfigMap(
        f"{name}-minio-policies",
        metadata=target.metadata(POLICIES_MAP, "minio-client"),
        data=policies,
        opts=target.opts(parent),
    )
    job_files = root_files
    for user in users:
        job_files += kube.secret_files(
            credentials_secret(user.name),
            user_secrets[user.name],
            dict(zip(key_variables(user), (KEY_ID, SECRET_KEY), strict=True)),
        )
    volume: k8s.core.v1.VolumeArgsDict = {
        "name": "policies",
        "config_map": {"name": policy_map.metadata["name"]},
    }
    script = setup_script(bucket, users)
    k8s.batch.v1.Job(
        f"{name}-create-bucket",
        metadata=target.metadata("minio-create-bucket", "minio-client"),
        spec={
            "backoff_limit": 6,
            "template": kube.pod_template(
                "minio-client",
                [
                    kube.container(
                        target,
                        "create-bucket",
                        image,
                        ["/bin/sh", "-c", script],
                        env=[
                            *job_files.env,
                            *kube.env({"HOME": "/tmp", "MC_CONFIG_DIR": "/tmp/mc"}),
                        ],
                        cpu=0.1,
                        # mc sets up a user per workload; 128 MiB was OOM-killed doing so.
                        mem=0.25,
                        mounts=[
                            {"name": "policies", "mount_path": POLICIES_DIR, "read_only": True},
                            *job_files.mounts,
                        ],
                    )
                ],
                [volume, *job_files.volumes],
                service_account=account.metadata["name"],
                restart_policy="OnFailure",
                # New users or policies: a new Job (a Job's pod template cannot change).
                annotations={"elasticctr.io/policies-sha256": kube.digest(policies)},
            ),
        },
        opts=target.opts(
            parent,
            depends_on=[minio],
            replace_on_changes=["spec"],
            delete_before_replace=True,
        ),
    )
    # The workloads that use the bucket, and the job that makes it.
    allow_ingress(
        target,
        f"{name}-minio-ingress",
        "minio",
        [PORT],
        [*dict.fromkeys(c for u in users for c in u.components), "minio-client"],
        parent,
    )
    allow_egress(target, f"{name}-minio-client-egress", "minio-client", [ROUTE], parent)
