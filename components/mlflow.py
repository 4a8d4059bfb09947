"""MLflow tracking server: runs and metrics in SQLite on a volume, artifacts in the bucket.

The image is the official one plus boto3 (images/mlflow/), which MLflow needs to proxy
artifacts to S3 and the official image does not carry.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.registry import MODEL_NAME_ENV, TRACKING_URI_ENV

from components import kube
from components.bucket_access import MLFLOW, BucketUser
from components.kube import KubeTarget
from components.network import Route, allow_egress, allow_ingress
from components.object_storage import ObjectStore

PORT = 5000
DB_DIR = f"{kube.DATA_DIR}/mlflow"
SERVICE_ACCOUNT = "mlflow"
# Run artifacts (clients upload them through MLflow: --serve-artifacts); deleted runs' go.
BUCKET_USER = BucketUser(SERVICE_ACCOUNT, ("mlflow",), write=(MLFLOW,), delete=(MLFLOW,))


@dataclass(frozen=True)
class MlflowArgs:
    """The mlflow section's settings (their defaults are the config's, infra/config.py)."""

    target: KubeTarget
    image: pulumi.Input[str]  # a pinned tag, or the digest of a build
    store: ObjectStore
    storage: str
    cpu: float
    mem: float
    # Components that log runs (trainers) or move the registry's alias (cube-transfer).
    clients: tuple[str, ...] = ("trainer", "cube-transfer")


@dataclass(frozen=True)
class RegistryClient:
    """What a pod needs to use the model registry (elasticctr_common.registry)."""

    url: pulumi.Input[str]
    model: str  # the registered model: the training job's name, as its MLflow experiment

    routes = (Route("mlflow", (PORT,)),)

    def env(self) -> dict[str, pulumi.Input[str]]:
        return {TRACKING_URI_ENV: self.url, MODEL_NAME_ENV: self.model}


class Mlflow(pulumi.ComponentResource):
    url: pulumi.Output[str]
    client_routes = RegistryClient.routes  # what a client (a trainer) reaches

    def __init__(
        self, name: str, args: MlflowArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("elasticctr:mlflow:Mlflow", name, None, opts)
        target = args.target
        host = pulumi.Output.concat("mlflow.", target.namespace)
        # MLflow 3 answers only the Host names it is told about (DNS-rebinding guard): its
        # Service's names, and loopback on any port (`kubectl port-forward svc/mlflow N:5000`).
        allowed_hosts = host.apply(
            lambda h: ",".join(
                [
                    *(
                        f"{name}{port}"
                        for name in ("mlflow", h, f"{h}.svc", f"{h}.svc.cluster.local")
                        for port in ("", f":{PORT}")
                    ),
                    *(
                        f"{name}{port}"
                        for name in ("localhost", "127.0.0.1")
                        for port in ("", ":*")
                    ),
                ]
            )
        )
        volume = k8s.core.v1.PersistentVolumeClaim(
            f"{name}-db",
            metadata=target.metadata("mlflow-db", "mlflow"),
            spec={
                "access_modes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": args.storage}},
            },
            # Run history must survive a replacement of everything else.
            opts=target.opts(self, retain_on_delete=True),
        )
        health: k8s.core.v1.ProbeArgsDict = {"http_get": {"path": "/health", "port": PORT}}
        secrets = args.store.secret_files()
        container = kube.container(
            target,
            "mlflow",
            args.image,
            ["mlflow", "server"],
            args=[
                "--host=0.0.0.0",
                f"--port={PORT}",
                # One worker: a tracking server of one training job; each worker process
                # holds all of MLflow (two were OOM-killed at 1 GiB on the local cluster).
                "--workers=1",
                f"--backend-store-uri=sqlite:///{DB_DIR}/mlflow.db",
                "--serve-artifacts",
                f"--artifacts-destination={args.store.uri(MLFLOW)}",
                pulumi.Output.concat("--allowed-hosts=", allowed_hosts),
            ],
            env=[
                *args.store.env(),
                *secrets.env,
                # No server-side jobs (GenAI evaluation): MLflow 3 otherwise starts a job
                # runner and Huey consumers, ~230 MB each, and was OOM-killed at 1 GiB.
                *kube.env({"HOME": "/tmp", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}),
            ],
            ports={"http": PORT},
            cpu=args.cpu,
            mem=args.mem,
            readiness=kube.http_probe("/health", PORT),
            liveness=kube.liveness(health),
            # The first start migrates the database before the server listens.
            startup=kube.startup(health),
            mounts=[{"name": "db", "mount_path": DB_DIR}, *secrets.mounts],
        )
        db_volume: k8s.core.v1.VolumeArgsDict = {
            "name": "db",
            "persistent_volume_claim": {"claim_name": volume.metadata["name"]},
        }
        account = kube.service_account(target, SERVICE_ACCOUNT, "mlflow", self)
        k8s.apps.v1.Deployment(
            f"{name}-server",
            metadata=target.deployment_metadata("mlflow", "mlflow"),
            spec={
                "replicas": 1,
                "revision_history_limit": kube.REVISION_HISTORY_LIMIT,
                # SQLite on a ReadWriteOnce volume: never two servers at once.
                "strategy": {"type": "Recreate"},
                "selector": {"match_labels": kube.labels("mlflow")},
                "template": kube.pod_template(
                    "mlflow",
                    [container],
                    [db_volume, *secrets.volumes],
                    service_account=account.metadata["name"],
                ),
            },
            opts=target.opts(self),
        )
        kube.service(target, f"{name}-service", "mlflow", "mlflow", {"http": PORT}, self)
        allow_ingress(target, f"{name}-ingress", "mlflow", [PORT], list(args.clients), self)
        # Artifacts go to the bucket (--serve-artifacts: clients upload through MLflow).
        allow_egress(target, f"{name}-egress", "mlflow", args.store.routes, self)

        self.url = pulumi.Output.concat("http://", host, f".svc.cluster.local:{PORT}")
        self.register_outputs({"url": self.url})
