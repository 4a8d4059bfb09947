"""Address ranges, ports and paths of the local cluster, decided once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

# Pods and Services live in these ranges, on this machine only: pods in network namespaces
# on the cni0 bridge, Services as kube-proxy's iptables rules. A guard rule drops anything
# forwarded from the pod range to an address outside them (host.py), and the bridge does no
# masquerading, so no pod traffic leaves the machine.
POD_CIDR = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"  # what the controller-manager allocates node CIDRs from
SERVICE_CIDR = "10.96.0.0/24"
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
BRIDGE = "cni0"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"

# Host ports of the node's daemons (health and metrics on loopback only).
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
PROXY_HEALTHZ_PORT = 10256
PROXY_METRICS_PORT = 10249
COREDNS_HEALTH_PORT = 18080
COREDNS_READY_PORT = 18181
KUBE_ROUTER_HEALTH_PORT = 20244

# One cluster per machine: host-wide paths, sysctls and iptables would collide.
LOCK_FILE = Path("/run/lock/elasticctr-cluster.lock")

CACHE = Path(os.environ.get("ELASTICCTR_CACHE") or Path.home() / ".cache" / "elasticctr")
DEFAULT_DIR = CACHE / "cluster"


@dataclass(frozen=True)
class Layout:
    """Where everything of one cluster lives. `dir` is removed by `down`; the containerd
    root (the image store) is kept in the cache, so images are imported once."""

    dir: Path
    containerd_root: Path

    @classmethod
    def at(cls, directory: Path, containerd_root: Path | None = None) -> Layout:
        directory = directory.resolve()
        return cls(directory, containerd_root or CACHE / "containerd")

    @property
    def state_file(self) -> Path:
        return self.dir / "cluster.json"

    @property
    def controlplane(self) -> Path:
        return self.dir / "controlplane"

    @property
    def pki(self) -> Path:
        return self.controlplane / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.controlplane / "admin.kubeconfig"

    @property
    def logs(self) -> Path:
        return self.dir / "logs"

    @property
    def containerd_state(self) -> Path:
        return self.dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def cni_conf_dir(self) -> Path:
        return self.dir / "cni" / "net.d"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    @property
    def volumes(self) -> Path:
        return self.dir / "volumes"

    @property
    def host_record(self) -> Path:
        return self.dir / "host-before.json"


def node_name() -> str:
    """The node's name: the host name, lower case (a Kubernetes node name must be)."""
    return socket.gethostname().lower()


def detect_node_ip() -> str:
    """The IPv4 address of the interface of the default route: the node's InternalIP.

    Only a route lookup: nothing is sent."""
    routes = json.loads(_ip("-4", "route", "show", "default"))
    if not routes:
        raise RuntimeError("no IPv4 default route: pass --node-ip ADDRESS")
    device = routes[0]["dev"]
    for link in json.loads(_ip("-4", "addr", "show", "dev", device)):
        for addr in link.get("addr_info", []):
            if addr.get("family") == "inet":
                return str(addr["local"])
    raise RuntimeError(f"no IPv4 address on {device}: pass --node-ip ADDRESS")


def _ip(*args: str) -> str:
    return subprocess.run(["ip", "-j", *args], check=True, capture_output=True, text=True).stdout
