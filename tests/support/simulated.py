"""A prod stack's Kubernetes half on the simulated cluster (tools/localcluster/simulated.py),
and what to look at there: where pods landed, whether a gang started whole, how shards
fare through a drain or a lost node.

The cluster half (the cloud's Kubernetes, node pools, bucket, registry) is the part that
cannot run here: it stays under mocks (tests/infra). The stack's own settings (pools,
resources, replicas, budgets, spread, queue) are kept; where it reaches the cluster and
the bucket become the simulated cluster's and an in-cluster MinIO.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from components.cube import SHARD_LABEL
from components.kube import COMPONENT_LABEL
from infra import capacity
from tests.support.pulumi_cli import Project, search_path, temp_dir
from tests.support.pulumi_harness import stack_config
from tools.localcluster.controlplane import ControlPlane
from tools.localcluster.simulated import ZONE_LABEL, NodePool, SimulatedCluster, zone_name

NAMESPACE = "elasticctr"
VOLCANO_JOB_LABEL = "volcano.sh/job-name"


@dataclass(frozen=True)
class Sizes:
    trainers: int
    pservers: int
    cube_shards: int
    cube_replicas: int = 2


PRODUCTION = Sizes(trainers=100, pservers=20, cube_shards=64, cube_replicas=2)

# (vCPUs, GiB) of the instance types the prod stack files name, from the clouds' catalogues.
INSTANCE_SHAPES = {
    "bcc.g5.c16m64": (16, 64),
    "m6i.4xlarge": (16, 64),
    "c7.4xlarge.2": (16, 32),
    "c7.2xlarge.4": (8, 32),
}


def allocatable(vcpus: int, gib: int) -> tuple[str, str]:
    """What a node of that size offers pods: the managed clusters' usual reservation for
    the kubelet and the system (GKE's published rule, which EKS's and CCE's come close to):
    CPU 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above; memory 25% of
    the first 4 GiB, 20% of the next 4, 10% of the next 8, 6% of the next 112, plus 100 MiB
    for eviction."""
    cpu_reserved = 0.06 + 0.01 * min(max(vcpus - 1, 0), 1) + 0.005 * min(max(vcpus - 2, 0), 2)
    cpu_reserved += 0.0025 * max(vcpus - 4, 0)
    bands = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06))
    left, mem_reserved = float(gib), 0.0
    for size, share in bands:
        mem_reserved += min(left, size) * share
        left -= min(left, size)
    cpu_milli = int((vcpus - cpu_reserved) * 1000)
    mem_mib = int((gib - mem_reserved) * 1024) - 100
    return f"{cpu_milli}m", f"{mem_mib}Mi"


def stack_pools(prod: str) -> list[NodePool]:
    """The node pools of stacks/Pulumi.<prod>.yaml at their desired size, shaped as their
    instance types."""
    config = stack_config(prod)
    cloud = config["elasticctr:cloud"]
    pools = []
    for pool in config["elasticctr:cluster"][cloud]["node_pools"]:
        cpu, memory = allocatable(*INSTANCE_SHAPES[pool["instance_type"]])
        pools.append(NodePool(pool["name"], int(pool["desired_nodes"]), cpu, memory))
    return pools


def stack_sizes(prod: str) -> Sizes:
    """The sizes stacks/Pulumi.<prod>.yaml sets."""
    config = stack_config(prod)
    return Sizes(
        int(config["elasticctr:trainers"]),
        int(config["elasticctr:pservers"]),
        int(config["elasticctr:cube_shards"]),
        int((config.get("elasticctr:cube") or {}).get("replicas", 1)),
    )


def simulated_config(prod: str, kubeconfig: Path, sizes: Sizes) -> dict[str, Any]:
    """stacks/Pulumi.<prod>.yaml's config at `sizes`, reaching the simulated cluster."""
    config = stack_config(prod)
    for key in ("cloud", "cluster", "storage", "images"):
        config.pop(f"elasticctr:{key}", None)
    cube = dict(config.get("elasticctr:cube") or {})
    cube["replicas"] = sizes.cube_replicas
    config.update(
        {
            "elasticctr:cloud": "existing",
            # kwok's pods become Ready, but the Job's pods never finish: judge rollouts
            # here, not in the engine.
            "elasticctr:cluster": {"kubeconfig": str(kubeconfig), "skip_await": True},
            "elasticctr:volcano": {"managed": True},  # its CRDs come with the cluster
            "elasticctr:images": {"registry": "docker.io/elasticctr", "build": False},
            "elasticctr:storage": {"mode": "minio", "size": "10Gi"},
            "elasticctr:namespace": NAMESPACE,
            "elasticctr:trainers": str(sizes.trainers),
            "elasticctr:pservers": str(sizes.pservers),
            "elasticctr:cube_shards": str(sizes.cube_shards),
            "elasticctr:cube": cube,
        }
    )
    data = dict(config.get("elasticctr:data") or {})
    if data.get("source") == "hdfs":
        # An HDFS that needs a user's password: its secret is not in the stack file.
        data["source"] = "storage"
        config["elasticctr:data"] = data
        config["elasticctr:hdfs"] = {"mode": "none"}
    return config


# ---- what the cluster shows --------------------------------------------------
def _listing(cp: ControlPlane, path: str) -> tuple[list[dict[str, Any]], str]:
    """The collection's items and its resourceVersion (where a watch of it starts)."""
    status, body = cp.request("GET", path)
    if status != 200:
        raise AssertionError(f"GET {path}: HTTP {status}: {body.get('message')}")
    items: list[dict[str, Any]] = body.get("items", [])
    version: str = body["metadata"]["resourceVersion"]
    return items, version


def _items(cp: ControlPlane, path: str) -> list[dict[str, Any]]:
    return _listing(cp, path)[0]


def pods(cp: ControlPlane, selector: str = "", namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    query = f"?labelSelector={selector}" if selector else ""
    return _items(cp, f"/api/v1/namespaces/{namespace}/pods{query}")


def nodes(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in _items(cp, "/api/v1/nodes")}


def ready(pod: dict[str, Any]) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def shard_replicas(cp: ControlPlane) -> dict[int, list[dict[str, Any]]]:
    """Shard -> its cube pods (any layout)."""
    shards: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for pod in pods(cp, f"{COMPONENT_LABEL}=cube"):
        shards[int(pod["metadata"]["labels"][SHARD_LABEL])].append(pod)
    return dict(shards)


def live_nodes(cp: ControlPlane) -> set[str]:
    """The nodes that exist and are Ready: a pod elsewhere serves nothing, whatever its
    own status still says (a lost node's pods stay until the pod GC removes them)."""
    return {name for name, node in nodes(cp).items() if node_ready(node)}


def node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def serving(pod: dict[str, Any], live: set[str]) -> bool:
    return ready(pod) and pod["spec"].get("nodeName") in live


def ready_per_shard(cp: ControlPlane, shards: int) -> list[int]:
    return count_ready(pods(cp, f"{COMPONENT_LABEL}=cube"), live_nodes(cp), shards)


def count_ready(cube_pods: Iterable[dict[str, Any]], live: set[str], shards: int) -> list[int]:
    """Per shard 0..shards-1, its cube pods serving on a live node."""
    counts = [0] * shards
    for pod in cube_pods:
        shard = int(pod["metadata"]["labels"][SHARD_LABEL])
        if shard < shards and serving(pod, live):
            counts[shard] += 1
    return counts


def spread_problems(cp: ControlPlane, shards: int, replicas: int) -> list[str]:
    """Each shard: `replicas` ready pods on as many nodes, and on as many zones as the
    cluster has (up to `replicas`)."""
    zone_of = {name: n["metadata"]["labels"].get(ZONE_LABEL) for name, n in nodes(cp).items()}
    zones = len({z for z in zone_of.values() if z})
    live = live_nodes(cp)
    replicas_of = shard_replicas(cp)
    problems = []
    for shard in range(shards):
        placed = [p for p in replicas_of.get(shard, []) if serving(p, live)]
        hosts = [p["spec"].get("nodeName") for p in placed]
        if len(placed) != replicas:
            problems.append(f"shard {shard}: {len(placed)} ready replicas, want {replicas}")
        elif len(set(hosts)) != replicas:
            problems.append(f"shard {shard}: replicas share a node: {sorted(hosts)}")
        elif zones and len({zone_of[h] for h in hosts}) != min(replicas, zones):
            problems.append(f"shard {shard}: replicas share a zone: {[zone_of[h] for h in hosts]}")
    return problems


def training_pods(cp: ControlPlane) -> list[dict[str, Any]]:
    return pods(cp, VOLCANO_JOB_LABEL)


def wait_for(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.5) -> float:
    """Seconds until `check()` is true; AssertionError naming `what` after `timeout`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{what}: not after {timeout:.0f}s")
        time.sleep(interval)
    return time.monotonic() - started


def set_unschedulable(cp: ControlPlane, names: Iterable[str], unschedulable: bool) -> None:
    for name in names:
        status, body = cp.request(
            "PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": unschedulable}}
        )
        if status != 200:
            raise AssertionError(f"cordon {name}: HTTP {status}: {body.get('message')}")


def nodes_for_half_the_job(cp: ControlPlane, pool: NodePool) -> int:
    """How many of `pool`'s nodes hold about half of the training Job's pods, and never
    all of them."""
    (job,) = _items(cp, f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs")
    tasks = job["spec"]["tasks"]
    pods = sum(task["replicas"] for task in tasks)
    largest = [capacity.pod_requests(task["template"], 1) for task in tasks]
    cpu = max(r.cpu for r in largest)
    memory = max(r.memory for r in largest)
    per_node = int(
        min(capacity.quantity(pool.cpu) // cpu, capacity.quantity(pool.memory) // memory)
    )
    if per_node < 1:
        raise AssertionError(f"a training pod ({cpu} CPU, {memory} bytes) fits no {pool.name} node")
    return max(1, min((pods - 1) // per_node, -(-pods // per_node) // 2))


# ---- the scenario ------------------------------------------------------------
@dataclass
class Figures:
    stack: str
    nodes: int
    zones: int
    sizes: dict[str, int]
    resources: int = 0
    up_seconds: float = 0.0
    gang_waited: bool = False
    gang_started_seconds: float = 0.0
    spread_problems: int = -1
    drain_min_ready: int = -1
    drain_seconds: float = 0.0
    node_loss_min_ready: int = -1
    node_loss_recovered_seconds: float = 0.0
    zone_loss_min_ready: int = -1
    zone_loss_replicas: int = 0  # shard replicas on the lost zone's nodes
    zone_loss_recovered_seconds: float = 0.0
    rescale_up_seconds: float = 0.0
    rescale_converged_seconds: float = 0.0
    spread: list[str] = field(default_factory=list)  # spread_problems() after the gang
    # spread_problems() once the shards are full again after the zone loss
    spread_after_zone_loss: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        """What a production stack must never show here (empty: none of it)."""
        found = [f"placement: {p}" for p in self.spread]
        found += [f"placement after the zone loss: {p}" for p in self.spread_after_zone_loss]
        if not self.gang_waited:
            found.append("the training Job started in part while it did not fit whole")
        # -1: not run (the zone loss is optional); 0: a shard had no ready replica.
        for what, least in (
            ("drain", self.drain_min_ready),
            ("node loss", self.node_loss_min_ready),
            ("zone loss", self.zone_loss_min_ready),
        ):
            if least == 0:
                found.append(f"{what}: a shard had no ready replica")
        return found


class Sampler:
    """Calls `sample()` every `interval` seconds in a thread while the `with` block runs."""

    interval = 0.2

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Watch:
    """The fewest ready replicas any shard had while the `with` block ran, from every
    event of the cube pods and the nodes: a replica a controller replaces within a
    second still counts (polling the lists can miss it)."""

    window = 1  # seconds a watch request lasts; one more runs after the block ends

    def __init__(self, sim: SimulatedCluster, shards: int) -> None:
        self.cp, self.shards, self.least = sim.cp, shards, 10**6
        self._pods: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._failed: list[BaseException] = []

    def _observe(self) -> None:
        live = {name for name, node in self._nodes.items() if node_ready(node)}
        self.least = min(self.least, *count_ready(self._pods.values(), live, self.shards))

    def _list(self, path: str, into: dict[str, dict[str, Any]]) -> str:
        items, version = _listing(self.cp, path)
        into.clear()
        into.update({item["metadata"]["name"]: item for item in items})
        return version

    def _follow(self, path: str, into: dict[str, dict[str, Any]], since: str) -> None:
        try:
            last_round = False
            while not last_round:
                last_round = self._stop.is_set()  # one whole window after the block ends
                for event in self.cp.watch(path, since, self.window):
                    kind, item = event["type"], event["object"]
                    with self._lock:
                        if kind == "ERROR":  # the history is gone: start again from now
                            since = self._list(path, into)
                            self._observe()
                            continue
                        since = item["metadata"]["resourceVersion"]
                        if kind == "BOOKMARK":
                            continue
                        name = item["metadata"]["name"]
                        if kind == "DELETED":
                            into.pop(name, None)
                        else:
                            into[name] = item
                        self._observe()
        except BaseException as e:
            self._failed.append(e)

    def __enter__(self) -> Self:
        pods_path = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={COMPONENT_LABEL}=cube"
        with self._lock:
            for path, into in ((pods_path, self._pods), ("/api/v1/nodes", self._nodes)):
                since = self._list(path, into)
                thread = threading.Thread(
                    target=self._follow, args=(path, into, since), daemon=True
                )
                self._threads.append(thread)
            self._observe()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self._failed and exc[0] is None:
            raise AssertionError(f"watching the shards failed: {self._failed[0]!r}")


def log(message: str) -> None:
    print(f"[sim {time.strftime('%H:%M:%S')}] {message}", flush=True)


@contextmanager
def stack_on(sim: SimulatedCluster, prod: str, sizes: Sizes) -> Iterator[Project]:
    work = temp_dir("elasticctr-sim-")
    try:
        config = simulated_config(prod, sim.kubeconfig, sizes)
        yield Project.create(work, "sim", search_path(), kubeconfig=sim.kubeconfig, config=config)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def resize(project: Project, sizes: Sizes) -> None:
    for key in ("trainers", "pservers", "cube_shards"):
        project.config_set(key, str(getattr(sizes, key)))


def all_running(sim: SimulatedCluster, sizes: Sizes) -> Callable[[], bool]:
    want = sizes.trainers + sizes.pservers

    def check() -> bool:
        pods = training_pods(sim.cp)
        return sum(ready(p) for p in pods) >= want

    return check


def shards_full(sim: SimulatedCluster, sizes: Sizes) -> Callable[[], bool]:
    def check() -> bool:
        counts = ready_per_shard(sim.cp, sizes.cube_shards)
        return min(counts) >= sizes.cube_replicas

    return check


def kubectl(sim: SimulatedCluster, *args: str) -> None:
    subprocess.run(
        ["kubectl", f"--kubeconfig={sim.kubeconfig}", *args],
        check=True,
        capture_output=True,
        env={**os.environ, "PATH": search_path()},
        timeout=600,
    )


def serving_node_with_most_shards(sim: SimulatedCluster) -> str:
    counts: dict[str, int] = {}
    for replicas in shard_replicas(sim.cp).values():
        for pod in replicas:
            node = pod["spec"].get("nodeName")
            if node:
                counts[node] = counts.get(node, 0) + 1
    return max(counts, key=lambda n: counts[n])


def delete_nodes(sim: SimulatedCluster, names: list[str]) -> None:
    """As a cloud's node controller does when the machines are gone."""
    for name in names:
        sim.cp.request("DELETE", f"/api/v1/nodes/{name}")


@dataclass(frozen=True)
class Scenario:
    """A prod stack at `sizes` on nodes of the `training` and `serving` pools in `zones`
    zones, then `rescaled`; a node lost when `node_loss`, then a zone when `zone_loss`."""

    stack: str
    training: NodePool
    serving: NodePool
    zones: int
    sizes: Sizes
    rescaled: Sizes
    node_loss: bool = True
    zone_loss: bool = True
    timeout: float = 900.0  # seconds per wait


def run(scenario: Scenario) -> Figures:
    """Gang, placement, rescale, drain, node loss, zone loss: what happened, in figures."""
    training, sizes, rescaled = scenario.training, scenario.sizes, scenario.rescaled
    timeout, zones = scenario.timeout, scenario.zones
    pools = [training, scenario.serving]
    figures = Figures(scenario.stack, sum(p.nodes for p in pools), zones, asdict(sizes))
    with SimulatedCluster(pools, zones) as sim, stack_on(sim, scenario.stack, sizes) as stack:
        log(f"{figures.nodes} nodes in {zones} zones ready")
        # No room for the training Job at first, then room for about half of it: Volcano
        # must hold the whole Job back, then start it whole once there is room.
        training_nodes = [f"{training.name}-{i:03d}" for i in range(training.nodes)]
        set_unschedulable(sim.cp, training_nodes, True)
        result = stack.up()
        figures.up_seconds = result.seconds
        figures.resources = len(stack.export()["deployment"]["resources"])
        log(f"up: {figures.resources} resources in {result.seconds:.0f}s")
        half = nodes_for_half_the_job(sim.cp, training)
        set_unschedulable(sim.cp, training_nodes[:half], False)
        time.sleep(20)  # several Volcano scheduling cycles (1 s each)
        started = [p for p in training_pods(sim.cp) if p["spec"].get("nodeName")]
        figures.gang_waited = not started
        log(f"gang with room on {half} nodes: {len(started)} training pods placed (want 0)")
        set_unschedulable(sim.cp, training_nodes[half:], False)
        figures.gang_started_seconds = wait_for(
            "every training pod running", all_running(sim, sizes), timeout
        )
        wait_for("every shard replica ready", shards_full(sim, sizes), timeout)
        problems = spread_problems(sim.cp, sizes.cube_shards, sizes.cube_replicas)
        figures.spread_problems = len(problems)
        figures.spread = problems
        log(f"gang started in {figures.gang_started_seconds:.0f}s; spread problems: {problems}")

        resize(stack, rescaled)
        result = stack.up()
        figures.rescale_up_seconds = result.seconds
        figures.rescale_converged_seconds = wait_for(
            "rescaled stack converged",
            lambda: all_running(sim, rescaled)() and shards_full(sim, rescaled)(),
            timeout,
        )
        log(
            f"rescale: up {result.seconds:.0f}s, converged {figures.rescale_converged_seconds:.0f}s"
        )
        shards = rescaled.cube_shards

        node = serving_node_with_most_shards(sim)
        with Watch(sim, shards) as watch:
            started_at = time.monotonic()
            kubectl(sim, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
                    "--timeout=300s")  # fmt: skip
            figures.drain_seconds = time.monotonic() - started_at
            wait_for("shards full after the drain", shards_full(sim, rescaled), timeout)
        figures.drain_min_ready = watch.least
        kubectl(sim, "uncordon", node)
        log(f"drain {node}: {figures.drain_seconds:.0f}s, fewest ready replicas {watch.least}")

        if scenario.node_loss:
            node = serving_node_with_most_shards(sim)
            with Watch(sim, shards) as watch:
                delete_nodes(sim, [node])
                figures.node_loss_recovered_seconds = wait_for(
                    "shards full after a node loss", shards_full(sim, rescaled), timeout
                )
            figures.node_loss_min_ready = watch.least
            log(f"node {node} lost: full again in {figures.node_loss_recovered_seconds:.0f}s, "
                f"fewest ready replicas {watch.least}")  # fmt: skip

        if not scenario.zone_loss:
            return figures
        zone = [
            name
            for name, n in nodes(sim.cp).items()
            if n["metadata"]["labels"].get(ZONE_LABEL) == zone_name(0)
        ]
        figures.zone_loss_replicas = sum(
            p["spec"].get("nodeName") in zone
            for replicas in shard_replicas(sim.cp).values()
            for p in replicas
        )
        with Watch(sim, shards) as watch:
            delete_nodes(sim, zone)
            figures.zone_loss_recovered_seconds = wait_for(
                "shards full after a zone loss", shards_full(sim, rescaled), timeout
            )
        figures.zone_loss_min_ready = watch.least
        figures.spread_after_zone_loss = spread_problems(sim.cp, shards, rescaled.cube_replicas)
        recovered = figures.zone_loss_recovered_seconds
        log(f"zone-a ({len(zone)} nodes, {figures.zone_loss_replicas} shard replicas) lost: "
            f"full again in {recovered:.0f}s, "
            f"fewest ready replicas {watch.least}")  # fmt: skip
    return figures


def pending(cp: ControlPlane) -> dict[str, int]:
    """Component -> its pods no node took (after the scheduler had its say)."""
    left: dict[str, int] = defaultdict(int)
    for pod in pods(cp):
        if not pod["spec"].get("nodeName") and not pod["metadata"].get("deletionTimestamp"):
            labels = pod["metadata"].get("labels") or {}
            left[labels.get(COMPONENT_LABEL) or labels.get(VOLCANO_JOB_LABEL, "?")] += 1
    return dict(left)


def unplaced_on_own_pools(
    prod: str, settle: float = 10.0, timeout: float = 120.0
) -> dict[str, int]:
    """stacks/Pulumi.<prod>.yaml at its own sizes on its own pools (stack_pools): the pods
    left without a node once every pod exists and the schedulers had `settle` seconds more;
    {} when all fit."""
    sizes = stack_sizes(prod)
    with (
        SimulatedCluster(stack_pools(prod), zones=3) as sim,
        stack_on(sim, prod, sizes) as stack,
    ):
        stack.up()
        cube = sizes.cube_shards * sizes.cube_replicas
        training = sizes.trainers + sizes.pservers
        wait_for(
            "every cube and training pod made",
            lambda: (
                len(pods(sim.cp, f"{COMPONENT_LABEL}=cube")) == cube
                and len(training_pods(sim.cp)) == training
            ),
            timeout,
        )
        time.sleep(settle)
        return pending(sim.cp)
