"""The joiner (docs/feedback.md): impressions + clicks from the stream -> labelled examples
in the time partitions the trainer reads (data.dataset_path on HDFS or the bucket).

One pod, never two: the Deployment's strategy is Recreate, so a new pod starts only once
the old one is gone (two joiners would write the same partitions). Its state is in the
partitions' donefiles (the offsets each covers), nowhere else: a deleted pod's successor
resumes from the newest one. It runs the serving image (`python -m elasticctr_joiner`),
which has the Kafka client and the storage code already.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.contract import TrainerEnv
from elasticctr_common.feedback import JOINER_PORT, FeedbackEnv

from components import kube
from components.bucket_access import BucketUser
from components.kafka import KafkaClient
from components.kube import KubeTarget
from components.mlflow import RegistryClient
from components.network import Route, allow_egress, allow_ingress
from components.object_storage import ObjectStore

SERVICE_ACCOUNT = "joiner"
UGI_SECRET = "joiner-hdfs-ugi"


def status_url(namespace: pulumi.Input[str]) -> pulumi.Output[str]:
    """The joiner's /status and /metrics, from inside the cluster."""
    return pulumi.Output.concat("http://joiner.", namespace, f".svc.cluster.local:{JOINER_PORT}")


def bucket_user(dataset: str) -> BucketUser:
    """Writes the partitions under the dataset prefix (data.source storage)."""
    return BucketUser(SERVICE_ACCOUNT, ("joiner",), write=(dataset,))


@dataclass(frozen=True)
class JoinerArgs:
    target: KubeTarget
    image: pulumi.Input[str]  # the serving image
    kafka: KafkaClient
    dataset_uri: pulumi.Input[str]  # where the trainer reads: hdfs://... or s3://...
    partition_minutes: int
    join_window: int  # seconds
    topic_partitions: int
    cpu: float
    mem: float
    store: ObjectStore | None = None  # data.source storage: the joiner's bucket identity
    # HDFS (namenode, datanodes), or the bucket
    data_routes: tuple[Route | pulumi.Output[Route], ...] = ()
    hdfs_ugi: pulumi.Input[str] | None = None  # secret, "user,password"
    priority_class: str = ""  # the pod's; "": the cluster's default
    # MLflow's registry: each version's online quality goes to the run that trained it.
    registry: RegistryClient | None = None
    # Components that read its /status (cube-transfer judging a canary on its figures).
    status_clients: tuple[str, ...] = ()


class Joiner(pulumi.ComponentResource):
    url: pulumi.Output[str]  # its /status, for `elasticctr status` (through port-forward)

    def __init__(
        self, name: str, args: JoinerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.join_window < 0:
            raise ValueError(f"{name}: join_window must be >= 0, got {args.join_window}")
        super().__init__("elasticctr:joiner:Joiner", name, None, opts)
        target = args.target
        env = [
            *kube.env(
                {
                    FeedbackEnv.DATASET_URI: args.dataset_uri,
                    FeedbackEnv.PARTITION_MINUTES: str(args.partition_minutes),
                    FeedbackEnv.JOIN_WINDOW_SECONDS: str(args.join_window),
                    "HOME": "/tmp",
                    **(args.registry.env() if args.registry else {}),
                }
            ),
            *args.kafka.env,
            *(args.store.env() if args.store is not None else []),
        ]
        secrets = args.store.secret_files() if args.store is not None else kube.SecretFiles()
        if args.hdfs_ugi is not None:
            secret = k8s.core.v1.Secret(
                f"{name}-hdfs-ugi",
                metadata=target.metadata(UGI_SECRET, "joiner"),
                string_data={TrainerEnv.HDFS_UGI: pulumi.Output.secret(args.hdfs_ugi)},
                opts=target.opts(self),
            )
            secrets += kube.secret_files("hdfs-ugi", secret.metadata["name"], [TrainerEnv.HDFS_UGI])
        container = kube.container(
            target,
            "joiner",
            args.image,
            ["python", "-m", "elasticctr_joiner"],
            args=[f"--port={JOINER_PORT}", f"--topic-partitions={args.topic_partitions}"],
            env=[*env, *secrets.env],
            ports={"status": JOINER_PORT},
            cpu=args.cpu,
            mem=args.mem,
            readiness=kube.http_probe("/healthz", JOINER_PORT, 10),
            liveness=kube.http_probe("/healthz", JOINER_PORT, 30),
            mounts=[*args.kafka.mounts, *secrets.mounts],
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "joiner", self)
        k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=target.deployment_metadata("joiner", "joiner"),
            spec={
                "replicas": 1,
                "revision_history_limit": kube.REVISION_HISTORY_LIMIT,
                "selector": {"match_labels": kube.labels("joiner")},
                # Never two at once: the old pod is gone before the new one starts.
                "strategy": {"type": "Recreate"},
                "template": kube.pod_template(
                    "joiner",
                    [container],
                    [*args.kafka.volumes, *secrets.volumes],
                    service_account=account.metadata["name"],
                    priority_class=args.priority_class,
                ),
            },
            opts=target.opts(self),
        )
        # /status and /metrics are for people, through `kubectl port-forward` (the client's
        # `status`, which finds the pod by this Service), and for status_clients alone.
        kube.service(
            target, f"{name}-service", "joiner", "joiner", {"status": JOINER_PORT}, self,
            await_ready=False,  # ready once Kafka answers, which may be after `up`
        )  # fmt: skip
        if args.status_clients:
            allow_ingress(
                target, f"{name}-ingress", "joiner", [JOINER_PORT], list(args.status_clients), self
            )
        registry_routes = args.registry.routes if args.registry else ()
        allow_egress(
            target,
            f"{name}-egress",
            "joiner",
            [*args.kafka.routes, *args.data_routes, *registry_routes],
            self,
        )
        self.url = status_url(target.namespace)
        self.register_outputs({"url": self.url})
