"""The local cluster's life: `up` (idempotent), `down` (restores the host), `status`.

Order matters both ways. Up: record the host, control plane, cluster objects, host settings,
containerd, images, kubelet (node Ready), kube-proxy, CoreDNS, kube-router, provisioner.
Down: stop the controllers (nothing recreates pods), delete every pod with a short grace
period (a Python PID 1 ignores SIGTERM unless it handles it), stop the node's processes,
containerd and what is left of its shims, the control plane with etcd last, then restore
the host. Every process is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tools.localcluster import addons, controlplane, host, node, provisioner
from tools.localcluster.api import Api
from tools.localcluster.settings import (
    CLUSTER_CIDR,
    COREDNS_READY_PORT,
    KUBE_ROUTER_HEALTH_PORT,
    KUBELET_HEALTHZ_PORT,
    LOCK_FILE,
    PROXY_HEALTHZ_PORT,
    SERVICE_CIDR,
    Layout,
    detect_node_ip,
    node_name,
)

REPO = Path(__file__).resolve().parents[2]
# Built by tools/build-tools.sh (found on PATH or in its bin dirs).
BUILT = ("kubelet", "kube-proxy", "coredns", "kube-router")
# From Debian packages (tools/setup.sh installs them).
SYSTEM = {
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "runc": "runc",
    "iptables": "iptables",
    "conntrack": "conntrack",
    "ipset": "ipset",
    "ip": "iproute2",
}
# Node processes in start order; stopped in reverse.
NODE_ORDER = ("containerd", "kubelet", "kube-proxy", "coredns", "kube-router", "provisioner")


class ClusterError(RuntimeError):
    """The cluster could not be brought up or down; the message says what and where."""


@dataclass
class Process:
    name: str
    pid: int
    exe: str
    log: str


@dataclass
class State:
    node_ip: str
    node_name: str
    server: str
    kubeconfig: str
    processes: list[Process] = field(default_factory=list)
    started: float = 0.0

    def save(self, path: Path) -> None:
        data = {**self.__dict__, "processes": [p.__dict__ for p in self.processes]}
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> State:
        data = json.loads(path.read_text())
        data["processes"] = [Process(**p) for p in data["processes"]]
        return cls(**data)


def binaries() -> dict[str, str]:
    """Every executable the node needs; ClusterError names the missing ones and their source."""
    found = controlplane.find_binaries((*controlplane.REQUIRED, *controlplane.OPTIONAL, *BUILT))
    missing = [
        n for n in (*controlplane.REQUIRED, *controlplane.OPTIONAL, *BUILT) if n not in found
    ]
    problems = []
    if missing:
        problems.append(f"{', '.join(missing)} (build with `tools/build-tools.sh`)")
    for name, package in SYSTEM.items():
        path = shutil.which(name)
        if path is None:
            problems.append(f"{name} (apt-get install {package}; tools/setup.sh does)")
        else:
            found[name] = path
    if problems:
        raise ClusterError("missing: " + "; ".join(problems))
    return found


class LocalCluster:
    def __init__(self, layout: Layout, node_ip: str | None = None) -> None:
        self.layout = layout
        self._node_ip = node_ip
        self._lock: IO[str] | None = None

    # ---- up -------------------------------------------------------------------------
    def up(
        self,
        load_images: Callable[[Path], None] | None = None,
        timeout: float = 180.0,
        say: Callable[[str], None] = print,
    ) -> State:
        """Start the cluster (or find it running); `load_images(containerd_socket)` runs
        once containerd answers, before the kubelet starts (on a running cluster: now, so
        that changed workload code reaches the node; pods already running keep theirs)."""
        if os.geteuid() != 0:
            raise ClusterError("the local cluster needs root (containerd, iptables, mounts)")
        bins = binaries()
        if not self._take_lock():
            running = self.status()
            if running.get("healthy"):
                say(f"already up: {self.layout.kubeconfig}")
                if load_images is not None:
                    load_images(self.layout.containerd_socket)
                return State.load(self.layout.state_file)
            raise ClusterError(
                f"another cluster holds {LOCK_FILE} ({LOCK_FILE.read_text().strip()}); "
                "one cluster per machine: `tools/cluster.py down` it first"
            )
        assert self._lock is not None
        # The owner is named before anything else: a `down` of another directory meanwhile
        # must see that this one holds the machine, not a lock with a stale or empty name.
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"{self.layout.dir} pid {os.getpid()}\n")
        self._lock.flush()
        if self.layout.state_file.exists() or self.layout.host_record.exists():
            say("cleaning up an earlier cluster in the same directory")
            self._down(say)
        start = time.monotonic()
        self.layout.dir.mkdir(parents=True, exist_ok=True)
        host.HostRecord.take().save(self.layout.host_record)
        node_ip = self._node_ip or detect_node_ip()
        name = node_name()
        try:
            state = self._start(bins, node_ip, name, load_images, timeout, say)
        except BaseException:
            say("start failed: tearing down what started")
            self._down(say)
            raise
        say(f"up in {time.monotonic() - start:.0f}s: KUBECONFIG={state.kubeconfig}")
        return state

    def _start(
        self,
        bins: dict[str, str],
        node_ip: str,
        name: str,
        load_images: Callable[[Path], None] | None,
        timeout: float,
        say: Callable[[str], None],
    ) -> State:
        layout = self.layout
        cert = controlplane.Cert
        cp = controlplane.ControlPlane(
            workdir=layout.controlplane,
            controllers="required",
            start_timeout=timeout,
            keep_workdir=True,
            detach=True,
            binaries={n: bins[n] for n in (*controlplane.REQUIRED, *controlplane.OPTIONAL)},
            address=node_ip,
            service_cidr=SERVICE_CIDR,
            node_name=name,
            cluster_cidr=CLUSTER_CIDR,
            extra_certs={
                "kubelet": cert(f"/O=system:nodes/CN=system:node:{name}"),
                "kubelet-serving": cert(
                    f"/CN=system:node:{name}", "serverAuth", (f"IP:{node_ip}", f"DNS:{name}")
                ),
                "kube-proxy": cert("/CN=system:kube-proxy"),
                "coredns": cert(f"/CN={addons.COREDNS_USER}"),
                "kube-router": cert(f"/CN={addons.KUBE_ROUTER_USER}"),
                provisioner.CERT: cert(f"/CN={addons.PROVISIONER_USER}"),
            },
        )
        say(f"control plane on {node_ip}")
        cp.start()
        assert cp.server is not None and cp.kubeconfig is not None
        state = State(node_ip, name, cp.server, str(cp.kubeconfig), started=time.time())
        state.save(layout.state_file)
        api = self.api(state)
        for obj in addons.objects(node_ip):
            addons.apply(api, obj)

        host.prepare(node_ip)
        node.cni_config(layout)
        layout.containerd_state.mkdir(parents=True, exist_ok=True)
        layout.containerd_root.mkdir(parents=True, exist_ok=True)
        self._launch(state, node.containerd(layout), bins)
        self._wait("containerd", timeout, state, self._containerd_ready)
        if load_images is not None:
            say("loading images into containerd")
            load_images(layout.containerd_socket)

        self._launch(state, node.kubelet(layout, bins["kubelet"], node_ip, name), bins)
        self._wait("kubelet", timeout, state, lambda: _healthz(KUBELET_HEALTHZ_PORT))
        self._wait("kubelet", timeout, state, lambda: self._node_ready(api, name))
        say(f"node {name} Ready")
        self._launch(state, node.kube_proxy(layout, bins["kube-proxy"], name), bins)
        self._wait("kube-proxy", timeout, state, lambda: _healthz(PROXY_HEALTHZ_PORT))
        self._launch(state, node.coredns(layout, bins["coredns"], node_ip), bins)
        self._wait("coredns", timeout, state, lambda: _healthz(COREDNS_READY_PORT, "/ready"))
        self._launch(state, node.kube_router(layout, bins["kube-router"], name), bins)
        self._wait("kube-router", timeout, state, lambda: _healthz(KUBE_ROUTER_HEALTH_PORT))
        assert self._lock is not None
        volumes = node.Daemon(
            "provisioner",
            [
                sys.executable,
                "-m",
                "tools.localcluster.provisioner",
                f"--server={state.server}",
                f"--pki={layout.pki}",
                f"--volumes={layout.volumes}",
            ],
            env={"PYTHONPATH": str(REPO)},
        )
        # The provisioner lives as long as the cluster: it holds the one-cluster lock.
        self._launch(state, volumes, bins, pass_fds=(self._lock.fileno(),))
        self._wait("provisioner", timeout, state, self._provisioner_watching)
        return state

    def _provisioner_watching(self) -> bool:
        return "watching" in (self.layout.logs / "provisioner.log").read_text()

    def _launch(
        self,
        state: State,
        daemon: node.Daemon,
        bins: dict[str, str],
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        log = node.logs_dir(self.layout) / f"{daemon.name}.log"
        # The node's daemons find runc, the CNI plugins and iptables on this PATH.
        dirs = dict.fromkeys(str(Path(p).parent) for p in bins.values())
        path = os.pathsep.join([*dirs, os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")])
        # An absolute argv[0]: stopping by PID checks the process still runs this executable.
        exe = shutil.which(daemon.argv[0], path=path) or daemon.argv[0]
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [exe, *daemon.argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.layout.dir,
                env={**os.environ, **daemon.env, "PATH": path},
                start_new_session=True,
                pass_fds=pass_fds,
            )
        state.processes.append(Process(daemon.name, proc.pid, exe, str(log)))
        state.save(self.layout.state_file)

    def _wait(self, name: str, timeout: float, state: State, ready: Callable[[], bool]) -> None:
        proc = next(p for p in reversed(state.processes) if p.name == name)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not controlplane.pid_alive(proc.pid):
                raise ClusterError(
                    f"{name} exited; {proc.log}:\n{controlplane.log_tail(Path(proc.log))}"
                )
            try:
                if ready():
                    return
            except (OSError, ValueError, RuntimeError) as e:
                last = str(e)
            time.sleep(0.5)
        raise ClusterError(
            f"{name} not ready after {timeout:.0f}s ({last}); "
            f"{proc.log}:\n{controlplane.log_tail(Path(proc.log))}"
        )

    def _containerd_ready(self) -> bool:
        out = subprocess.run(
            ["ctr", "--address", str(self.layout.containerd_socket), "version"],
            capture_output=True,
            timeout=10,
        )
        return out.returncode == 0

    @staticmethod
    def _node_ready(api: Api, name: str) -> bool:
        status, body = api.request("GET", f"/api/v1/nodes/{name}")
        conditions = body.get("status", {}).get("conditions", []) if status == 200 else []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def api(self, state: State) -> Api:
        return Api(state.server, self.layout.pki, "admin")

    # ---- down -----------------------------------------------------------------------
    def down(self, say: Callable[[str], None] = print) -> list[str]:
        """Stop everything and restore the host; returns what could not be restored."""
        if os.geteuid() != 0:
            raise ClusterError("the local cluster needs root (containerd, iptables, mounts)")
        if not self._take_lock():
            # Held by this cluster's provisioner (or another cluster's): ours is stopped
            # below; another one's is not ours to stop, and neither is an unnamed holder's
            # (restoring the host under a running cluster takes its network away).
            owner = LOCK_FILE.read_text().split(" ")[0] if LOCK_FILE.exists() else ""
            if not owner or Path(owner) != self.layout.dir:
                raise ClusterError(
                    f"the running cluster is {owner or 'unnamed'} (it holds {LOCK_FILE}), "
                    f"not {self.layout.dir}: it is not this `down`'s to stop"
                )
        return self._down(say)

    def _down(self, say: Callable[[str], None]) -> list[str]:
        problems: list[str] = []
        layout = self.layout
        state = State.load(layout.state_file) if layout.state_file.exists() else None
        cp_file = layout.controlplane / controlplane.STATE_FILE
        cp_procs = json.loads(cp_file.read_text())["processes"] if cp_file.exists() else []
        marker = str(layout.dir)

        def stop(records: list[dict[str, Any]]) -> None:
            left = controlplane.terminate_pids(
                [{"pid": r["pid"], "exe": r["exe"], "marker": marker} for r in records]
            )
            problems.extend(f"pid {pid} still alive" for pid in left)

        # 1. Nothing may recreate or reschedule pods while they are deleted.
        stop([p for p in cp_procs if p["name"] in ("kube-controller-manager", "kube-scheduler")])
        # 2. Every pod deleted through the API, so the kubelet tears down its containers,
        #    volumes and network namespace.
        if state is not None and _alive(state, "kubelet"):
            self._delete_pods(state, say, problems)
        # 3. The node's processes, newest first, then containerd's shims.
        if state is not None:
            node_procs = [p.__dict__ for p in reversed(state.processes)]
            stop([p for p in node_procs if p["name"] != "containerd"])
            stop([p for p in node_procs if p["name"] == "containerd"])
        self._stop_shims(problems)
        # 4. The control plane, etcd last.
        stop([p for p in reversed(cp_procs) if p["name"] not in ("etcd",)])
        stop([p for p in cp_procs if p["name"] == "etcd"])
        # 5. The host as it was.
        if layout.host_record.exists():
            host.unmount_node_mounts(problems, extra_roots=(str(layout.dir),))
            host.restore(host.HostRecord.load(layout.host_record), problems)
        if layout.dir.exists():
            shutil.rmtree(layout.dir, ignore_errors=True)
        for problem in problems:
            say(f"warning: {problem}")
        return problems

    def _delete_pods(self, state: State, say: Callable[[str], None], problems: list[str]) -> None:
        api = self.api(state)
        deadline = time.monotonic() + 90
        grace = 2
        while True:
            try:
                pods = api.get("/api/v1/pods")["items"]
            except (OSError, RuntimeError) as e:
                problems.append(f"could not list pods: {e}")
                return
            if not pods:
                return
            if time.monotonic() > deadline:
                problems.append(f"{len(pods)} pods not deleted in time")
                return
            say(f"deleting {len(pods)} pods")
            for pod in pods:
                meta = pod["metadata"]
                api.request(
                    "DELETE",
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace},
                )
            time.sleep(3)
            grace = 0 if time.monotonic() > deadline - 30 else grace

    def _stop_shims(self, problems: list[str]) -> None:
        """containerd's runc shims outlive it; they are ours when they carry our socket."""
        socket = str(self.layout.containerd_socket).encode()
        records = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if argv and argv[0].endswith(b"containerd-shim-runc-v2") and socket in argv:
                    records.append(
                        {"pid": int(proc.name), "exe": argv[0].decode(), "marker": socket.decode()}
                    )
        left = controlplane.terminate_pids(records, timeout=5)
        problems.extend(f"shim pid {pid} still alive" for pid in left)

    # ---- status and the lock --------------------------------------------------------
    def status(self) -> dict[str, Any]:
        if not self.layout.state_file.exists():
            return {"up": False, "healthy": False}
        state = State.load(self.layout.state_file)
        cp_file = self.layout.controlplane / controlplane.STATE_FILE
        cp_procs = json.loads(cp_file.read_text())["processes"] if cp_file.exists() else []
        processes = {p["name"]: controlplane.pid_alive(p["pid"]) for p in cp_procs}
        processes |= {p.name: controlplane.pid_alive(p.pid) for p in state.processes}
        ready = False
        with contextlib.suppress(OSError, RuntimeError, ValueError):
            ready = self._node_ready(self.api(state), state.node_name)
        expected = {*NODE_ORDER, *controlplane.REQUIRED, *controlplane.OPTIONAL}
        healthy = ready and all(processes.get(n) for n in expected)
        return {
            "up": True,
            "healthy": healthy,
            "node": state.node_name,
            "node_ip": state.node_ip,
            "node_ready": ready,
            "kubeconfig": state.kubeconfig,
            "processes": processes,
        }

    def _take_lock(self) -> bool:
        """The machine's one-cluster lock, without waiting; False if another holds it."""
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        lock = open(LOCK_FILE, "a+")  # noqa: SIM115 (kept open: held for the cluster's life)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return False
        self._lock = lock
        return True


def _alive(state: State, name: str) -> bool:
    return any(p.name == name and controlplane.pid_alive(p.pid) for p in state.processes)


def _healthz(port: int, path: str = "/healthz") -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
        return bool(r.status == 200)
