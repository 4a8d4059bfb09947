"""Cube: the sparse embeddings served by key from `shards` shards of `replicas` servers
each (docs/architecture.md, "Cube"; docs/cube.md, "Replicas" and "Reshaping").

Shard s of layout L is the StatefulSet `cube-<L>-<s>`: `replicas` pods `cube-<L>-<s>-<r>`,
each a cube-server and its cube-agent, serving the keys k with k % shards == s, with stable
DNS names through one headless Service; a Service `cube-<L>-<s>` in front of the shard's
ready pods; a PodDisruptionBudget that lets a drain take one replica of the shard at a
time; and anti-affinity (preferred) that puts the shard's replicas on different nodes. One
cube-transfer follows the trainer's donefile, builds the shards of each new version and
switches every replica of every shard together. `cube.conf`, the shard list serving
reads, is rendered here in Paddle Serving's form, so that it always lists exactly these
pods.

The layout L is a digest of everything the shard pods are made of (shard count, replicas,
image, resources, volumes, ...). Any change to them makes a new layout beside the old one
instead of restarting the old pods: the new cube-transfer builds and loads the committed
version on the new layout, serving's new pods become ready only on it, and the old
layout's objects are deleted by the same `up`, after serving's rollout (docs/cube.md,
"Reshaping"). A layout change costs a second set of shard pods (and their memory) while
`up` runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.canary import CanaryEnv
from elasticctr_common.contract import (
    CUBE,
    CUBE_AGENT_PORT,
    CUBE_CONF,
    CUBE_SERVER_CONTROL_PORT,
    CUBE_SERVER_PORT,
    CUBE_TRANSFER_CONTROL_PORT,
    CUBE_TRANSFER_PORT,
    MODELS,
    CubeEnv,
)
from elasticctr_common.cube.conf import (
    DEFAULT_MAX_KEYS,
    DICT_NAME,
    CubeConf,
    CubeNode,
    LoadBalancer,
)
from elasticctr_common.feedback import JOINER_PORT

from components import kube
from components.bucket_access import BucketUser
from components.kube import KubeTarget
from components.mlflow import RegistryClient
from components.network import Route, allow_egress, allow_ingress
from components.object_storage import ObjectStore

SERVER_PORT = CUBE_SERVER_PORT
AGENT_PORT = CUBE_AGENT_PORT
TRANSFER_PORT = CUBE_TRANSFER_PORT
# Version changes (a server's load/switch/unload, the transfer's rollback) listen on loopback
# only: the agent shares its server's pod; people reach the rollback with a port-forward.
SERVER_CONTROL_PORT = CUBE_SERVER_CONTROL_PORT
TRANSFER_CONTROL_PORT = CUBE_TRANSFER_CONTROL_PORT
CONFIG_MAP = "cube-conf"
# Keys per request a cube-server takes: its --max-keys and cube.conf's max_keys, from which
# serving derives its own per-request limit (one place for both).
MAX_KEYS = DEFAULT_MAX_KEYS
SHARD_LABEL = "elasticctr.io/cube-shard"
LAYOUT_LABEL = "elasticctr.io/cube-layout"
# Where a shard's replicas go apart (topology key, scheduler weight): nodes first.
SPREAD = (("kubernetes.io/hostname", 100), ("topology.kubernetes.io/zone", 50))
LAYOUT_ID_LENGTH = 8  # hex digits of the layout digest in names (cube-<layout>-<s>-<r>)
SHARD_DIR = f"{kube.DATA_DIR}/cube"
SHARD_ACCOUNT = "cube"  # servers and agents
TRANSFER_ACCOUNT = "cube-transfer"
# Agents fetch shards of published versions; the transfer reads the model export and
# publishes, and prunes, cube versions.
SHARD_BUCKET_USER = BucketUser(SHARD_ACCOUNT, ("cube",), read=(CUBE,))
TRANSFER_BUCKET_USER = BucketUser(
    TRANSFER_ACCOUNT, ("cube-transfer",), read=(MODELS,), write=(CUBE,), delete=(CUBE,)
)


@dataclass(frozen=True)
class CubeArgs:
    target: KubeTarget
    image: pulumi.Input[str]  # a pinned tag, or the digest of a build
    store: ObjectStore  # the agents' (they read shards)
    shards: int
    # The stack's cube section (infra/config.py CubeConfig), field for field, by name.
    replicas: int  # cube-servers per shard (cube.conf dup)
    timeout_ms: int  # a lookup, retries and hedged requests included
    retry: int
    backup_request_ms: int  # 0: no hedged requests
    load_balancer: LoadBalancer
    cpu: float
    mem: float  # GiB per shard pod
    storage: str
    keep_versions: int
    base_every: int  # a delta version becomes a base every this many versions
    max_chain_fraction: float  # ... or once its chain outgrows this fraction of the base
    transfer_cpu: float
    transfer_mem: float  # GiB
    node_pool: str  # shards and transfer on this pool's nodes; "": any node
    priority_class: str  # the shards' and the transfer's; "": the cluster's default
    clients: tuple[str, ...] = ("serving",)  # components that look up embeddings
    transfer_store: ObjectStore | None = None  # the transfer's (writes shards); None: store
    # MLflow's model registry: the transfer points its serving alias at each committed version.
    registry: RegistryClient | None = None
    canary: CanaryArgs | None = None  # new versions on trial first (elasticctr_common.canary)

    @property
    def transfer_bucket(self) -> ObjectStore:
        return self.transfer_store or self.store


@dataclass(frozen=True)
class CanaryArgs:
    """The stack's canary section, field for field; the transfer reads the joiner's figures."""

    fraction: float
    margin: float
    confidence: float
    min_clicks: int
    max_seconds: int
    joiner_url: pulumi.Input[str]

    def env(self) -> dict[str, pulumi.Input[str]]:
        return {
            CanaryEnv.FRACTION: str(self.fraction),
            CanaryEnv.MARGIN: str(self.margin),
            CanaryEnv.CONFIDENCE: str(self.confidence),
            CanaryEnv.MIN_CLICKS: str(self.min_clicks),
            CanaryEnv.MAX_SECONDS: str(self.max_seconds),
            CanaryEnv.JOINER_URL: self.joiner_url,
        }


def shard_name(layout: str, shard: int) -> str:
    """The StatefulSet, Service and disruption budget of shard `shard` of `layout`."""
    return f"cube-{layout}-{shard}"


def cube_conf(namespace: str, layout: str, args: CubeArgs) -> CubeConf:
    """The shard list: node s serves keys k with k % shards == s; its address is the
    shard's Service (Paddle's Python client reads only that), its replicas the pods
    (Paddle's brpc client and ours balance over them)."""
    domain = f"{namespace}.svc.cluster.local"
    return CubeConf(
        dict_name=DICT_NAME,
        shard=args.shards,
        nodes=tuple(
            CubeNode(f"{shard_name(layout, s)}.{domain}", SERVER_PORT, AGENT_PORT)
            for s in range(args.shards)
        ),
        replicas=tuple(
            tuple(
                CubeNode(
                    f"{shard_name(layout, s)}-{r}.cube-headless.{domain}", SERVER_PORT, AGENT_PORT
                )
                for r in range(args.replicas)
            )
            for s in range(args.shards)
        ),
        timeout_ms=args.timeout_ms,
        retry=args.retry,
        backup_request_ms=args.backup_request_ms,
        load_balancer=args.load_balancer,
        max_keys=MAX_KEYS,
    )


class Cube(pulumi.ComponentResource):
    shards: pulumi.Output[int]
    layout: pulumi.Output[str]
    config_map: pulumi.Output[str]
    config_hash: pulumi.Output[str]
    transfer_url: pulumi.Output[str]
    # What a client (serving) reaches: the servers' lookups and the transfer's status.
    client_routes = (Route("cube", (SERVER_PORT,)), Route("cube-transfer", (TRANSFER_PORT,)))

    def __init__(
        self, name: str, args: CubeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.shards < 1:
            raise ValueError(f"{name}: shards must be >= 1, got {args.shards}")
        if args.replicas < 1:
            raise ValueError(f"{name}: replicas must be >= 1, got {args.replicas}")
        super().__init__("elasticctr:cube:Cube", name, None, opts)
        target = args.target
        # Transfer must reach an agent before its server has loaded a first version.
        headless = kube.service(
            target,
            f"{name}-headless",
            "cube-headless",
            "cube",
            {"server": SERVER_PORT, "agent": AGENT_PORT},
            self,
            headless=True,
            publish_not_ready=True,
        )
        account = kube.service_account(target, SHARD_ACCOUNT, "cube", self)
        account_name = account.metadata["name"]
        self.layout = pulumi.Output.from_input(
            {
                "shards": args.shards,
                "statefulsets": [
                    self._shard_spec(args, s, account_name, None) for s in range(args.shards)
                ],
            }
        ).apply(lambda spec: kube.json_digest(spec)[:LAYOUT_ID_LENGTH])
        conf = pulumi.Output.all(target.namespace, self.layout).apply(
            lambda values: cube_conf(values[0], values[1], args).to_json()
        )
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-conf",
            metadata=target.metadata(CONFIG_MAP, "cube"),
            data={"cube.conf": conf},
            opts=target.opts(self),
        )
        self.config_hash = conf.apply(lambda text: kube.digest({"cube.conf": text}))
        # What serving's Deployment depends on: its rollout starts once they exist.
        self.shard_sets = [
            self._shard(name, args, shard, account_name, headless) for shard in range(args.shards)
        ]
        self._transfer(name, args, config_map)
        # The servers' port takes lookups and status reads only: loads and switches are on
        # a control port bound to the pod's loopback, for its agent. The agents' commands
        # come from the transfer alone; the transfer's port serves status and history, its
        # rollback is on a loopback control port too (kubectl port-forward).
        allow_ingress(
            target,
            f"{name}-server-ingress",
            "cube",
            [SERVER_PORT],
            [*args.clients, "cube-transfer"],
            self,
            policy_name="allow-cube-server",
        )
        allow_ingress(
            target,
            f"{name}-agent-ingress",
            "cube",
            [AGENT_PORT],
            ["cube-transfer"],
            self,
            policy_name="allow-cube-agent",
        )
        allow_ingress(
            target,
            f"{name}-transfer-ingress",
            "cube-transfer",
            [TRANSFER_PORT],
            list(args.clients),
            self,
        )
        # Agents fetch shards; the transfer reads the model export, publishes shards and
        # commands the agents (and may read the servers' status).
        allow_egress(target, f"{name}-shard-egress", "cube", args.store.routes, self)
        allow_egress(
            target,
            f"{name}-transfer-egress",
            "cube-transfer",
            [
                Route("cube", (AGENT_PORT, SERVER_PORT)),
                *args.transfer_bucket.routes,
                *(args.registry.routes if args.registry else ()),
                *((Route("joiner", (JOINER_PORT,)),) if args.canary else ()),
            ],
            self,
        )

        self.shards = pulumi.Output.from_input(args.shards)
        self.config_map = config_map.metadata["name"]
        self.transfer_url = pulumi.Output.concat(
            "http://cube-transfer.", target.namespace, f".svc.cluster.local:{TRANSFER_PORT}"
        )
        self.register_outputs(
            {
                "shards": self.shards,
                "layout": self.layout,
                "config_map": self.config_map,
                "config_hash": self.config_hash,
                "transfer_url": self.transfer_url,
            }
        )

    def _shard(
        self,
        name: str,
        args: CubeArgs,
        shard: int,
        account_name: pulumi.Input[str],
        headless: k8s.core.v1.Service,
    ) -> k8s.apps.v1.StatefulSet:
        """StatefulSet cube-<layout>-<shard> (its replicas), its Service and budget."""
        target = args.target
        selector = self._selector(shard, self.layout)
        object_name = self.layout.apply(lambda layout: shard_name(layout, shard))
        statefulset = k8s.apps.v1.StatefulSet(
            f"{name}-shard-{shard}",
            # Ready once a first version is loaded, after training: do not wait for it.
            # Serving's Deployment is awaited instead: its pods of a new layout become
            # ready only once this layout serves the committed version.
            metadata={
                **target.metadata("", "cube", await_ready=False),
                "name": object_name,
            },
            spec=self._shard_spec(args, shard, account_name, self.layout),
            opts=target.opts(self, depends_on=[headless]),
        )
        # Paddle Serving's Python client asks one address per shard: the shard's ready pods
        # (not awaited: a server is ready once it holds a version, after the first training).
        k8s.core.v1.Service(
            f"{name}-shard-{shard}-service",
            metadata={**target.metadata("", "cube", await_ready=False), "name": object_name},
            spec={"selector": selector, "ports": [{"name": "server", "port": SERVER_PORT}]},
            opts=target.opts(self),
        )
        # A drain (or any eviction) takes one replica of a shard at a time. With one
        # replica (dev) that still lets a drain through, at the cost of that shard.
        k8s.policy.v1.PodDisruptionBudget(
            f"{name}-shard-{shard}-budget",
            metadata={**target.metadata("", "cube"), "name": object_name},
            spec={"max_unavailable": 1, "selector": {"match_labels": selector}},
            opts=target.opts(self),
        )
        return statefulset

    @staticmethod
    def _selector(shard: int, layout: pulumi.Input[str] | None) -> dict[str, Any]:
        labels: dict[str, Any] = {**kube.labels("cube"), SHARD_LABEL: str(shard)}
        if layout is not None:
            labels[LAYOUT_LABEL] = layout
        return labels

    def _shard_spec(
        self,
        args: CubeArgs,
        shard: int,
        account_name: pulumi.Input[str],
        layout: pulumi.Input[str] | None,
    ) -> dict[str, Any]:
        """The StatefulSet spec of shard `shard`; without a layout, what the layout's
        digest is taken of."""
        target = args.target
        selector = self._selector(shard, layout)
        shard_env = kube.env(
            {
                CubeEnv.SHARD_INDEX: str(shard),
                CubeEnv.SHARD_NUM: str(args.shards),
                CubeEnv.DATA_DIR: SHARD_DIR,
                "HOME": "/tmp",
            }
        )
        shards_mount: k8s.core.v1.VolumeMountArgsDict = {"name": "shards", "mount_path": SHARD_DIR}
        secrets = args.store.secret_files()  # the agent's
        # The server gets most of the pod's budget: it holds the embeddings in memory, two
        # versions of its shard during a rollout (cube.mem must fit both).
        server = kube.container(
            target,
            "server",
            args.image,
            ["python", "-m", "elasticctr_cube", "server"],
            args=[
                f"--port={SERVER_PORT}",
                f"--control-port={SERVER_CONTROL_PORT}",
                f"--max-keys={MAX_KEYS}",
                # Longer than serving's own: a serving pod told to stop when a layout is
                # replaced still answers on this one until it stops accepting.
                f"--shutdown-delay={2 * kube.SHUTDOWN_DELAY_SECONDS}",
            ],
            env=shard_env,
            ports={"server": SERVER_PORT},
            cpu=args.cpu * 0.75,
            mem=args.mem * 0.875,
            readiness=kube.http_probe("/readyz", SERVER_PORT),
            liveness=kube.http_probe("/healthz", SERVER_PORT, 20),
            mounts=[shards_mount],
        )
        agent = kube.container(
            target,
            "agent",
            args.image,
            ["python", "-m", "elasticctr_cube", "agent"],
            args=[f"--port={AGENT_PORT}", f"--server=http://127.0.0.1:{SERVER_CONTROL_PORT}"],
            env=[
                *shard_env,
                *kube.env({CubeEnv.CUBE_URI: args.store.uri(CUBE)}),
                *args.store.env(),
                *secrets.env,
            ],
            ports={"agent": AGENT_PORT},
            cpu=args.cpu * 0.25,
            mem=args.mem * 0.125,
            readiness=kube.http_probe("/healthz", AGENT_PORT),
            liveness=kube.liveness({"http_get": {"path": "/healthz", "port": AGENT_PORT}}),
            mounts=[shards_mount, *secrets.mounts],
        )
        # Replicas of a shard on different nodes where the cluster has them, so that
        # losing a node loses at most one replica of each shard; and in different zones
        # where it has zones, so that losing a zone does not either. Preferred, not
        # required: a one-node or one-zone cluster still runs every replica.
        spread: k8s.core.v1.AffinityArgsDict = {
            "pod_anti_affinity": {
                "preferred_during_scheduling_ignored_during_execution": [
                    {
                        "weight": weight,
                        "pod_affinity_term": {
                            "label_selector": {"match_labels": selector},
                            "topology_key": topology_key,
                        },
                    }
                    for topology_key, weight in SPREAD
                ]
            }
        }
        template = kube.pod_template(
            "cube",
            [server, agent],
            secrets.volumes,
            service_account=account_name,
            node_pool=args.node_pool,
            priority_class=args.priority_class,
            extra_labels={k: v for k, v in selector.items() if k in (SHARD_LABEL, LAYOUT_LABEL)},
            affinity=spread,
            recommended_labels=False,  # a new template is a new layout (kube.pod_template)
        )
        return {
            "service_name": "cube-headless",
            "replicas": args.replicas,
            # Replicas are alike: start and replace them in parallel; a rolling update
            # still takes one pod of the shard at a time.
            "pod_management_policy": "Parallel",
            "selector": {"match_labels": selector},
            "persistent_volume_claim_retention_policy": {
                "when_deleted": "Delete",
                "when_scaled": "Delete",
            },
            "template": template,
            # Shard files are rebuilt from the model export: a lost volume costs a reload.
            "volume_claim_templates": [kube.volume_claim("shards", args.storage)],
        }

    def _transfer(self, name: str, args: CubeArgs, config_map: k8s.core.v1.ConfigMap) -> None:
        target = args.target
        health: k8s.core.v1.ProbeArgsDict = {
            "http_get": {"path": "/healthz", "port": TRANSFER_PORT}
        }
        secrets = args.transfer_bucket.secret_files()
        container = kube.container(
            target,
            "transfer",
            args.image,
            ["python", "-m", "elasticctr_cube", "transfer"],
            args=[f"--port={TRANSFER_PORT}", f"--control-port={TRANSFER_CONTROL_PORT}"],
            env=[
                *kube.env(
                    {
                        CubeEnv.CUBE_CONF: CUBE_CONF,
                        CubeEnv.MODEL_URI: args.transfer_bucket.uri(MODELS),
                        CubeEnv.CUBE_URI: args.transfer_bucket.uri(CUBE),
                        CubeEnv.KEEP_VERSIONS: str(args.keep_versions),
                        CubeEnv.BASE_EVERY: str(args.base_every),
                        CubeEnv.MAX_CHAIN_FRACTION: str(args.max_chain_fraction),
                        CubeEnv.WORK_DIR: "/tmp/cube-transfer",
                        "HOME": "/tmp",
                        **(args.registry.env() if args.registry else {}),
                        **(args.canary.env() if args.canary else {}),
                    }
                ),
                *args.transfer_bucket.env(),
                *secrets.env,
            ],
            ports={"http": TRANSFER_PORT},
            cpu=args.transfer_cpu,
            mem=args.transfer_mem,
            readiness=kube.http_probe("/healthz", TRANSFER_PORT),
            liveness=kube.liveness(health),
            # It listens once it has read its state from the bucket, which it waits up to ten
            # minutes for on a new stack (transfer.py, STORAGE_WAIT_SECONDS).
            startup=kube.startup(health),
            mounts=[kube.CONFIG_MOUNT, *secrets.mounts],
        )
        account = kube.service_account(target, TRANSFER_ACCOUNT, "cube-transfer", self)
        k8s.apps.v1.Deployment(
            f"{name}-transfer",
            metadata=target.deployment_metadata("cube-transfer", "cube-transfer"),
            spec={
                "replicas": 1,
                "revision_history_limit": kube.REVISION_HISTORY_LIMIT,
                # One transfer at a time: two would race on the same rollout.
                "strategy": {"type": "Recreate"},
                "selector": {"match_labels": kube.labels("cube-transfer")},
                # Shards of a version are built under /tmp: as large as a shard volume.
                "template": kube.pod_template(
                    "cube-transfer",
                    [container],
                    [kube.config_volume(config_map.metadata["name"]), *secrets.volumes],
                    service_account=account.metadata["name"],
                    annotations={"elasticctr.io/config-sha256": self.config_hash},
                    tmp_size=args.storage,
                    node_pool=args.node_pool,
                    priority_class=args.priority_class,
                ),
            },
            opts=target.opts(self),
        )
        kube.service(
            target,
            f"{name}-transfer-service",
            "cube-transfer",
            "cube-transfer",
            {"http": TRANSFER_PORT},
            self,
        )
