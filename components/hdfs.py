"""HDFS for the training data: a namenode and datanodes in the cluster (apache/hadoop), or an
external namenode as the seeds' `-hd` option. Either way the component's `address` is the
hdfs://host:port the trainers read from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s

from components import kube
from components.kube import KubeTarget
from components.network import ANYWHERE, Route, allow_egress, allow_ingress, url_route

NAMENODE_RPC_PORT = 8020
NAMENODE_HTTP_PORT = 9870
DATANODE_PORTS = {"data": 9866, "http": 9864, "ipc": 9867}
# The image's starter formats the namenode only while this directory does not exist, so it
# is a subdirectory of the volume: the mount point itself always exists.
NAMENODE_DIR = "/data/namenode"
DATANODE_DIR = "/data/datanode"
SERVICE_ACCOUNT = "hdfs"


@dataclass(frozen=True)
class _Role:
    """One HDFS role (namenode or datanode) as a StatefulSet."""

    component: str
    command: list[str]
    replicas: int
    ports: dict[str, int]
    storage: str
    readiness: k8s.core.v1.ProbeArgsDict


@dataclass(frozen=True)
class HdfsArgs:
    target: KubeTarget
    mode: Literal["in-cluster", "external"]
    address: str = ""  # external mode: hdfs://host:port
    image: str = ""  # in-cluster mode
    datanodes: int = 1
    replication: int = 1
    namenode_storage: str = "10Gi"
    datanode_storage: str = "50Gi"
    cpu: float = 0.5  # per namenode or datanode pod
    mem: float = 1


class Hdfs(pulumi.ComponentResource):
    address: pulumi.Output[str]
    web_url: pulumi.Output[str]

    def __init__(
        self, name: str, args: HdfsArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if args.mode == "external" and not args.address.startswith("hdfs://"):
            raise ValueError(
                f"{name}: address must be hdfs://host:port in mode external, got {args.address!r}"
            )
        if args.mode == "in-cluster" and not args.image:
            raise ValueError(f"{name}: image is required in mode in-cluster")
        if args.mode == "in-cluster" and not 1 <= args.replication <= args.datanodes:
            raise ValueError(
                f"{name}: replication must be from 1 to datanodes ({args.datanodes}), "
                f"got {args.replication}"
            )
        super().__init__("elasticctr:hdfs:Hdfs", name, None, opts)

        if args.mode == "external":
            self.address = pulumi.Output.from_input(args.address.rstrip("/"))
            self.web_url = pulumi.Output.from_input("")
        else:
            host = pulumi.Output.concat(
                "hdfs-namenode.", args.target.namespace, ".svc.cluster.local"
            )
            self.address = pulumi.Output.concat("hdfs://", host, f":{NAMENODE_RPC_PORT}")
            self.web_url = pulumi.Output.concat("http://", host, f":{NAMENODE_HTTP_PORT}")
            self._in_cluster(name, args)
        self.register_outputs({"address": self.address, "web_url": self.web_url})

    def _in_cluster(self, name: str, args: HdfsArgs) -> None:
        target = args.target
        site = kube.env(
            {
                # apache/hadoop turns FILE_property=value variables into its *-site.xml files.
                "CORE-SITE.XML_fs.defaultFS": f"hdfs://hdfs-namenode:{NAMENODE_RPC_PORT}",
                "HDFS-SITE.XML_dfs.replication": str(args.replication),
                "HDFS-SITE.XML_dfs.namenode.name.dir": NAMENODE_DIR,
                "HDFS-SITE.XML_dfs.datanode.data.dir": DATANODE_DIR,
                "HDFS-SITE.XML_dfs.namenode.rpc-bind-host": "0.0.0.0",
                # Pod IPs do not reverse-resolve to the names datanodes register with.
                "HDFS-SITE.XML_dfs.namenode.datanode.registration.ip-hostname-check": "false",
                # Only pods of this namespace reach HDFS (NetworkPolicy); the seeds' UGI is
                # a user name, not an identity HDFS could check without Kerberos.
                "HDFS-SITE.XML_dfs.permissions.enabled": "false",
                "ENSURE_NAMENODE_DIR": NAMENODE_DIR,
            }
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "hdfs", self)
        namenode_ports = {"rpc": NAMENODE_RPC_PORT, "http": NAMENODE_HTTP_PORT}
        namenode = self._node_set(
            f"{name}-namenode",
            args,
            _Role("hdfs-namenode", ["hdfs", "namenode"], 1, namenode_ports, args.namenode_storage,
                  kube.http_probe("/", NAMENODE_HTTP_PORT)),
            site,
            account.metadata["name"],
        )  # fmt: skip
        self._node_set(
            f"{name}-datanode",
            args,
            _Role("hdfs-datanode", ["hdfs", "datanode"], args.datanodes, DATANODE_PORTS,
                  args.datanode_storage,
                  {"tcp_socket": {"port": DATANODE_PORTS["data"]}, "period_seconds": 10}),
            site,
            account.metadata["name"],
            depends_on=[namenode],
        )  # fmt: skip
        # Trainers read (metadata from the namenode, blocks from datanodes); datanodes
        # register with the namenode and copy blocks among themselves (replication
        # pipeline, block recovery over IPC). The web UIs (9870, 9864) are for people
        # (kubectl port-forward), the client's upload writes through a port-forward too.
        rpc, data, ipc = NAMENODE_RPC_PORT, DATANODE_PORTS["data"], DATANODE_PORTS["ipc"]
        clients = ["trainer", "hdfs-datanode"]
        for policy, component, port, peers in (
            ("allow-hdfs-namenode", "hdfs-namenode", rpc, clients),
            ("allow-hdfs-datanode", "hdfs-datanode", data, clients),
            ("allow-hdfs-datanode-ipc", "hdfs-datanode", ipc, ["hdfs-datanode"]),
        ):
            allow_ingress(
                target, f"{name}-{policy.removeprefix('allow-hdfs-')}-ingress", component,
                [port], peers, self, policy_name=policy,
            )  # fmt: skip
        allow_egress(
            target,
            f"{name}-datanode-egress",
            "hdfs-datanode",
            [Route("hdfs-namenode", (rpc,)), Route("hdfs-datanode", (data, ipc))],
            self,
        )

    def _node_set(
        self,
        resource_name: str,
        args: HdfsArgs,
        role: _Role,
        env: list[k8s.core.v1.EnvVarArgsDict],
        service_account: pulumi.Input[str],
        depends_on: list[pulumi.Resource] | None = None,
    ) -> k8s.apps.v1.StatefulSet:
        """A headless Service and a StatefulSet of one HDFS role, each pod with its volume."""
        target, component, ports = args.target, role.component, role.ports
        service = kube.service(
            target, f"{resource_name}-service", component, component, ports, self, headless=True
        )
        node = kube.container(
            target,
            component.removeprefix("hdfs-"),
            args.image,
            role.command,
            env=env,
            ports=ports,
            cpu=args.cpu,
            mem=args.mem,
            readiness=role.readiness,
            mounts=[{"name": "data", "mount_path": "/data"}],
            # The image writes its *-site.xml files at start.
            read_only_root=False,
        )
        return k8s.apps.v1.StatefulSet(
            resource_name,
            metadata=target.metadata(component, component),
            spec={
                "service_name": component,
                "replicas": role.replicas,
                "selector": {"match_labels": kube.labels(component)},
                "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
                "template": kube.pod_template(component, [node], service_account=service_account),
                "volume_claim_templates": [kube.volume_claim("data", role.storage)],
            },
            opts=target.opts(self, depends_on=[service, *(depends_on or [])]),
        )


def client_routes(
    mode: Literal["in-cluster", "external"], address: str = "", datanode_port: int = 0
) -> tuple[Route, ...]:
    """The egress of an HDFS client: the namenode's RPC port and the datanodes' data port,
    as pods of the stack (in-cluster), or outside it (external: the namenode's address, an
    IP block when it is an IP; datanodes anywhere, on `datanode_port`)."""
    if mode == "in-cluster":
        return (
            Route("hdfs-namenode", (NAMENODE_RPC_PORT,)),
            Route("hdfs-datanode", (DATANODE_PORTS["data"],)),
        )
    return (url_route(address), Route(ANYWHERE, (datanode_port or DATANODE_PORTS["data"],)))
