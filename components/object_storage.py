"""Object storage behind one S3 interface: MinIO in the cluster (dev), or an external bucket
(the clouds' S3, BOS, OBS). Every workload gets the same ObjectStore: endpoint, bucket,
region and a Secret with its keys, as boto3's standard environment variables."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components import kube
from components.generated_secret import GeneratedCredential
from components.kube import KubeTarget
from components.network import Route, allow_egress, allow_ingress, url_route

MINIO_PORT = 9000
CREDENTIALS_SECRET = "object-storage-credentials"
KEY_ID = "AWS_ACCESS_KEY_ID"
SECRET_KEY = "AWS_SECRET_ACCESS_KEY"
SERVICE_ACCOUNT = "minio"


@dataclass(frozen=True)
class ObjectStore:
    """What a workload needs to reach the bucket."""

    endpoint: pulumi.Input[str]
    bucket: str
    region: str
    # Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY; None when pods get their
    # credentials from their identity (e.g. IAM roles for service accounts).
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
        if self.credentials_secret is not None:
            variables += kube.secret_env(self.credentials_secret, [KEY_ID, SECRET_KEY])
        return variables


@dataclass(frozen=True)
class ObjectStorageArgs:
    target: KubeTarget
    mode: Literal["minio", "external"]
    bucket: str
    region: str
    endpoint: pulumi.Input[str] = ""  # external mode (an Output when a cloud made the bucket)
    access_key: pulumi.Input[str] | None = None  # external mode; secret
    secret_key: pulumi.Input[str] | None = None
    minio_image: str = ""
    size: str = "20Gi"
    cpu: float = 0.5  # the MinIO pod
    mem: float = 1
    clients: tuple[str, ...] = ()  # components whose pods reach MinIO
    # Outside routes pods need for their bucket credentials (a cloud's identity agent).
    identity_routes: tuple[Route, ...] = ()


class ObjectStorage(pulumi.ComponentResource):
    endpoint: pulumi.Output[str]
    bucket: pulumi.Output[str]
    store: ObjectStore

    def __init__(
        self, name: str, args: ObjectStorageArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.mode == "minio" and not args.minio_image:
            raise ValueError(f"{name}: minio_image is required in mode minio")
        if args.mode == "external" and not args.endpoint:
            raise ValueError(f"{name}: endpoint is required in mode external")
        super().__init__("elasticctr:storage:ObjectStorage", name, None, opts)
        target = args.target

        if args.mode == "minio":
            access_key: pulumi.Input[str] | None = GeneratedCredential(
                f"{name}-access-key", 20, pulumi.ResourceOptions(parent=self)
            ).value
            secret_key: pulumi.Input[str] | None = GeneratedCredential(
                f"{name}-secret-key", 40, pulumi.ResourceOptions(parent=self)
            ).value
            endpoint: pulumi.Input[str] = pulumi.Output.concat(
                "http://minio.", target.namespace, f".svc.cluster.local:{MINIO_PORT}"
            )
        else:
            access_key, secret_key, endpoint = args.access_key, args.secret_key, args.endpoint

        credentials: k8s.core.v1.Secret | None = None
        if access_key is not None and secret_key is not None:
            credentials = k8s.core.v1.Secret(
                f"{name}-credentials",
                metadata=target.metadata(CREDENTIALS_SECRET, "object-storage"),
                string_data={
                    KEY_ID: pulumi.Output.secret(access_key),
                    SECRET_KEY: pulumi.Output.secret(secret_key),
                },
                opts=target.opts(self),
            )
        routes: tuple[Route | pulumi.Output[Route], ...]
        if args.mode == "minio":
            routes = (Route("minio", (MINIO_PORT,)),)
        else:
            routes = (pulumi.Output.from_input(endpoint).apply(url_route), *args.identity_routes)
        self.store = ObjectStore(
            endpoint=endpoint,
            bucket=args.bucket,
            region=args.region,
            credentials_secret=credentials.metadata["name"] if credentials else None,
            routes=routes,
        )
        if args.mode == "minio":
            self._minio(name, args, self.store)

        self.endpoint = pulumi.Output.from_input(endpoint)
        self.bucket = pulumi.Output.from_input(args.bucket)
        self.register_outputs({"endpoint": self.endpoint, "bucket": self.bucket})

    def _minio(self, name: str, args: ObjectStorageArgs, store: ObjectStore) -> None:
        target = args.target
        selector = kube.labels("minio")
        # MinIO's root user is the workloads' key pair.
        server_env = kube.secret_env(
            store.credentials_secret or CREDENTIALS_SECRET,
            {"MINIO_ROOT_USER": KEY_ID, "MINIO_ROOT_PASSWORD": SECRET_KEY},
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "minio", self)
        service = kube.service(
            target, f"{name}-minio-service", "minio", "minio", {"s3": MINIO_PORT}, self
        )
        server = kube.container(
            target,
            "minio",
            args.minio_image,
            ["minio", "server", "/data", "--address", f":{MINIO_PORT}"],
            env=[*server_env, *kube.env({"HOME": "/tmp"})],
            ports={"s3": MINIO_PORT},
            cpu=args.cpu,
            mem=args.mem,
            readiness=kube.http_probe("/minio/health/ready", MINIO_PORT),
            liveness=kube.http_probe("/minio/health/live", MINIO_PORT, 20),
            mounts=[{"name": "data", "mount_path": "/data"}],
        )
        minio = k8s.apps.v1.StatefulSet(
            f"{name}-minio",
            metadata=target.metadata("minio", "minio"),
            spec={
                "service_name": "minio",
                "replicas": 1,
                "selector": {"match_labels": selector},
                "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
                "template": kube.pod_template(
                    "minio", [server], service_account=account.metadata["name"]
                ),
                "volume_claim_templates": [kube.volume_claim("data", args.size)],
            },
            opts=target.opts(self, depends_on=[service]),
        )
        # The bucket is made by MinIO's own client (shipped in its image) once the server
        # answers; `mb --ignore-existing` makes re-runs harmless.
        script = (
            f'until mc alias set local http://minio:{MINIO_PORT} "$MINIO_ROOT_USER" '
            f'"$MINIO_ROOT_PASSWORD"; do sleep 2; done; '
            f"mc mb --ignore-existing local/{args.bucket}"
        )
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
                            args.minio_image,
                            ["/bin/sh", "-c", script],
                            env=[
                                *server_env,
                                *kube.env({"HOME": "/tmp", "MC_CONFIG_DIR": "/tmp/mc"}),
                            ],
                            cpu=0.1,
                            mem=0.125,
                        )
                    ],
                    service_account=account.metadata["name"],
                    restart_policy="OnFailure",
                ),
            },
            opts=target.opts(self, depends_on=[minio]),
        )
        # The workloads that use the bucket, and the job that makes it.
        allow_ingress(
            target,
            f"{name}-minio-ingress",
            "minio",
            [MINIO_PORT],
            [*args.clients, "minio-client"],
            self,
        )
        allow_egress(target, f"{name}-minio-client-egress", "minio-client", store.routes, self)
