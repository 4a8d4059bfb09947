"""HDFS for the training data: a namenode and datanodes in the cluster, or an external
namenode as the seeds' `-hd` option. Either way the component's `address` is the
hdfs://host:port the trainers read from.

In the cluster, the interface with the image is Hadoop's own, not one image's start-up
script: the component renders core-site.xml, hdfs-site.xml and log4j.properties into a
ConfigMap mounted read-only at HADOOP_CONF_DIR, and runs explicit commands (`hdfs
namenode`, after `hdfs namenode -format -nonInteractive` when the name directory holds no
`current/` yet; `hdfs datanode`). Logs go to stderr, scratch to /tmp, the root file system
is read-only. apache/hadoop:3.4.1 serves this interface (the commands replace its
entrypoint, so its env-to-XML starter does not run), and so does the Hadoop stand-in built
from Maven jars (tools/standins/hadoop/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from xml.sax.saxutils import escape

import pulumi
import pulumi_kubernetes as k8s
from elasticctr_common.contract import HDFS_DATANODES

from components import kube
from components.kube import KubeTarget
from components.network import ANYWHERE, Route, allow_egress, allow_ingress, url_route

NAMENODE_RPC_PORT = 8020
NAMENODE_HTTP_PORT = 9870
DATANODE_PORTS = {"data": 9866, "http": 9864, "ipc": 9867}
DATA_MOUNT = "/data"
# Both on the role's volume; the namenode is formatted only while NAMENODE_DIR has no
# current/ (what `-format` creates), so a restart never wipes the namespace.
NAMENODE_DIR = f"{DATA_MOUNT}/namenode"
DATANODE_DIR = f"{DATA_MOUNT}/datanode"
CONF_DIR = "/etc/hadoop-conf"
LOG_DIR = "/tmp/hadoop-logs"
CONFIG_MAP = "hdfs-conf"
SERVICE_ACCOUNT = "hdfs"
# apache/hadoop's own `hadoop` user: Hadoop's login looks the process's user up in
# /etc/passwd and refuses a uid the image does not list (docs/architecture.md).
IMAGE_USER = 1000

NAMENODE_COMMAND = [
    "/bin/sh",
    "-c",
    f'if [ ! -d "{NAMENODE_DIR}/current" ]; then hdfs namenode -format -nonInteractive; fi\n'
    "exec hdfs namenode",
]
DATANODE_COMMAND = ["hdfs", "datanode"]

LOG4J = """\
# Everything to stderr, the container's log (HADOOP_ROOT_LOGGER may override).
hadoop.root.logger=INFO,console
log4j.rootLogger=${hadoop.root.logger}
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
hadoop.security.logger=INFO,NullAppender
log4j.appender.NullAppender=org.apache.log4j.varia.NullAppender
"""


def site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop *-site.xml file holding `properties`."""
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', "<configuration>"]
    for name, value in properties.items():
        lines.append(
            f"  <property><name>{escape(name)}</name><value>{escape(value)}</value></property>"
        )
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"


def hadoop_conf(replication: int) -> dict[str, str]:
    """The files of HADOOP_CONF_DIR, by name."""
    core = {
        "fs.defaultFS": f"hdfs://hdfs-namenode:{NAMENODE_RPC_PORT}",
        # Hadoop's scratch (default /tmp/hadoop-${user.name}) on the /tmp volume.
        "hadoop.tmp.dir": "/tmp/hadoop",
    }
    hdfs = {
        "dfs.replication": str(replication),
        "dfs.namenode.name.dir": f"file://{NAMENODE_DIR}",
        "dfs.datanode.data.dir": f"file://{DATANODE_DIR}",
        "dfs.namenode.rpc-bind-host": "0.0.0.0",
        "dfs.namenode.http-bind-host": "0.0.0.0",
        # Pod IPs do not reverse-resolve to the names datanodes register with.
        "dfs.namenode.datanode.registration.ip-hostname-check": "false",
        # Only pods of this namespace reach HDFS (NetworkPolicy); the seeds' UGI is a user
        # name, not an identity HDFS could check without Kerberos.
        "dfs.permissions.enabled": "false",
    }
    return {
        "core-site.xml": site_xml(core),
        "hdfs-site.xml": site_xml(hdfs),
        "log4j.properties": LOG4J,
    }


@dataclass(frozen=True)
class _Role:
    """One HDFS role (namenode or datanode) as a StatefulSet."""

    component: str
    command: list[str]
    replicas: int
    ports: dict[str, int]
    storage: str
    readiness: k8s.core.v1.ProbeArgsDict
    # A port the role opens as it starts, before it has loaded or registered anything: the
    # namenode's HTTP server starts before it reads its image and edits.
    live_port: int


@dataclass(frozen=True)
class HdfsArgs:
    """The hdfs section's settings (their defaults are the config's, infra/config.py)."""

    target: KubeTarget
    mode: Literal["in-cluster", "external"]
    datanodes: int
    replication: int
    namenode_storage: str
    datanode_storage: str
    cpu: float  # per namenode or datanode pod
    mem: float
    clients: tuple[str, ...]  # components that read or write (trainer, joiner)
    address: str  # external mode: hdfs://host:port
    image: str = ""  # in-cluster mode


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
        conf = hadoop_conf(args.replication)
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-conf",
            metadata=target.metadata(CONFIG_MAP, "hdfs"),
            data=conf,
            opts=target.opts(self),
        )
        account = kube.service_account(target, SERVICE_ACCOUNT, "hdfs", self)
        namenode_ports = {"rpc": NAMENODE_RPC_PORT, "http": NAMENODE_HTTP_PORT}
        roles = (
            _Role("hdfs-namenode", NAMENODE_COMMAND, 1, namenode_ports, args.namenode_storage,
                  kube.http_probe("/", NAMENODE_HTTP_PORT), NAMENODE_HTTP_PORT),
            _Role(HDFS_DATANODES, DATANODE_COMMAND, args.datanodes, DATANODE_PORTS,
                  args.datanode_storage,
                  {"tcp_socket": {"port": DATANODE_PORTS["data"]}, "period_seconds": 10},
                  DATANODE_PORTS["data"]),
        )  # fmt: skip
        namenode = self._node_set(
            f"{name}-namenode", args, roles[0], config_map, conf, account.metadata["name"]
        )
        self._node_set(
            f"{name}-datanode",
            args,
            roles[1],
            config_map,
            conf,
            account.metadata["name"],
            depends_on=[namenode],
        )
        # Trainers read (metadata from the namenode, blocks from datanodes), the joiner
        # writes its partitions; datanodes register with the namenode and copy blocks among
        # themselves (replication pipeline, block recovery over IPC). The web UIs (9870,
        # 9864) are for people (kubectl port-forward); the client's upload from outside the
        # cluster writes through a datanode pod (kubectl exec), as a datanode.
        rpc, data, ipc = NAMENODE_RPC_PORT, DATANODE_PORTS["data"], DATANODE_PORTS["ipc"]
        clients = [*args.clients, "hdfs-datanode"]
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
        config_map: k8s.core.v1.ConfigMap,
        conf: Mapping[str, str],
        service_account: pulumi.Input[str],
        depends_on: list[pulumi.Resource] | None = None,
    ) -> k8s.apps.v1.StatefulSet:
        """A headless Service and a StatefulSet of one HDFS role, each pod with its volume."""
        target, component, ports = args.target, role.component, role.ports
        service = kube.service(
            target, f"{resource_name}-service", component, component, ports, self, headless=True
        )
        live: k8s.core.v1.ProbeArgsDict = {"tcp_socket": {"port": role.live_port}}
        node = kube.container(
            target,
            component.removeprefix("hdfs-"),
            args.image,
            role.command,
            env=kube.env({"HADOOP_CONF_DIR": CONF_DIR, "HADOOP_LOG_DIR": LOG_DIR}),
            ports=ports,
            cpu=args.cpu,
            mem=args.mem,
            readiness=role.readiness,
            liveness=kube.liveness(live),
            # A first start formats the namenode; a JVM starts slowly on a busy node.
            startup=kube.startup(live),
            mounts=[
                {"name": "data", "mount_path": DATA_MOUNT},
                {"name": "hadoop-conf", "mount_path": CONF_DIR, "read_only": True},
            ],
            user=IMAGE_USER,
        )
        conf_volume: k8s.core.v1.VolumeArgsDict = {
            "name": "hadoop-conf",
            "config_map": {"name": config_map.metadata["name"]},
        }
        return k8s.apps.v1.StatefulSet(
            resource_name,
            metadata=target.metadata(component, component),
            spec={
                "service_name": component,
                "replicas": role.replicas,
                "selector": {"match_labels": kube.labels(component)},
                "persistent_volume_claim_retention_policy": kube.RETAIN_VOLUMES,
                "template": kube.pod_template(
                    component,
                    [node],
                    [conf_volume],
                    service_account=service_account,
                    # a changed configuration restarts the pods that read it
                    annotations={"elasticctr.io/config-sha256": kube.digest(conf)},
                    user=IMAGE_USER,
                ),
                "volume_claim_templates": [kube.volume_claim("data", role.storage)],
            },
            opts=target.opts(self, depends_on=[service, config_map, *(depends_on or [])]),
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
