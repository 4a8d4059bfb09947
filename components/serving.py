"""Serving: the CTR prediction API (docs/architecture.md, "Serving").

A Deployment scaled by a HorizontalPodAutoscaler on CPU, behind one Service, drained one
pod at a time (a PodDisruptionBudget). Pods read dense models from the bucket and
embeddings from cube (cube.conf mounted); a new cube.conf rolls the pods so none keeps a
stale shard list.

Who may call it: clients from `source_ranges` (the load balancer's source ranges and the
pods' NetworkPolicy, which sees client addresses because the Service keeps them:
externalTrafficPolicy Local), or anyone; with `auth`, only those that send the bearer token
the stack generates (a Secret the pods read; the stack output `serving_token`).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.contract import (
    CUBE_CONF,
    SERVING_AUTH_SECRET,
    SERVING_GRPC_PORT,
    SERVING_PORT,
    SLOT_CONF,
    ServingEnv,
)
from elasticctr_common.feedback import FeedbackEnv

from components import kube
from components.bucket_access import MODELS, BucketUser
from components.generated_secret import GeneratedCredential
from components.kafka import KafkaClient
from components.kube import KubeTarget
from components.network import ANYWHERE, Outside, Peer, Route, allow_egress, allow_ingress
from components.object_storage import ObjectStore

PORT = SERVING_PORT
GRPC_PORT = SERVING_GRPC_PORT  # the Open Inference Protocol over gRPC, beside HTTP
PORTS = {"http": PORT, "grpc": GRPC_PORT}
API_PATH = "/ElasticCTRPredictionService/inference"
SERVICE_ACCOUNT = "serving"
AUTH_SECRET = SERVING_AUTH_SECRET
TOKEN_KEY = ServingEnv.AUTH_TOKEN  # the Secret's key and the pods' variable
BUCKET_USER = BucketUser(SERVICE_ACCOUNT, ("serving",), read=(MODELS,))  # dense models
# How long `up` waits for serving's pods of a new rollout to be ready: a new cube layout is
# built and loaded first (minutes at 10^8 keys, docs/cube.md).
ROLLOUT_TIMEOUT = "30m"


@dataclass(frozen=True)
class ServingArgs:
    target: KubeTarget
    image: pulumi.Input[str]  # a pinned tag, or the digest of a build
    store: ObjectStore
    slot_conf_map: pulumi.Input[str]
    cube_conf_map: pulumi.Input[str]
    cube_conf_hash: pulumi.Input[str]
    cube_transfer_url: pulumi.Input[str]
    sparse_dim: int
    # The stack's serving section (infra/config.py ServingConfig), field for field, by name.
    replicas: int
    max_replicas: int
    target_cpu_percent: int
    cpu: float
    mem: float
    service_type: str
    node_pool: str  # pods on this pool's nodes; "": any node
    source_ranges: tuple[str, ...]  # CIDRs clients connect from; (): any address
    auth: bool  # clients send the generated bearer token
    priority_class: str  # the pods'; "": the cluster's default
    # The feedback section's: a share of requests logged, the records held while the
    # stream is away, the producer's compression.
    feedback_sample_rate: float
    feedback_buffer_records: int
    feedback_compression: str
    cube_routes: tuple[Route, ...] = ()  # cube's lookups and the transfer's status
    # cube's shard StatefulSets: the Deployment's rollout starts once they exist.
    cube_shards: tuple[pulumi.Resource, ...] = ()
    service_annotations: dict[str, str] | None = None  # the cloud's load balancer options
    # The feedback loop (feedback.enabled): impressions and clicks to this stream.
    feedback: KafkaClient | None = None


class Serving(pulumi.ComponentResource):
    url: pulumi.Output[str]
    grpc_address: pulumi.Output[str]  # host:port
    token: pulumi.Output[str] | None  # secret; None without auth

    def __init__(
        self, name: str, args: ServingArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if not 1 <= args.replicas <= args.max_replicas:
            raise ValueError(
                f"{name}: replicas must be from 1 to max_replicas ({args.max_replicas}), "
                f"got {args.replicas}"
            )
        super().__init__("elasticctr:serving:Serving", name, None, opts)
        target = args.target
        self.token = None
        secrets = args.store.secret_files()
        if args.auth:
            self.token = pulumi.Output.secret(
                GeneratedCredential(f"{name}-token", 40, pulumi.ResourceOptions(parent=self)).value
            )
            secret = k8s.core.v1.Secret(
                f"{name}-auth",
                metadata=target.metadata(AUTH_SECRET, "serving"),
                string_data={TOKEN_KEY: self.token},
                opts=target.opts(self),
            )
            secrets += kube.secret_files("serving-auth", secret.metadata["name"], [TOKEN_KEY])
        feedback_env: list[k8s.core.v1.EnvVarArgsDict] = []
        if args.feedback is not None:
            feedback_env = [
                *kube.env({
                    FeedbackEnv.SAMPLE_RATE: repr(args.feedback_sample_rate),
                    FeedbackEnv.BUFFER_RECORDS: str(args.feedback_buffer_records),
                    FeedbackEnv.COMPRESSION: args.feedback_compression,
                }),
                *args.feedback.env,
            ]  # fmt: skip
        feedback_routes = args.feedback.routes if args.feedback is not None else ()
        container = kube.container(
            target,
            "serving",
            args.image,
            ["python", "-m", "elasticctr_serving"],
            args=[
                f"--port={PORT}",
                f"--grpc-port={GRPC_PORT}",
                f"--shutdown-delay={kube.SHUTDOWN_DELAY_SECONDS}",
            ],
            env=[
                *kube.env(
                    {
                        ServingEnv.MODEL_URI: args.store.uri(MODELS),
                        ServingEnv.CUBE_CONF: CUBE_CONF,
                        ServingEnv.CUBE_TRANSFER_URL: args.cube_transfer_url,
                        ServingEnv.SLOT_CONF: SLOT_CONF,
                        ServingEnv.SPARSE_DIM: str(args.sparse_dim),
                        "HOME": "/tmp",
                    }
                ),
                *args.store.env(),
                *secrets.env,
                *feedback_env,
            ],
            ports=PORTS,
            cpu=args.cpu,
            mem=args.mem,
            readiness=kube.http_probe("/readyz", PORT, 5),
            liveness=kube.http_probe("/healthz", PORT, 20),
            mounts=[
                kube.CONFIG_MOUNT,
                *(args.feedback.mounts if args.feedback else []),
                *secrets.mounts,
            ],
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "serving", self)
        deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            # Awaited: a pod is ready once it serves cube's committed version (or once it
            # knows nothing is committed yet, on a new stack), so `up` ends only after
            # serving has moved. Building a new layout can take minutes.
            metadata=target.deployment_metadata("serving", "serving"),
            spec={
                "replicas": args.replicas,
                "revision_history_limit": kube.REVISION_HISTORY_LIMIT,
                "selector": {"match_labels": kube.labels("serving")},
                # Never fewer ready pods than wanted during a rollout.
                "strategy": {"rolling_update": {"max_unavailable": 0, "max_surge": 1}},
                "template": kube.pod_template(
                    "serving",
                    [container],
                    [
                        kube.config_volume(args.cube_conf_map, args.slot_conf_map),
                        *(args.feedback.volumes if args.feedback else []),
                        *secrets.volumes,
                    ],
                    service_account=account.metadata["name"],
                    annotations={"elasticctr.io/cube-conf-sha256": args.cube_conf_hash},
                    node_pool=args.node_pool,
                    priority_class=args.priority_class,
                ),
            },
            # The HPA owns the replica count once it exists; the spec only sets the start.
            opts=target.opts(
                self,
                depends_on=list(args.cube_shards),
                ignore_changes=["spec.replicas"],
                custom_timeouts=pulumi.CustomTimeouts(
                    create=ROLLOUT_TIMEOUT, update=ROLLOUT_TIMEOUT
                ),
            ),
        )
        exposure: dict[str, object] = {}
        if args.source_ranges and args.service_type != "ClusterIP":
            # Client addresses reach the pods (no hop through another node's SNAT), so that
            # the NetworkPolicy below can judge them.
            exposure["external_traffic_policy"] = "Local"
        if args.source_ranges and args.service_type == "LoadBalancer":
            exposure["load_balancer_source_ranges"] = list(args.source_ranges)
        service = kube.service(
            target,
            f"{name}-service",
            "serving",
            "serving",
            PORTS,
            self,
            service_type=args.service_type,
            extra=exposure,
            annotations=args.service_annotations,
            # Serving is ready once a first model exists, after training: the provider
            # would wait for its pods (and fail after 10 minutes on a fresh stack). A load
            # balancer's address may then show in `serving_url` only at the next update.
            await_ready=False,
        )
        k8s.autoscaling.v2.HorizontalPodAutoscaler(
            f"{name}-autoscaler",
            metadata=target.metadata("serving", "serving"),
            spec={
                "scale_target_ref": {
                    "api_version": "apps/v1",
                    "kind": "Deployment",
                    "name": "serving",
                },
                "min_replicas": args.replicas,
                "max_replicas": args.max_replicas,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {
                                "type": "Utilization",
                                "average_utilization": args.target_cpu_percent,
                            },
                        },
                    }
                ],
            },
            opts=target.opts(self, depends_on=[deployment]),
        )
        # A drain (or any eviction) takes one serving pod at a time, at whatever count the
        # HPA has scaled to (a fixed minAvailable would not follow it). With one replica a
        # drain still goes through, at the cost of serving while the pod moves. A pod that
        # is not ready serves nothing: evicting it must never hold a drain up.
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-budget",
            metadata=target.metadata("serving", "serving"),
            spec={
                "max_unavailable": 1,
                "selector": {"match_labels": kube.labels("serving")},
                "unhealthy_pod_eviction_policy": "AlwaysAllow",
            },
            opts=target.opts(self),
        )
        # The prediction API is for its clients: from source_ranges, else from anywhere.
        clients: list[Peer] = [Outside(cidr) for cidr in args.source_ranges] or [ANYWHERE]
        allow_ingress(target, f"{name}-ingress", "serving", list(PORTS.values()), clients, self)
        allow_egress(
            target,
            f"{name}-egress",
            "serving",
            [*args.cube_routes, *args.store.routes, *feedback_routes],
            self,
        )

        if args.service_type == "LoadBalancer":
            host = service.status.apply(_load_balancer_host)
        else:
            host = pulumi.Output.concat("serving.", target.namespace, ".svc.cluster.local")
        self.url = host.apply(lambda h: f"http://{h}:{PORT}" if h else "")
        self.grpc_address = host.apply(lambda h: f"{h}:{GRPC_PORT}" if h else "")
        self.register_outputs(
            {"url": self.url, "grpc_address": self.grpc_address, "token": self.token}
        )


def _load_balancer_host(status: k8s.core.v1.outputs.ServiceStatus | None) -> str:
    """The load balancer's address; "" until the cloud has given it one."""
    ingress = status.load_balancer.ingress if status and status.load_balancer else None
    if not ingress:
        return ""
    return ingress[0].hostname or ingress[0].ip or ""
