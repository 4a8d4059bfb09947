"""Cube: the sparse embeddings served by key from `shards` servers (docs/architecture.md, "Cube").

One StatefulSet pod per shard holds a cube-server and its cube-agent; pod i serves the keys
k with k % shards == i and has a stable DNS name through a headless Service. One
cube-transfer follows the trainer's donefile, builds the shards of each new version and
switches every shard together. `cube.conf`, the shard list serving reads, is rendered here
so that it always has exactly `shards` nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import kube
from components.kube import KubeTarget
from components.network import allow_ingress
from components.object_storage import ObjectStore

SERVER_PORT = 8027
AGENT_PORT = 8001
TRANSFER_PORT = 8099
CONFIG_MAP = "cube-conf"
DICT_NAME = "ctr_embedding"
SHARD_DIR = f"{kube.DATA_DIR}/cube"
SHARD_ACCOUNT = "cube"  # servers and agents
TRANSFER_ACCOUNT = "cube-transfer"


@dataclass(frozen=True)
class CubeArgs:
    target: KubeTarget
    image: pulumi.Input[str]  # a pinned tag, or the digest of a build
    store: ObjectStore
    shards: int
    cpu: float = 1
    mem: float = 2  # GiB per shard pod
    storage: str = "20Gi"
    keep_versions: int = 3
    transfer_cpu: float = 1
    transfer_mem: float = 2  # GiB
    clients: tuple[str, ...] = ("serving",)  # components that look up embeddings
    node_pool: str = ""  # shards and transfer on this pool's nodes; "": any node


def cube_conf(namespace: str, shards: int) -> dict[str, Any]:
    """The shard list: node i serves keys k with k % shards == i."""
    return {
        "dict_name": DICT_NAME,
        "shard": shards,
        "nodes": [
            {
                "ip": f"cube-{i}.cube-headless.{namespace}.svc.cluster.local",
                "port": SERVER_PORT,
                "agent_port": AGENT_PORT,
            }
            for i in range(shards)
        ],
    }


class Cube(pulumi.ComponentResource):
    shards: pulumi.Output[int]
    config_map: pulumi.Output[str]
    config_hash: pulumi.Output[str]
    transfer_url: pulumi.Output[str]

    def __init__(
        self, name: str, args: CubeArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.shards < 1:
            raise ValueError(f"{name}: shards must be >= 1, got {args.shards}")
        super().__init__("elasticctr:cube:Cube", name, None, opts)
        target = args.target
        conf = pulumi.Output.from_input(target.namespace).apply(
            lambda ns: json.dumps(cube_conf(ns, args.shards), indent=2)
        )
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-conf",
            metadata=target.metadata(CONFIG_MAP, "cube"),
            data={"cube.conf": conf},
            opts=target.opts(self),
        )
        self.config_hash = conf.apply(lambda text: kube.digest({"cube.conf": text}))
        self._shard_servers(name, args)
        self._transfer(name, args, config_map)
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

        self.shards = pulumi.Output.from_input(args.shards)
        self.config_map = config_map.metadata["name"]
        self.transfer_url = pulumi.Output.concat(
            "http://cube-transfer.", target.namespace, f".svc.cluster.local:{TRANSFER_PORT}"
        )
        self.register_outputs(
            {
                "shards": self.shards,
                "config_map": self.config_map,
                "config_hash": self.config_hash,
                "transfer_url": self.transfer_url,
            }
        )

    def _shard_servers(self, name: str, args: CubeArgs) -> None:
        target = args.target
        selector = kube.labels("cube")
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
        shard_env = kube.env(
            {"CUBE_SHARD_NUM": str(args.shards), "CUBE_DATA_DIR": SHARD_DIR, "HOME": "/tmp"}
        )
        # The StatefulSet's pod index (Kubernetes >= 1.28) is the shard number.
        shard_env.append(
            kube.field_env("CUBE_SHARD_INDEX", "metadata.labels['apps.kubernetes.io/pod-index']")
        )
        shards_mount: k8s.core.v1.VolumeMountArgsDict = {"name": "shards", "mount_path": SHARD_DIR}
        # The server gets most of the pod's budget: it holds the embeddings in memory, two
        # versions of its shard during a rollout (cube.mem must fit both).
        server = kube.container(
            target,
            "server",
            args.image,
            ["python", "-m", "elasticctr_cube", "server"],
            args=[f"--port={SERVER_PORT}"],
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
            args=[f"--port={AGENT_PORT}", f"--server=http://127.0.0.1:{SERVER_PORT}"],
            env=[*shard_env, *kube.env({"CUBE_URI": args.store.uri("cube")}), *args.store.env()],
            ports={"agent": AGENT_PORT},
            cpu=args.cpu * 0.25,
            mem=args.mem * 0.125,
            readiness=kube.http_probe("/healthz", AGENT_PORT),
            mounts=[shards_mount],
        )
        account = kube.service_account(target, SHARD_ACCOUNT, "cube", self)
        k8s.apps.v1.StatefulSet(
            f"{name}-shards",
            # Ready once a first version is loaded, after training: do not wait for it.
            metadata=target.metadata("cube", "cube", await_ready=False),
            spec={
                "service_name": "cube-headless",
                "replicas": args.shards,
                # Shards are independent: start and replace them in parallel.
                "pod_management_policy": "Parallel",
                "selector": {"match_labels": selector},
                "persistent_volume_claim_retention_policy": {
                    "when_deleted": "Delete",
                    "when_scaled": "Delete",
                },
                "template": kube.pod_template(
                    "cube",
                    [server, agent],
                    service_account=account.metadata["name"],
                    node_pool=args.node_pool,
                ),
                # Shard files are rebuilt from the model export: a lost volume costs a reload.
                "volume_claim_templates": [kube.volume_claim("shards", args.storage)],
            },
            opts=target.opts(self, depends_on=[headless]),
        )

    def _transfer(self, name: str, args: CubeArgs, config_map: k8s.core.v1.ConfigMap) -> None:
        target = args.target
        container = kube.container(
            target,
            "transfer",
            args.image,
            ["python", "-m", "elasticctr_cube", "transfer"],
            args=[f"--port={TRANSFER_PORT}"],
            env=[
                *kube.env(
                    {
                        "CUBE_CONF": f"{kube.CONFIG_DIR}/cube.conf",
                        "MODEL_URI": args.store.uri("models"),
                        "CUBE_URI": args.store.uri("cube"),
                        "CUBE_KEEP_VERSIONS": str(args.keep_versions),
                        "CUBE_WORK_DIR": "/tmp/cube-transfer",
                        "HOME": "/tmp",
                    }
                ),
                *args.store.env(),
            ],
            ports={"http": TRANSFER_PORT},
            cpu=args.transfer_cpu,
            mem=args.transfer_mem,
            readiness=kube.http_probe("/healthz", TRANSFER_PORT),
            mounts=[kube.CONFIG_MOUNT],
        )
        account = kube.service_account(target, TRANSFER_ACCOUNT, "cube-transfer", self)
        k8s.apps.v1.Deployment(
            f"{name}-transfer",
            metadata=target.metadata("cube-transfer", "cube-transfer"),
            spec={
                "replicas": 1,
                # One transfer at a time: two would race on the same rollout.
                "strategy": {"type": "Recreate"},
                "selector": {"match_labels": kube.labels("cube-transfer")},
                # Shards of a version are built under /tmp: as large as a shard volume.
                "template": kube.pod_template(
                    "cube-transfer",
                    [container],
                    [kube.config_volume(config_map.metadata["name"])],
                    service_account=account.metadata["name"],
                    annotations={"elasticctr.io/config-sha256": self.config_hash},
                    tmp_size=args.storage,
                    node_pool=args.node_pool,
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
