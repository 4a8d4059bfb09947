"""Object storage behind one S3 interface: MinIO in the cluster (dev), or an external bucket
(the clouds' S3, BOS, OBS). Each workload gets its own ObjectStore: endpoint, bucket,
region, and its own credentials (docs/architecture.md, "Security"):

- MinIO: a user per workload with generated keys and a policy of what it does
  (components/minio.py); the root keys stay with MinIO and its set-up Job.
- external: the workload's own keys when the config gives them, else the stack's shared
  keys; none when pods get credentials from their identity (EKS Pod Identity: one role per
  workload, components/cluster/aws.py).

Keys reach pods as a file, boto3's shared credentials file (named by
AWS_SHARED_CREDENTIALS_FILE), mounted from a Secret per workload, `storage-<workload>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components import kube, minio
from components.bucket_access import KEY_ID, SECRET_KEY, BucketUser, credentials_secret
from components.generated_secret import GeneratedCredential
from components.kube import KubeTarget
from components.network import Route, url_route

# The Secret's key holding both as boto3's credentials file (profile "default"), which
# boto3, MLflow's S3 client and the AWS CLI read from AWS_SHARED_CREDENTIALS_FILE.
CREDENTIALS_FILE = "credentials"
CREDENTIALS_VOLUME = "storage-credentials"
KeyPair = tuple[pulumi.Input[str], pulumi.Input[str]]  # access key id, secret key (secret)


def credentials_file(key_id: str, secret_key: str) -> str:
    """boto3's shared credentials file holding one key pair as its default profile."""
    return f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret_key}\n"


@dataclass(frozen=True)
class ObjectStore:
    """What one workload needs to reach the bucket."""

    endpoint: pulumi.Input[str]
    bucket: str
    region: str
    # Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; None when pods get their
    # credentials from their identity (e.g. EKS Pod Identity).
    credentials_secret: pulumi.Input[str] | None
    # The egress a pod needs to reach the bucket (and its credentials, e.g. the node's
    # identity agent): MinIO's pods, or the endpoint's port outside the cluster.
    routes: tuple[Route | pulumi.Output[Route], ...] = field(default=())

    def uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    def env(self) -> list[k8s.core.v1.EnvVarArgsDict]:
        """boto3's environment (also read by MLflow's S3 client)."""
        variables = kube.env(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "MLFLOW_S3_ENDPOINT_URL": self.endpoint,
                "AWS_DEFAULT_REGION": self.region,
            }
        )
        return variables

    def secret_files(self) -> kube.SecretFiles:
        """The key pair as boto3's credentials file (none: credentials from the identity)."""
        if self.credentials_secret is None:
            return kube.SecretFiles()
        # file_variable("AWS_SHARED_CREDENTIALS") is boto3's own AWS_SHARED_CREDENTIALS_FILE.
        return kube.secret_files(
            CREDENTIALS_VOLUME,
            self.credentials_secret,
            {"AWS_SHARED_CREDENTIALS": CREDENTIALS_FILE},
        )


@dataclass(frozen=True)
class ObjectStorageArgs:
    target: KubeTarget
    mode: Literal["minio", "external"]
    bucket: str
    region: str
    users: tuple[BucketUser, ...]  # the workloads that use the bucket
    endpoint: pulumi.Input[str] = ""  # external mode (an Output when a cloud made the bucket)
    access_key: pulumi.Input[str] | None = None  # external mode, shared by the workloads; secret
    secret_key: pulumi.Input[str] | None = None
    user_keys: Mapping[str, KeyPair] | None = None  # external mode: a workload's own keys
    minio_image: str = ""
    # Mode minio: the MinIO pod's volume size, CPU cores and GiB (the storage section's).
    minio_resources: tuple[str, float, float] | None = None
    # Outside routes pods need for their bucket credentials (a cloud's identity agent).
    identity_routes: tuple[Route, ...] = ()


class ObjectStorage(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    bucket: pulumi.Output[str]
    stores: dict[str, ObjectStore]  # by workload (BucketUser.name)

    def __init__(
        self, name: str, args: ObjectStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.mode == "minio" and (not args.minio_image or args.minio_resources is None):
            raise ValueError(f"{name}: minio_image and minio_resources are required in mode minio")
        if args.mode == "external" and not args.endpoint:
            raise ValueError(f"{name}: endpoint is required in mode external")
        names = [user.name for user in args.users]
        unknown = set(args.user_keys or {}) - set(names)
        if args.mode == "minio" and args.user_keys:
            raise ValueError(f"{name}: MinIO makes its users' keys: user_keys is for external")
        if unknown:
            raise ValueError(f"{name}: user_keys for workloads without access: {sorted(unknown)}")
        super().__init__("elasticctr:storage:ObjectStorage", name, None, opts)
        target = args.target

        routes: tuple[Route | pulumi.Output[Route], ...]
        if args.mode == "minio":
            endpoint: pulumi.Input[str] = pulumi.Output.concat(
                "http://minio.", target.namespace, f".svc.cluster.local:{minio.PORT}"
            )
            routes = (minio.ROUTE,)
            keys = {user.name: self._generated(f"{name}-{user.name}") for user in args.users}
        else:
            endpoint = args.endpoint
            routes = (pulumi.Output.from_input(endpoint).apply(url_route), *args.identity_routes)
            keys = dict(args.user_keys or {})
            if args.access_key is not None and args.secret_key is not None:
                for n in names:  # the stack's shared keys where a workload has none of its own
                    keys.setdefault(n, (args.access_key, args.secret_key))

        secrets = {
            user: self._credentials(f"{name}-{user}-credentials", target, user, pair)
            for user, pair in keys.items()
        }
        self.stores = {
            n: ObjectStore(
                endpoint=endpoint,
                bucket=args.bucket,
                region=args.region,
                credentials_secret=secrets[n].metadata["name"] if n in secrets else None,
                routes=routes,
            )
            for n in names
        }
        if args.mode == "minio":
            root = self._generated(name)  # the names of the keys every workload once shared
            root_secret = k8s.core.v1.Secret(
                f"{name}-minio-root",
                metadata=target.metadata(minio.ROOT_SECRET, "minio"),
                string_data={
                    "MINIO_ROOT_USER": pulumi.Output.secret(root[0]),
                    "MINIO_ROOT_PASSWORD": pulumi.Output.secret(root[1]),
                },
                opts=target.opts(self),
            )
            assert args.minio_resources is not None  # checked above
            minio.deploy(
                self,
                name,
                target,
                args.minio_image,
                args.bucket,
                args.users,
                {n: s.metadata["name"] for n, s in secrets.items()},
                root_secret.metadata["name"],
                args.minio_resources,
            )

        self.endpoint = pulumi.Output.from_input(endpoint)
        self.bucket = pulumi.Output.from_input(args.bucket)
        self.register_outputs({"endpoint": self.endpoint, "bucket": self.bucket})

    def _generated(self, prefix: str) -> KeyPair:
        """A key pair MinIO will know: 20-character id, 40-character secret (AWS's sizes)."""
        child = pulumi.ResourceOptions(parent=self)
        return (
            GeneratedCredential(f"{prefix}-access-key", 20, child).value,
            GeneratedCredential(f"{prefix}-secret-key", 40, child).value,
        )

    def _credentials(
        self, resource_name: str, target: KubeTarget, user: str, pair: KeyPair
    ) -> k8s.core.v1.Secret:
        keys: dict[str, pulumi.Input[str]] = {
            KEY_ID: pulumi.Output.secret(pair[0]),
            SECRET_KEY: pulumi.Output.secret(pair[1]),
        }
        file: pulumi.Output[str] = pulumi.Output.all(*pair).apply(lambda p: credentials_file(*p))
        keys[CREDENTIALS_FILE] = pulumi.Output.secret(file)
        return k8s.core.v1.Secret(
            resource_name,
            metadata=target.metadata(credentials_secret(user), "object-storage"),
            string_data=keys,
            opts=target.opts(self),
        )
