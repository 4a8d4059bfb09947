"""What the node changes on the host: recorded before `up`, restored by `down`.

The kubelet sets kernel sysctls (panic, overcommit), pod networking needs IP forwarding
and bridged traffic through iptables, kube-proxy and kube-router add chains, rules and
ipsets (in both the nft and the legacy iptables backend), the CNI bridge plugin makes
`cni0`, the runtime mounts network namespaces and volumes, and the kubelet creates paths
and cgroups outside its root directory. `HostRecord.take()` notes how each of these was;
`restore()` puts it back.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.localcluster.settings import BRIDGE, POD_CIDR, SERVICE_CIDR

# Every sysctl a part of the node writes (kubelet: the first six; pod networking and
# kube-proxy: the rest; kube-proxy's conntrack settings are switched off in its config
# but recorded all the same).
SYSCTLS = (
    "kernel.panic",
    "kernel.panic_on_oops",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv4.conf.default.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.netfilter.nf_conntrack_tcp_be_liberal",
)
# What pod networking needs while the node runs.
NODE_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
}

# Host paths the node's parts create wherever their root directories are.
PATHS = (
    "/var/lib/kubelet",
    "/usr/libexec/kubernetes",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/var/lib/containerd",
    "/opt/containerd",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/run/netns",
    "/var/lib/kube-router",
    "/etc/kubernetes",
)
# Mount points under these belong to the node (network namespaces, pod volumes, rootfs).
MOUNT_ROOTS = ("/run/netns", "/run/containerd", "/var/lib/kubelet")

IPTABLES = ("iptables-nft", "ip6tables-nft", "iptables-legacy", "ip6tables-legacy")
# The nft tables iptables-nft and kube-proxy make; only these are removed when new.
NFT_TABLES = {"filter", "nat", "mangle", "raw", "security", "kube-proxy"}
GUARD_CHAIN = "ELASTICCTR-GUARD"


@dataclass
class HostRecord:
    sysctls: dict[str, str]
    iptables: dict[str, str]  # backend -> its `-save` output
    nft_tables: list[str]  # "family name"
    ipsets: list[str]
    paths: list[str]  # the PATHS that existed
    cgroups: list[str]  # kubepods cgroups that existed
    bridge_existed: bool

    @classmethod
    def take(cls) -> HostRecord:
        return cls(
            sysctls={key: value for key in SYSCTLS if (value := read_sysctl(key)) is not None},
            iptables={b: save for b in IPTABLES if (save := _iptables_save(b)) is not None},
            nft_tables=nft_tables(),
            ipsets=ipsets(),
            paths=[p for p in PATHS if Path(p).exists() or Path(p).is_symlink()],
            cgroups=kubepods_cgroups(),
            bridge_existed=Path(f"/sys/class/net/{BRIDGE}").exists(),
        )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> HostRecord:
        return cls(**json.loads(path.read_text()))


def prepare(node_ip: str) -> None:
    """Sysctls pod networking needs, and the guard that keeps pod traffic on the machine."""
    for key, value in NODE_SYSCTLS.items():
        write_sysctl(key, value)
    # In raw PREROUTING, before any NAT or policy chain could accept the packet: from the
    # pod range, only the pod range, the Service range and the node itself are reachable.
    _run("iptables", "-t", "raw", "-N", GUARD_CHAIN, check=False)
    _run("iptables", "-t", "raw", "-F", GUARD_CHAIN)
    for allowed in (POD_CIDR, SERVICE_CIDR, f"{node_ip}/32"):
        _run("iptables", "-t", "raw", "-A", GUARD_CHAIN, "-d", allowed, "-j", "RETURN")
    _run("iptables", "-t", "raw", "-A", GUARD_CHAIN, "-j", "DROP")
    jump = ["PREROUTING", "-s", POD_CIDR, "-j", GUARD_CHAIN]
    if _run("iptables", "-t", "raw", "-C", *jump, check=False).returncode != 0:
        _run("iptables", "-t", "raw", "-I", *jump[:1], "1", *jump[1:])


def restore(record: HostRecord, log: list[str]) -> None:
    """Put the host back as `record` found it; what could not be undone goes to `log`."""
    unmount_node_mounts(log)
    _remove_netns(log)
    if not record.bridge_existed and Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "delete", BRIDGE, check=False)
    _restore_iptables(record, log)
    for name in ipsets():
        if name not in record.ipsets:
            _run("ipset", "destroy", name, check=False)
    for cidr in (POD_CIDR, SERVICE_CIDR):
        for flag in ("-s", "-d"):
            _run("conntrack", "-D", flag, cidr, check=False)
    for key, value in record.sysctls.items():
        if read_sysctl(key) != value:
            write_sysctl(key, value)
    for cgroup in kubepods_cgroups():
        if cgroup not in record.cgroups:
            _remove_cgroup(Path(cgroup), log)
    for path in PATHS:
        if path not in record.paths and (Path(path).exists() or Path(path).is_symlink()):
            _remove_path(Path(path), log)


# ---- sysctls ---------------------------------------------------------------------------
def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_sysctl(key: str) -> str | None:
    try:
        return _sysctl_path(key).read_text().strip()
    except OSError:
        return None


def write_sysctl(key: str, value: str) -> None:
    _sysctl_path(key).write_text(value + "\n")


# ---- iptables, nft, ipset ----------------------------------------------------------------
def _iptables_save(backend: str) -> str | None:
    if shutil.which(f"{backend}-save") is None:
        return None
    out = _run(f"{backend}-save", check=False)
    return out.stdout if out.returncode == 0 else None


def _tables(save: str) -> set[str]:
    return {line[1:].strip() for line in save.splitlines() if line.startswith("*")}


def _restore_iptables(record: HostRecord, log: list[str]) -> None:
    for backend in IPTABLES:
        now = _iptables_save(backend)
        if now is None:
            continue
        before = record.iptables.get(backend, "")
        # Tables that had rules: back to exactly what they held.
        if _tables(before):
            result = _run(f"{backend}-restore", input=before, check=False)
            if result.returncode != 0:
                log.append(f"{backend}-restore failed: {result.stderr.strip()}")
        # Tables that appeared: emptied (legacy tables are kernel modules and stay loaded).
        for table in _tables(now) - _tables(before):
            _run(backend, "-t", table, "-F", check=False)
            _run(backend, "-t", table, "-X", check=False)
            for chain in _builtin_chains(now, table):
                _run(backend, "-t", table, "-P", chain, "ACCEPT", check=False)
    if shutil.which("nft"):
        for table in nft_tables():
            family, name = table.split(" ", 1)
            if table not in record.nft_tables and name in NFT_TABLES:
                _run("nft", "delete", "table", family, name, check=False)


def _builtin_chains(save: str, table: str) -> list[str]:
    chains, current = [], None
    for line in save.splitlines():
        if line.startswith("*"):
            current = line[1:].strip()
        elif current == table and line.startswith(":") and line.split()[1] != "-":
            chains.append(line[1:].split()[0])
    return chains


def nft_tables() -> list[str]:
    if shutil.which("nft") is None:
        return []
    out = _run("nft", "list", "tables", check=False).stdout
    return [line.removeprefix("table ").strip() for line in out.splitlines() if line.strip()]


def ipsets() -> list[str]:
    if shutil.which("ipset") is None:
        return []
    return _run("ipset", "list", "-n", check=False).stdout.split()


# ---- mounts, namespaces, paths, cgroups -----------------------------------------------
def mounts_under(roots: tuple[str, ...]) -> list[str]:
    """Mount points at or below `roots`, deepest first (the order to unmount them)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == root or point.startswith(root.rstrip("/") + "/") for root in roots):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_node_mounts(log: list[str], extra_roots: tuple[str, ...] = ()) -> None:
    for point in mounts_under(MOUNT_ROOTS + extra_roots):
        if _run("umount", point, check=False).returncode != 0:
            result = _run("umount", "-l", point, check=False)
            if result.returncode != 0:
                log.append(f"could not unmount {point}: {result.stderr.strip()}")


def _remove_netns(log: list[str]) -> None:
    netns = Path("/run/netns")
    if not netns.is_dir():
        return
    for entry in netns.iterdir():
        if entry.name.startswith("cni-"):
            with contextlib.suppress(OSError):
                entry.unlink()
            if entry.exists():
                log.append(f"network namespace {entry} left")


def kubepods_cgroups() -> list[str]:
    found = []
    for controller in Path("/sys/fs/cgroup").iterdir():
        for name in ("kubepods", "kubepods.slice"):
            if (controller / name).is_dir():
                found.append(str(controller / name))
    return sorted(found)


def _remove_cgroup(root: Path, log: list[str]) -> None:
    # A cgroup is removed with rmdir once it is empty: children first.
    for directory in sorted(
        (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
    ):
        with contextlib.suppress(OSError):
            directory.rmdir()
    try:
        root.rmdir()
    except OSError as e:
        log.append(f"cgroup {root} left: {e}")


def _remove_path(path: Path, log: list[str]) -> None:
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        else:
            shutil.rmtree(path)
    except OSError as e:
        log.append(f"could not remove {path}: {e}")


def _run(
    *argv: str, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, input=input)
