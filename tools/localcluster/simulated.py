"""A simulated cluster at production sizes: the real control plane (etcd, kube-apiserver,
controller-manager, kube-scheduler), the real Volcano scheduler and controllers with the
pinned chart's scheduler configuration, and kwok (sigs.k8s.io/kwok) keeping fake nodes
alive and taking their pods to Running and Ready without containers.

Nodes are shaped like a prod stack's node pools: CPU, memory, pod count, the pool label
the stack's `node_pool` selects by, a zone, taints. Everything runs as host processes on
loopback, stopped by PID (tools/localcluster/controlplane.py).

    with SimulatedCluster([NodePool("training", 34, "16", "64Gi")], zones=3) as sim:
        sim.kubeconfig

    python -m tools.localcluster.simulated up --dir D --pool training:34:16:64Gi ...
    python -m tools.localcluster.simulated down --dir D

bench/sim_scale.py applies the prod stacks to it (docs/simulated-cluster.md).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elasticctr_common.ports import free_ports

from components.kube import POOL_LABEL
from tools.imagekit import gomodule
from tools.localcluster import addons, provisioner
from tools.localcluster.controlplane import (
    Cert,
    ControlPlane,
    ControlPlaneError,
    find_binaries,
    stop_detached,
    tool_path_dirs,
)
from tools.localcluster.crds import apply_crds, operator_crd_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# kwok manages the nodes carrying this annotation, and only those.
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_VALUE = "fake"
VOLCANO_BINARIES = ("vc-scheduler", "vc-controller-manager")
KWOK_MODULE = ("sigs.k8s.io/kwok", "v0.8.0")  # tools/build-tools.sh builds the same version
# kwok's own stages (its module's kustomize/stage): nodes Ready with a status heartbeat,
# pods Ready as soon as bound and gone when deleted. Not its pod-complete stage: that one
# finishes every pod a `Job` owns, and a Volcano Job's trainers must go on running.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat/node-heartbeat.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
# In Volcano's chart: its CRDs, and its jobflow subchart's (the controllers watch both).
CRD_DIRS = (Path("crd/bases"), Path("charts/jobflow/crd/bases"))
SCHEDULER_CONF = Path("config/volcano-scheduler.conf")  # in Volcano's chart


@dataclass(frozen=True)
class NodePool:
    """`nodes` nodes of one shape, labelled with the pool name the stack selects by."""

    name: str
    nodes: int
    cpu: str  # allocatable, a Kubernetes quantity
    memory: str
    pods: int = 110
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)

    @classmethod
    def parse(cls, text: str) -> NodePool:
        """NAME:NODES:CPU:MEMORY, as the CLI takes it."""
        parts = text.split(":")
        if len(parts) != 4 or not parts[1].isdigit() or int(parts[1]) < 1:
            raise ValueError(
                f"--pool must be NAME:NODES:CPU:MEMORY with NODES >= 1, e.g. "
                f"training:34:16:64Gi, got {text!r}"
            )
        return cls(parts[0], int(parts[1]), parts[2], parts[3])


def zone_name(index: int) -> str:
    return f"zone-{chr(ord('a') + index)}"


def node_manifests(pools: Sequence[NodePool], zones: int) -> list[dict[str, Any]]:
    """The Node objects: each pool's nodes spread round-robin over `zones` zones (none
    when 0)."""
    nodes = []
    for pool in pools:
        for i in range(pool.nodes):
            name = f"{pool.name}-{i:03d}"
            labels = {
                HOSTNAME_LABEL: name,
                POOL_LABEL: pool.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            }
            if zones:
                labels[ZONE_LABEL] = zone_name(i % zones)
            capacity = {"cpu": pool.cpu, "memory": pool.memory, "pods": str(pool.pods)}
            nodes.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {
                        "name": name,
                        "labels": labels,
                        "annotations": {
                            KWOK_ANNOTATION: KWOK_VALUE,
                            "node.alpha.kubernetes.io/ttl": "0",
                        },
                    },
                    "spec": {
                        "taints": [{"key": k, "value": v, "effect": e} for k, v, e in pool.taints]
                    },
                    "status": {"allocatable": capacity, "capacity": capacity},
                }
            )
    return nodes


def volcano_chart_dir() -> Path:
    """The pinned Volcano chart that tools/build-tools.sh keeps beside its binaries."""
    build_tools = REPO_ROOT / "tools" / "build-tools.sh"
    out = subprocess.run(
        ["bash", str(build_tools), "--print-volcano-chart"], capture_output=True, text=True
    )
    if out.returncode != 0 or not out.stdout.strip():
        raise ControlPlaneError("Volcano is not built: run `bash tools/build-tools.sh volcano`")
    return Path(out.stdout.strip())


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class SimulatedCluster:
    """The control plane, Volcano and kwok, with the nodes of `pools` in `zones` zones."""

    def __init__(
        self,
        pools: Sequence[NodePool],
        zones: int = 3,
        workdir: Path | str | None = None,
        detach: bool = False,
    ) -> None:
        if zones < 0:
            raise ValueError(f"zones must be >= 0, got {zones}")
        self.pools = list(pools)
        self.zones = zones
        self.cp = ControlPlane(
            workdir=workdir,
            controllers="required",
            keep_workdir=detach,
            detach=detach,
            extra_certs={provisioner.CERT: Cert(f"/CN={addons.PROVISIONER_USER}")},
        )

    def __enter__(self) -> SimulatedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def kubeconfig(self) -> Path:
        assert self.cp.kubeconfig is not None, "start() first"
        return self.cp.kubeconfig

    def start(self) -> SimulatedCluster:
        needed = (*VOLCANO_BINARIES, "kwok")
        found = find_binaries(needed)
        missing = [n for n in needed if n not in found]
        if missing:
            raise ControlPlaneError(
                f"not found on PATH nor in {':'.join(tool_path_dirs())}: {', '.join(missing)} "
                f"(build them with `bash tools/build-tools.sh volcano kwok`)"
            )
        chart = volcano_chart_dir()
        self.cp.start()
        try:
            # Volcano's, and the Prometheus Operator's: a prod stack may make its objects
            # (monitoring.operator), as on a cluster running kube-prometheus-stack.
            apply_crds(self.cp, [*(chart / d for d in CRD_DIRS), operator_crd_dir()])
            self._start_volcano(found, chart)
            self._start_kwok(found["kwok"])
            self._start_provisioner()
            for node in node_manifests(self.pools, self.zones):
                status, body = self.cp.request("POST", "/api/v1/nodes", node)
                if status != 201:
                    raise ControlPlaneError(
                        f"node {node['metadata']['name']}: HTTP {status}: {body}"
                    )
            self.wait_nodes_ready()
        except BaseException:
            self.cp.stop()
            raise
        return self

    def _start_volcano(self, found: dict[str, str], chart: Path) -> None:
        assert self.cp.dir is not None
        kubeconfig = str(self.cp.kubeconfig)
        scheduler_health, controller_health, metrics = free_ports(3)
        self.cp.launch(
            "vc-controller-manager",
            found["vc-controller-manager"],
            [
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--enable-healthz",
                f"--healthz-address=127.0.0.1:{controller_health}",
            ],
            lambda: _port_open(controller_health),
        )
        self.cp.launch(
            "vc-scheduler",
            found["vc-scheduler"],
            [
                f"--kubeconfig={kubeconfig}",
                f"--scheduler-conf={chart / SCHEDULER_CONF}",
                "--leader-elect=false",
                "--enable-healthz",
                f"--healthz-address=127.0.0.1:{scheduler_health}",
                f"--listen-address=127.0.0.1:{metrics}",
                # Host-path volumes, as Rancher's local-path: no CSI node to count them on.
                f"--ignored-provisioners={addons.PROVISIONER}",
            ],
            lambda: _port_open(scheduler_health),
        )

    def _start_kwok(self, exe: str) -> None:
        assert self.cp.dir is not None
        # Its stages, never a user's ~/.kwok/kwok.yaml.
        module = gomodule.module_dir(*KWOK_MODULE)
        config = self.cp.dir / "kwok.yaml"
        config.write_text("---\n".join((module / stage).read_text() for stage in KWOK_STAGES))
        (port,) = free_ports(1)
        self.cp.launch(
            "kwok",
            exe,
            [
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_VALUE}",
                f"--server-address=127.0.0.1:{port}",
                "--cidr=10.244.0.0/16",
                "--node-ip=127.0.0.1",
            ],
            lambda: _port_open(port),
        )

    def _start_provisioner(self) -> None:
        """The local cluster's volume provisioner: a claim gets a PersistentVolume at once
        (a directory under the workdir that nothing ever writes to)."""
        assert self.cp.dir is not None and self.cp.server is not None
        for obj in addons.storage_objects():
            addons.apply(self.cp, obj)
        log = self.cp.dir / "logs" / "provisioner.log"
        self.cp.launch(
            "provisioner",
            sys.executable,
            [
                "-m",
                "tools.localcluster.provisioner",
                f"--server={self.cp.server}",
                f"--pki={self.cp.dir / 'pki'}",
                f"--volumes={self.cp.dir / 'volumes'}",
                "--interval=0.5",
            ],
            lambda: log.exists() and "watching" in log.read_text(),
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )

    def wait_nodes_ready(self, timeout: float = 120.0) -> None:
        names = {n["metadata"]["name"] for n in node_manifests(self.pools, self.zones)}
        deadline = time.monotonic() + timeout
        while True:
            _, body = self.cp.request("GET", "/api/v1/nodes")
            ready = {
                n["metadata"]["name"]
                for n in body.get("items", [])
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (n.get("status") or {}).get("conditions") or []
                )
            }
            if names <= ready:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{len(names - ready)} of {len(names)} kwok nodes not Ready after "
                    f"{timeout:.0f}s (log: {self.cp.dir}/logs/kwok.log)"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        self.cp.stop()


# ---- CLI ---------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A simulated cluster (kwok nodes)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start; print the admin kubeconfig path")
    up.add_argument("--dir", required=True, help="state dir (created; must be empty)")
    up.add_argument(
        "--pool",
        action="append",
        required=True,
        type=NodePool.parse,
        metavar="NAME:NODES:CPU:MEMORY",
        help="a node pool (repeatable)",
    )
    up.add_argument("--zones", type=int, default=3, help="zones the nodes spread over")
    down = sub.add_parser("down", help="stop what `up` started in --dir and remove it")
    down.add_argument("--dir", required=True)
    args = parser.parse_args(argv)
    if args.command == "up":
        try:
            sim = SimulatedCluster(args.pool, args.zones, workdir=args.dir, detach=True).start()
        except ControlPlaneError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(sim.kubeconfig)
        return 0
    try:
        stop_detached(Path(args.dir))
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
