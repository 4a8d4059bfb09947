"""The node's daemons: their configuration files and command lines.

containerd (with runc and the CNI bridge), kubelet and kube-proxy, CoreDNS and kube-router's
NetworkPolicy controller run as host processes; every file they read is written here, under
the cluster's directory. The settings that made them work on this kind of machine (cgroup
v1, a VM without CAP_SYS_RESOURCE, images that cannot be pulled) are explained where set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tools.localcluster.settings import (
    BRIDGE,
    CLUSTER_DOMAIN,
    COREDNS_HEALTH_PORT,
    COREDNS_READY_PORT,
    DNS_SERVICE_IP,
    KUBE_ROUTER_HEALTH_PORT,
    KUBELET_HEALTHZ_PORT,
    KUBELET_PORT,
    PAUSE_IMAGE,
    POD_CIDR,
    PROXY_HEALTHZ_PORT,
    PROXY_METRICS_PORT,
    SERVICE_CIDR,
    Layout,
)

CNI_BIN_DIR = "/usr/lib/cni"  # Debian's containernetworking-plugins


@dataclass(frozen=True)
class Daemon:
    """One host process of the node: its name, command line and log file."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # added to the caller's environment


def containerd(layout: Layout) -> Daemon:
    state = layout.containerd_state
    config = state / "config.toml"
    # runc's state and the CRI's own files stay under the cluster's directory; only the
    # image store (root) is kept across clusters, in the cache.
    config.write_text(
        f"""version = 2
root = "{layout.containerd_root}"
state = "{state / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{layout.containerd_socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{state / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  # Nothing can be pulled here: the sandbox image is a local build (tools/standins/pause).
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM drops CAP_SYS_RESOURCE: without this every container fails with runc's
  # "can't get final child's PID from pipe: EOF" (oom_score_adj: permission denied).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{state / "runc"}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{layout.cni_conf_dir}"
"""
    )
    return Daemon("containerd", ["containerd", "--config", str(config)])


def cni_config(layout: Layout) -> None:
    """One bridge network; no masquerading, so pod traffic never takes the host's address."""
    layout.cni_conf_dir.mkdir(parents=True, exist_ok=True)
    conflist = {
        "cniVersion": "1.0.0",
        "name": "elasticctr",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_CIDR}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(layout.dir / "cni" / "ipam"),
                },
            }
        ],
    }
    (layout.cni_conf_dir / "10-elasticctr.conflist").write_text(json.dumps(conflist, indent=2))


def kubelet(layout: Layout, kubelet_bin: str, node_ip: str, node_name: str) -> Daemon:
    config_dir = layout.dir / "kubelet-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    # Pods with dnsPolicy Default get the cluster's DNS too, never the host's resolver.
    resolv = config_dir / "resolv.conf"
    resolv.write_text(f"nameserver {node_ip}\n")
    config = {
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "address": node_ip,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "tlsCertFile": str(layout.pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(layout.pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(layout.pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "clusterDNS": [DNS_SERVICE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(resolv),
        # cgroup v1 here: kubelet 1.36 refuses it unless told, and runs it with cgroupfs.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        # A 2-core node: pods request small CPU shares so that the whole environment fits,
        # and CPU limits are not enforced by CFS quota, so a pod may use idle cores (memory
        # limits are). See docs/local-cluster.md.
        "cpuCFSQuota": False,
        # Images cannot be pulled again: never garbage-collect or evict them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "volumePluginDir": str(layout.dir / "kubelet-plugins"),
        "podLogsDir": str(layout.dir / "pod-logs"),
        "serializeImagePulls": False,
        "staticPodPath": "",
        "protectKernelDefaults": False,
        "enforceNodeAllocatable": ["pods"],
        "shutdownGracePeriod": "0s",
    }
    config_file = config_dir / "config.json"
    config_file.write_text(json.dumps(config, indent=2))
    return Daemon(
        "kubelet",
        [
            kubelet_bin,
            f"--config={config_file}",
            f"--kubeconfig={layout.controlplane / 'kubelet.kubeconfig'}",
            f"--root-dir={layout.kubelet_root}",
            f"--node-ip={node_ip}",
            f"--hostname-override={node_name}",
            "--v=1",
        ],
    )


def kube_proxy(layout: Layout, proxy_bin: str, node_name: str) -> Daemon:
    config = {
        "kind": "KubeProxyConfiguration",
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "clientConnection": {"kubeconfig": str(layout.controlplane / "kube-proxy.kubeconfig")},
        "mode": "iptables",
        "clusterCIDR": POD_CIDR,
        "hostnameOverride": node_name,
        "healthzBindAddress": f"127.0.0.1:{PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{PROXY_METRICS_PORT}",
        # Leave the host's conntrack table settings alone (0 = do not change them).
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        # No NodePorts on 127.0.0.1: that would need route_localnet=1.
        "iptables": {"localhostNodePorts": False},
    }
    config_file = layout.dir / "kube-proxy.json"
    config_file.write_text(json.dumps(config, indent=2))
    return Daemon("kube-proxy", [proxy_bin, f"--config={config_file}"])


def coredns(layout: Layout, coredns_bin: str, node_ip: str) -> Daemon:
    """Cluster DNS as a host process on the node's address (the kube-dns Service points at
    it). It answers for the cluster domain only: nothing is forwarded off the machine."""
    corefile = layout.dir / "Corefile"
    corefile.write_text(
        f""".:53 {{
    bind {node_ip}
    errors
    health 127.0.0.1:{COREDNS_HEALTH_PORT}
    ready 127.0.0.1:{COREDNS_READY_PORT}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {layout.controlplane / "coredns.kubeconfig"}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loadbalance
}}
"""
    )
    return Daemon("coredns", [coredns_bin, "-conf", str(corefile)])


def kube_router(layout: Layout, router_bin: str, node_name: str) -> Daemon:
    """kube-router as the NetworkPolicy enforcer only (no routing, proxy or CNI)."""
    return Daemon(
        "kube-router",
        [
            router_bin,
            f"--kubeconfig={layout.controlplane / 'kube-router.kubeconfig'}",
            f"--hostname-override={node_name}",
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--enable-cni=false",
            "--enable-ipv6=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--health-port={KUBE_ROUTER_HEALTH_PORT}",
            "--metrics-port=0",
            "--iptables-sync-period=30s",
        ],
    )


def logs_dir(layout: Layout) -> Path:
    layout.logs.mkdir(parents=True, exist_ok=True)
    return layout.logs
