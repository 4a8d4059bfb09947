"""The feedback loop's stream (docs/feedback.md): Kafka in the cluster (one KRaft node), or
an external cluster (MSK, Huawei DMS, Baidu's Kafka) reached with its bootstrap servers
and SASL/TLS credentials.

Either way the component hands its clients (serving, the joiner) a `KafkaClient`: the
environment elasticctr_common.feedback.FeedbackEnv names (credentials from a Secret, a
CA bundle from a ConfigMap), the volume that bundle needs, and the egress routes.

In cluster: a StatefulSet `kafka` of one pod (broker and controller, KRaft), its log on
a volume, behind the Service `kafka:9092`; the controller listens on the pod's loopback
only. It runs `images.kafka` through two scripts both apache/kafka and the local
stand-in have (docs/feedback.md, "Kafka image interface"): `kafka-storage.sh format`
(once: `--ignore-formatted`) then `kafka-server-start.sh`, configured by a mounted
server.properties. Only serving and the joiner reach it (NetworkPolicy); the joiner
creates the topics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.feedback import KAFKA_CONTROLLER_PORT, KAFKA_PORT, FeedbackEnv

from components import kube
from components.kube import KubeTarget
from components.network import ANYWHERE, Route, allow_ingress, host_block

SERVICE_ACCOUNT = "kafka"
CONFIG_MAP = "kafka-conf"
CONF_DIR = "/etc/kafka-conf"
# apache/kafka's own `appuser`, which owns its directories (docs/architecture.md).
IMAGE_USER = 1000
DATA_DIR = "/var/lib/kafka/data"
CA_MAP = "kafka-ca"
CA_DIR = "/etc/kafka-ca"
CA_FILE = "ca.pem"
CLIENT_SECRET = "kafka-client"
# A KRaft cluster id: 16 bytes in URL-safe base64 (22 characters), fixed per stack.
CLUSTER_ID = "ElasticctrFeedbackKRft"
CLIENTS = ("serving", "joiner")  # the components that connect (NetworkPolicy)


def server_properties(advertised: str, retention_hours: int) -> str:
    """server.properties of the single KRaft node (broker + controller)."""
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=0",
        f"controller.quorum.voters=0@127.0.0.1:{KAFKA_CONTROLLER_PORT}",
        f"listeners=PLAINTEXT://0.0.0.0:{KAFKA_PORT},CONTROLLER://127.0.0.1:{KAFKA_CONTROLLER_PORT}",
        f"advertised.listeners=PLAINTEXT://{advertised}:{KAFKA_PORT}",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
        f"log.dirs={DATA_DIR}",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=false",  # the joiner creates them, with their partitions
        f"log.retention.hours={retention_hours}",
        "",
    ])  # fmt: skip


@dataclass(frozen=True)
class KafkaClient:
    """What a client pod of the stream needs."""

    env: list[k8s.core.v1.EnvVarArgsDict]
    routes: tuple[Route, ...]
    volumes: list[k8s.core.v1.VolumeArgsDict] = field(default_factory=list)
    mounts: list[k8s.core.v1.VolumeMountArgsDict] = field(default_factory=list)


@dataclass(frozen=True)
class KafkaArgs:
    target: KubeTarget
    mode: Literal["in-cluster", "external"]
    impressions_topic: str
    clicks_topic: str
    # in-cluster
    image: str = ""
    storage: str = "10Gi"
    cpu: float = 0.5
    mem: float = 1.0
    retention_hours: int = 72
    priority_class: str = ""  # the broker pod's; "": the cluster's default
    # external
    bootstrap_servers: str = ""
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    username: pulumi.Input[str] | None = None  # secret
    password: pulumi.Input[str] | None = None  # secret
    ca_cert: str = ""


class Kafka(pulumi.ComponentResource):
    bootstrap: pulumi.Output[str]
    client: KafkaClient

    def __init__(
        self, name: str, args: KafkaArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.mode == "in-cluster" and not args.image:
            raise ValueError(f"{name}: image is required in mode in-cluster")
        if args.mode == "external" and not args.bootstrap_servers:
            raise ValueError(f"{name}: bootstrap_servers is required in mode external")
        super().__init__("elasticctr:kafka:Kafka", name, None, opts)
        target = args.target
        topics = {
            FeedbackEnv.IMPRESSIONS_TOPIC: args.impressions_topic,
            FeedbackEnv.CLICKS_TOPIC: args.clicks_topic,
        }
        if args.mode == "in-cluster":
            host = pulumi.Output.concat("kafka.", target.namespace, ".svc.cluster.local")
            self.bootstrap = pulumi.Output.concat(host, f":{KAFKA_PORT}")
            self._in_cluster(name, args, host)
            self.client = KafkaClient(
                env=kube.env({FeedbackEnv.BOOTSTRAP: self.bootstrap, **topics}),
                routes=(Route("kafka", (KAFKA_PORT,)),),
            )
        else:
            self.bootstrap = pulumi.Output.from_input(args.bootstrap_servers)
            self.client = self._external(name, args, topics)
        self.register_outputs({"bootstrap": self.bootstrap})

    def _external(self, name: str, args: KafkaArgs, topics: dict[str, str]) -> KafkaClient:
        target = args.target
        env = kube.env({
            FeedbackEnv.BOOTSTRAP: args.bootstrap_servers,
            FeedbackEnv.SECURITY_PROTOCOL: args.security_protocol,
            **topics,
        })  # fmt: skip
        volumes: list[k8s.core.v1.VolumeArgsDict] = []
        mounts: list[k8s.core.v1.VolumeMountArgsDict] = []
        if args.security_protocol.startswith("SASL"):
            assert args.username is not None and args.password is not None
            secret = k8s.core.v1.Secret(
                f"{name}-client",
                metadata=target.metadata(CLIENT_SECRET, "kafka"),
                string_data={
                    FeedbackEnv.SASL_USERNAME: pulumi.Output.secret(args.username),
                    FeedbackEnv.SASL_PASSWORD: pulumi.Output.secret(args.password),
                },
                opts=target.opts(self),
            )
            env += kube.env({FeedbackEnv.SASL_MECHANISM: args.sasl_mechanism})
            sasl = kube.secret_files(
                "kafka-sasl",
                secret.metadata["name"],
                [FeedbackEnv.SASL_USERNAME, FeedbackEnv.SASL_PASSWORD],
            )
            env += sasl.env
            volumes += sasl.volumes
            mounts += sasl.mounts
        if args.ca_cert and args.security_protocol.endswith("SSL"):
            ca = k8s.core.v1.ConfigMap(
                f"{name}-ca",
                metadata=target.metadata(CA_MAP, "kafka"),
                data={CA_FILE: args.ca_cert},
                opts=target.opts(self),
            )
            volumes.append({"name": "kafka-ca", "config_map": {"name": ca.metadata["name"]}})
            mounts.append({"name": "kafka-ca", "mount_path": CA_DIR, "read_only": True})
            env += kube.env({FeedbackEnv.SSL_CA_LOCATION: f"{CA_DIR}/{CA_FILE}"})
        # Clients go to the bootstrap servers, then to whichever brokers the metadata
        # names: the bootstrap ports on any address (a broker's IP is not known ahead).
        routes = []
        for server in args.bootstrap_servers.split(","):
            host, _, port = server.strip().rpartition(":")
            routes.append(Route(host_block(host), (int(port),)))
            routes.append(Route(ANYWHERE, (int(port),)))
        return KafkaClient(env, tuple(dict.fromkeys(routes)), volumes, mounts)

    def _in_cluster(self, name: str, args: KafkaArgs, host: pulumi.Output[str]) -> None:
        target = args.target
        properties = host.apply(lambda h: server_properties(h, args.retention_hours))
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-conf",
            metadata=target.metadata(CONFIG_MAP, "kafka"),
            data={"server.properties": properties},
            opts=target.opts(self),
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "kafka", self)
        props = f"{CONF_DIR}/server.properties"
        script = (
            f"/opt/kafka/bin/kafka-storage.sh format --config {props} --cluster-id {CLUSTER_ID} "
            f"--ignore-formatted && exec /opt/kafka/bin/kafka-server-start.sh {props}"
        )
        heap = max(256, int(args.mem * 1024 * 0.5))  # MiB: half the limit, the page cache the rest
        broker = kube.container(
            target,
            "kafka",
            args.image,
            ["sh", "-c", script],
            env=kube.env(
                {
                    "KAFKA_HEAP_OPTS": f"-Xmx{heap}m -Xms{heap}m",
                    "LOG_DIR": "/tmp/kafka-logs",  # the real image's scripts log there too
                }
            ),
            ports={"kafka": KAFKA_PORT},
            cpu=args.cpu,
            mem=args.mem,
            readiness={"tcp_socket": {"port": KAFKA_PORT}, "period_seconds": 5},
            liveness={
                "tcp_socket": {"port": KAFKA_PORT},
                "period_seconds": 20,
                "initial_delay_seconds": 60,
            },
            mounts=[
                {"name": "data", "mount_path": DATA_DIR.rsplit("/", 1)[0]},
                {"name": "kafka-conf", "mount_path": CONF_DIR, "read_only": True},
            ],
            user=IMAGE_USER,
        )
        headless = kube.service(
            target, f"{name}-headless", "kafka-headless", "kafka", {"kafka": KAFKA_PORT}, self,
            headless=True, publish_not_ready=True,
        )  # fmt: skip
        kube.service(target, f"{name}-service", "kafka", "kafka", {"kafka": KAFKA_PORT}, self,
                     await_ready=False)  # fmt: skip
        k8s.apps.v1.StatefulSet(
            f"{name}-broker",
            metadata=target.metadata("kafka", "kafka"),
            spec={
                "service_name": "kafka-headless",
                "replicas": 1,
                "selector": {"match_labels": kube.labels("kafka")},
                "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
                "template": kube.pod_template(
                    "kafka",
                    [broker],
                    [{"name": "kafka-conf", "config_map": {"name": config_map.metadata["name"]}}],
                    service_account=account.metadata["name"],
                    annotations={"elasticctr.io/config-sha256": properties.apply(
                        lambda text: kube.digest({"server.properties": text}))},
                    priority_class=args.priority_class,
                    user=IMAGE_USER,
                ),
                "volume_claim_templates": [kube.volume_claim("data", args.storage)],
            },
            opts=target.opts(self, depends_on=[headless, config_map]),
        )  # fmt: skip
        allow_ingress(target, f"{name}-ingress", "kafka", [KAFKA_PORT], list(CLIENTS), self)
