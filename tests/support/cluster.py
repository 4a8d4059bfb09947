"""The local one-node cluster in tests (tools/localcluster, docs/local-cluster.md).

`ClusterSession.start()` records the host as an outside observer sees it (every sysctl,
the four iptables backends, nft tables, ipsets, links, mounts, paths), brings the cluster
up with every image of the local stack loaded, and `stop()` takes it down; `host_changes()`
then lists what differs from before. The `kube` helpers read the cluster through the
official Python client and run commands in containers, as `kubectl exec` does.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.prerequisites import unavailable
from tools.localcluster import host
from tools.localcluster.cluster import BUILT, LocalCluster, State
from tools.localcluster.settings import BRIDGE, POD_CIDR, SERVICE_CIDR, Layout

ROOT = Path(__file__).resolve().parents[2]
# The local stack's deployment in the cluster tests: a user's network module (a fixture
# written as a user would) at this path of the project, and a held-out set at EVAL_PATH of
# its HDFS (tests/lifecycle uploads it).
USER_NETWORK_FIXTURE = "tests/images/trainer/nets/cross_v2.py"
USER_NETWORK = "nets/cross_v2.py"
EVAL_PATH = "/heldout"

# Kernel values that move on their own (counters, randomness, per-boot state).
VOLATILE_SYSCTLS = re.compile(
    r"^(kernel\.random\.|kernel\.ns_last_pid|kernel\.pty\.nr|fs\.(dentry|file|inode)-|"
    r"fs\.quota\.|net\.netfilter\.nf_conntrack_count|kernel\.sched_|vm\.stat|"
    r"kernel\.perf_event|fs\.aio-nr|kernel\.tainted|net\.ipv4\.route\.|net\.ipv6\.route\.)"
)
# Values the kernel generates by itself the first time anything needs them, whoever that
# is: on a freshly booted machine they still read as zeros, and any program of the session
# (not only the cluster) may make the kernel set them; none is the node's to put back.
#   tcp_fastopen_key: made on first use of TCP Fast Open (reads 00000000-... until then);
#   netdev_rss_key: made once when a driver first asks for a receive-side-scaling key.
KERNEL_GENERATED_SYSCTLS = frozenset({"net.ipv4.tcp_fastopen_key", "net.core.netdev_rss_key"})
# Per-interface keys of links that come and go (veths of pods, the bridge) are checked
# through the links themselves.
LINK_SYSCTLS = re.compile(
    r"^net\.(ipv4\.conf|ipv6\.conf|ipv4\.neigh|ipv6\.neigh)\.(?!all\.|default\.|lo\.)"
)
DAEMONS = (*BUILT, "containerd", "containerd-shim-runc-v2", "kube-apiserver", "etcd")


@dataclass
class HostView:
    """What an observer sees of the host (not what tools/localcluster/host.py records)."""

    sysctls: dict[str, str]
    iptables: dict[str, str]
    nft_tables: list[str]
    ipsets: list[str]
    links: list[str]
    mounts: list[str]
    paths: dict[str, bool]
    # Daemons already running (another control plane of this machine's user, say) are not
    # the cluster's to stop: only those it started count as left.
    daemons: list[str]

    @classmethod
    def take(cls) -> HostView:
        return cls(
            sysctls=all_sysctls(),
            iptables={b: _rules(b) for b in host.IPTABLES if shutil.which(f"{b}-save")},
            nft_tables=host.nft_tables(),
            ipsets=host.ipsets(),
            links=sorted(os.listdir("/sys/class/net")),
            mounts=sorted(
                line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            ),
            paths={p: Path(p).exists() for p in host.PATHS},
            daemons=_daemons_running(),
        )


def all_sysctls() -> dict[str, str]:
    out = subprocess.run(["sysctl", "-a"], capture_output=True, text=True, check=False).stdout
    values = {}
    for line in out.splitlines():
        key, _, value = line.partition(" = ")
        if not VOLATILE_SYSCTLS.match(key) and not LINK_SYSCTLS.match(key):
            values[key] = value
    return values


def sysctl_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Sysctls that differ, one line each. The node's own (tools/localcluster/host.py's
    SYSCTLS, which `down` writes back) must all read as before; any other key too, so that a
    sysctl the node writes but forgot to record is caught, except the kernel-generated ones."""
    found = []
    for key in sorted(set(before) | set(after)):
        if before.get(key) == after.get(key):
            continue
        if key in KERNEL_GENERATED_SYSCTLS and key not in host.SYSCTLS:
            continue
        found.append(f"sysctl {key}: {before.get(key)} -> {after.get(key)}")
    return found


def _rules(backend: str) -> str:
    """Chains and rules of a backend, without counters; empty tables left out (a legacy
    table stays loaded as a kernel module once used: only its content counts)."""
    out = subprocess.run([f"{backend}-save"], capture_output=True, text=True, check=False).stdout
    tables: dict[str, list[str]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("*"):
            current = line[1:]
            tables[current] = []
        elif line.startswith(":"):
            name, policy = line[1:].split()[:2]
            if policy != "ACCEPT":  # user chains ("-"), and builtin chains with another policy
                tables[current].append(f":{name} {policy}")
        elif line.startswith("-"):
            tables[current].append(line)
    return "\n".join(f"*{t}\n" + "\n".join(rules) for t, rules in sorted(tables.items()) if rules)


def differences(before: HostView, after: HostView) -> list[str]:
    """What changed on the host, one line each."""
    found = sysctl_changes(before.sysctls, after.sysctls)
    for backend in sorted(set(before.iptables) | set(after.iptables)):
        if before.iptables.get(backend) != after.iptables.get(backend):
            found.append(
                f"{backend} rules differ:\n--- before\n{before.iptables.get(backend)}\n"
                f"--- after\n{after.iptables.get(backend)}"
            )
    for name in ("nft_tables", "ipsets", "links", "mounts"):
        was, now = set(getattr(before, name)), set(getattr(after, name))
        if was != now:
            found.append(f"{name}: added {sorted(now - was)}, removed {sorted(was - now)}")
    for path, existed in before.paths.items():
        if after.paths.get(path) != existed:
            found.append(f"path {path}: existed {existed}, now {after.paths.get(path)}")
    found += [f"process left: {p}" for p in after.daemons if p not in before.daemons]
    for cidr in (POD_CIDR, SERVICE_CIDR):
        entries = subprocess.run(
            ["conntrack", "-L", "-d", cidr], capture_output=True, text=True, check=False
        ).stdout.strip()
        if entries:
            found.append(f"conntrack entries for {cidr}:\n{entries}")
    return found


def _daemons_running() -> list[str]:
    """Daemons of the kinds the cluster runs, except another test session's: tools/test.sh
    runs the other tests beside this session, and their control planes (etcd,
    kube-apiserver) descend from that session's pytest. What a teardown leaves (a detached
    daemon, a shim, a container's process) descends from no other pytest."""
    running = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError):
            exe = os.path.basename(os.readlink(proc / "exe"))
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if exe in DAEMONS and state != "Z" and not _of_another_session(int(proc.name)):
                running.append(f"{exe} (pid {proc.name})")
    return running


def _of_another_session(pid: int) -> bool:
    ours = os.getpid()
    while pid > 1:
        if pid == ours:
            return False
        stat = (Path("/proc") / str(pid) / "stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent
        if (
            pid > 1
            and pid != ours
            and b"pytest" in (Path("/proc") / str(pid) / "cmdline").read_bytes()
        ):
            return True
    return False


@dataclass
class ClusterSession:
    layout: Layout
    load_images: Callable[[Path], None] | None
    before: HostView | None = None
    state: State | None = None
    timings: dict[str, float] = field(default_factory=dict)
    stopped: bool = False
    down_problems: list[str] = field(default_factory=list)

    @classmethod
    def for_tests(cls) -> ClusterSession:
        # Its own directory: a developer's cluster (the default one) is never the test's,
        # and the one-cluster lock makes the tests fail clearly while one runs.
        from tools.localcluster.settings import CACHE

        return cls(Layout.at(CACHE / "cluster-test"), load_local_images)

    @property
    def kubeconfig(self) -> Path:
        assert self.state is not None
        return Path(self.state.kubeconfig)

    def start(self) -> ClusterSession:
        # A cluster of an earlier run cut short (its host record still here) is torn down
        # first: the host is compared with what it was before any cluster, not with its
        # leftovers (which `up` would restore anyway, and the comparison would then fail).
        if self.layout.host_record.exists() or self.layout.state_file.exists():
            self.down_problems = LocalCluster(self.layout).down(say=_log)
            assert not self.down_problems, f"an earlier cluster's leftovers: {self.down_problems}"
        self.before = HostView.take()
        started = time.monotonic()
        self.state = LocalCluster(self.layout).up(self.load_images, say=_log)
        self.timings["cluster up (s)"] = round(time.monotonic() - started, 1)
        return self

    def stop(self) -> list[str]:
        """Down (once); what down could not undo."""
        if not self.stopped:
            started = time.monotonic()
            self.down_problems = LocalCluster(self.layout).down(say=_log)
            self.timings["cluster down (s)"] = round(time.monotonic() - started, 1)
            self.stopped = True
        return self.down_problems

    def host_changes(self) -> list[str]:
        assert self.before is not None
        return differences(self.before, HostView.take())


def _log(message: str) -> None:
    print(f"[cluster] {message}", flush=True)


# ---- the Kubernetes API, as a user's client sees it ----------------------------------
def client(kubeconfig: Path) -> Any:
    """An ApiClient of the official Python client for `kubeconfig`."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def exec_in(api: Any, namespace: str, pod: str, container: str, argv: list[str]) -> tuple[int, str]:
    """Run `argv` in a container (as `kubectl exec`); (exit code, stdout + stderr)."""
    from kubernetes import client as k8s
    from kubernetes.stream import stream

    response = stream(
        k8s.CoreV1Api(api).connect_get_namespaced_pod_exec,
        pod,
        namespace,
        container=container,
        command=argv,
        stderr=True,
        stdout=True,
        stdin=False,
        tty=False,
        _preload_content=False,
    )
    response.run_forever(timeout=120)
    output = response.read_stdout() + response.read_stderr()
    code = response.returncode
    response.close()
    return (code if code is not None else -1), output


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 1.0,
    explain: Callable[[], Any] | None = None,
) -> Any:
    """`check()` until it returns something true; AssertionError naming `what` otherwise,
    with what `explain()` says then (the state that may tell why)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    why = f"; {explain()!r}" if explain is not None else ""
    raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {last!r}){why}")


def unschedulable(api: Any, namespace: str) -> list[str]:
    """'<pod>: <the scheduler's reason>' for each pod of `namespace` that no node can take
    (a Volcano gang's members as well as a plain pod)."""
    found = []
    for pod in pods(api, namespace):
        for condition in pod.status.conditions or []:
            if (condition.type, condition.status) == ("PodScheduled", "False"):
                found.append(f"{pod.metadata.name}: {condition.message or condition.reason}")
    return found


def link_exists(name: str = BRIDGE) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def pods(api: Any, namespace: str, selector: str = "") -> list[Any]:
    from kubernetes import client as k8s

    return list(k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items)


def iter_containers(api: Any, namespace: str) -> Iterator[tuple[Any, Any]]:
    """(pod, container spec) of every running pod of the namespace."""
    for pod in pods(api, namespace):
        if pod.status.phase == "Running":
            for container in pod.spec.containers:
                yield pod, container


# ---- availability, the test session's cluster and stack ------------------------------
def unavailable_reason() -> str | None:
    """Why the local cluster cannot run here (None: it can)."""
    from tools.localcluster.cluster import ClusterError, binaries

    if os.geteuid() != 0:
        return "the local cluster needs root (containerd, iptables, mounts)"
    try:
        binaries()
    except ClusterError as why:
        return f"the local cluster's parts are {why}"
    if shutil.which("buildah") is None:
        return "buildah is missing (tools/setup.sh installs it): images cannot be built"
    return None


def load_local_images(socket: Path) -> None:
    """Build (or take from the cache) and import every image the local stack names."""
    subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            str(ROOT / "tools" / "images.py"),
            "import",
            "--stack",
            "local",
            "--address",
            str(socket),
        ],
        check=True,
    )


@dataclass
class LocalStack:
    """The local stack deployed by the real Pulumi CLI on the test session's cluster."""

    project: Any  # tests.support.pulumi_cli.Project
    cluster: ClusterSession
    timings: dict[str, float] = field(default_factory=dict)
    destroyed: bool = False

    NAMESPACE = "elasticctr"

    @classmethod
    def up(cls, cluster: ClusterSession, work: Path) -> LocalStack:
        from tests.support import pulumi_cli

        path = pulumi_cli.search_path()
        missing = pulumi_cli.skip_reason(path)
        if missing:
            unavailable(missing)
        project = pulumi_cli.Project.create(work, "local", path, kubeconfig=cluster.kubeconfig)
        # As a team with its own network and held-out set runs it: the network a file of
        # the project, shipped in the training ConfigMap; a pair of slots crossed (formed
        # by the trainer's native pipe and by serving, never by the client); every version
        # evaluated on the held-out set (trainer 0's predictions beside it) and published,
        # better or not.
        module = project.dir / USER_NETWORK
        module.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / USER_NETWORK_FIXTURE, module)
        for key, value in {
            "training.model": "custom",
            "training.network_module": USER_NETWORK,
            "training.crosses[0][0]": "1",
            "training.crosses[0][1]": "2",
            "training.eval_path": EVAL_PATH,
            "training.publish_every_version": "true",
        }.items():
            project.config_set(key, value, path=True)
        stack = cls(project, cluster)
        started = time.monotonic()
        project.run("up", "--yes", "--skip-preview", timeout=1200)
        stack.timings["pulumi up --stack local, all Ready (s)"] = round(
            time.monotonic() - started, 1
        )
        return stack

    def outputs(self) -> dict[str, Any]:
        return dict(self.project.run("stack", "output", "--json").json())

    def api(self) -> Any:
        return client(self.cluster.kubeconfig)

    def destroy(self, check: bool = True) -> Any:
        if self.destroyed:
            return None
        started = time.monotonic()
        result = self.project.run("destroy", "--yes", "--skip-preview", timeout=900, check=check)
        self.timings["pulumi destroy (s)"] = round(time.monotonic() - started, 1)
        self.destroyed = result.returncode == 0
        return result
