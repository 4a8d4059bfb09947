"""What the stack's pods ask of the cluster, against what the cluster has, at preview.

A pod whose requests no node has room for stays Pending, and a Volcano Job waits until
every one of its pods fits (gang scheduling): training then never starts, and the preview
said nothing. So the program adds up the requests of every pod it declares (each
workload's replicas times its pod's containers, init containers as the scheduler counts
them) while the resources are constructed (`Tally`, an SDK-side transformation that
changes nothing), and on a cluster that exists already compares the sum with the
allocatable CPU and memory of the nodes that take pods, less what other namespaces' pods
request there. Short of either is a warning (a cluster autoscaler may add nodes when
pods wait), naming the sums and the largest parts. A reshape of cube briefly runs both
layouts: the warning counts the new one only, and says so. A part whose single pod is larger
than every node of its pool (`too_large`) gets a warning of its own: it never starts, however
empty the cluster.

Volcano's own pods (its Helm release) are not counted: the chart declares them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pulumi

from components.kube import COMPONENT_LABEL, POOL_LABEL

NAMESPACE = "elasticctr"
# Workload types whose pods the tally counts, and where their pod templates are.
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFUL_SET = "kubernetes:apps/v1:StatefulSet"
JOB = "kubernetes:batch/v1:Job"
VOLCANO_JOB = "kubernetes:batch.volcano.sh/v1alpha1:Job"
GIB = Decimal(1024**3)


@dataclass
class Requests:
    pods: int = 0
    cpu: Decimal = Decimal(0)  # cores
    memory: Decimal = Decimal(0)  # bytes

    def add(self, other: Requests) -> None:
        self.pods += other.pods
        self.cpu += other.cpu
        self.memory += other.memory


@dataclass(frozen=True)
class Pod:
    """One pod of a part: its requests and the node pool its selector asks for ("": any)."""

    cpu: Decimal
    memory: Decimal
    pool: str


@dataclass
class Tally:
    """Requests per part (a pod template's component label), and each part's largest pod,
    from the workloads registered after `start()`."""

    parts: dict[str, Requests] = field(default_factory=dict)
    largest: dict[str, Pod] = field(default_factory=dict)

    def start(self) -> None:
        pulumi.runtime.register_stack_transformation(self._count)

    def total(self) -> Requests:
        whole = Requests()
        for part in self.parts.values():
            whole.add(part)
        return whole

    def _count(self, args: pulumi.ResourceTransformationArgs) -> None:
        for component, pods, template in workload_pods(args.type_, args.props):
            self.parts.setdefault(component, Requests()).add(pod_requests(template, pods))
            one = pod_requests(template, 1)
            spec = template.get("spec") or {}
            selector = spec.get("node_selector") or spec.get("nodeSelector") or {}
            pod = Pod(one.cpu, one.memory, str(selector.get(POOL_LABEL, "")))
            known = self.largest.get(component)
            if known is None or (pod.cpu, pod.memory) > (known.cpu, known.memory):
                self.largest[component] = pod


def workload_pods(kind: str, props: Any) -> Iterable[tuple[str, int, Any]]:
    """(component, pod count, pod template) of a workload's inputs (a dict, or the SDK's
    args object); nothing for other kinds or for values not known yet."""
    inputs = props if isinstance(props, Mapping) else vars(props)
    spec = inputs.get("spec")
    if not isinstance(spec, Mapping):
        return []
    if kind in (DEPLOYMENT, STATEFUL_SET):
        return _one(spec.get("template"), spec.get("replicas", 1))
    if kind == JOB:
        return _one(spec.get("template"), spec.get("parallelism", 1))
    if kind == VOLCANO_JOB:
        tasks = spec.get("tasks") or []
        return [
            found
            for task in tasks
            if isinstance(task, Mapping)
            for found in _one(task.get("template"), task.get("replicas", 1))
        ]
    return []


def _one(template: Any, replicas: Any) -> list[tuple[str, int, Any]]:
    # A count is an int here; the engine's side of the wire has it as a float (protobuf).
    if not isinstance(template, Mapping) or not isinstance(replicas, (int, float)):
        return []
    labels = (template.get("metadata") or {}).get("labels") or {}
    component = labels.get(COMPONENT_LABEL)
    return [(component, int(replicas), template)] if isinstance(component, str) else []


def pod_requests(template: Mapping[str, Any], pods: int) -> Requests:
    """`pods` pods of `template`: the scheduler's sum, its containers' requests, or its
    largest init container's where that is more (they run one at a time, before)."""
    spec = template.get("spec") or {}
    containers = _requests(spec.get("containers") or [])
    inits = [
        _requests([c]) for c in spec.get("init_containers") or spec.get("initContainers") or []
    ]
    cpu = max([containers[0], *(i[0] for i in inits)])
    memory = max([containers[1], *(i[1] for i in inits)])
    return Requests(pods, cpu * pods, memory * pods)


def _requests(containers: Iterable[Any]) -> tuple[Decimal, Decimal]:
    cpu, memory = Decimal(0), Decimal(0)
    for container in containers:
        requests = ((container or {}).get("resources") or {}).get("requests") or {}
        cpu += quantity(requests.get("cpu"))
        memory += quantity(requests.get("memory"))
    return cpu, memory


def quantity(value: Any) -> Decimal:
    """A quantity's value; 0 for one not known yet (an Output) or absent."""
    from kubernetes.utils import parse_quantity

    return Decimal(parse_quantity(value)) if isinstance(value, str) else Decimal(0)


@dataclass(frozen=True)
class Room:
    """The cluster's nodes that take pods: their count, allocatable sums, and what pods of
    other namespaces request on them."""

    nodes: int
    cpu: Decimal
    memory: Decimal
    used_cpu: Decimal
    used_memory: Decimal
    # Each node's pool label ("" without one) and allocatable CPU and memory.
    shapes: tuple[tuple[str, Decimal, Decimal], ...] = ()


def room(api: Any, namespace: str, timeout: Any) -> Room:
    """The cluster's room for the stack's pods (nodes not cordoned; pods not finished)."""
    from kubernetes import client

    core = client.CoreV1Api(api)
    nodes = [n for n in core.list_node(_request_timeout=timeout).items if not n.spec.unschedulable]
    names = {n.metadata.name for n in nodes}
    used = Requests()
    for pod in core.list_pod_for_all_namespaces(_request_timeout=timeout).items:
        if pod.metadata.namespace == namespace or pod.spec.node_name not in names:
            continue
        if pod.status.phase in ("Succeeded", "Failed"):
            continue
        # The pod as the API has it (camelCase keys), counted by the scheduler's rule.
        used.add(pod_requests(api.sanitize_for_serialization(pod), 1))
    return Room(
        nodes=len(nodes),
        cpu=sum((quantity(n.status.allocatable.get("cpu")) for n in nodes), Decimal(0)),
        memory=sum((quantity(n.status.allocatable.get("memory")) for n in nodes), Decimal(0)),
        used_cpu=used.cpu,
        used_memory=used.memory,
        shapes=tuple(
            (
                (n.metadata.labels or {}).get(POOL_LABEL, ""),
                quantity(n.status.allocatable.get("cpu")),
                quantity(n.status.allocatable.get("memory")),
            )
            for n in nodes
        ),
    )


def too_large(tally: Tally, free: Room) -> list[str]:
    """A warning for each part whose pod no node it may run on could hold even empty."""
    warnings = []
    for part, pod in sorted(tally.largest.items()):
        eligible = [
            (cpu, mem) for pool, cpu, mem in free.shapes if not pod.pool or pool == pod.pool
        ]
        if not eligible or any(pod.cpu <= cpu and pod.memory <= mem for cpu, mem in eligible):
            continue  # no such node at all: preflight's node-pool warning says so
        cpu, memory = max(eligible)
        where = f"of pool {pod.pool}" if pod.pool else "that takes pods"
        warnings.append(
            f"{NAMESPACE}: a {part} pod requests {_cores(pod.cpu)} CPU and {_gib(pod.memory)} "
            f"GiB, more than any node {where} offers pods ({len(eligible)} nodes; the largest "
            f"allocatable {_cores(cpu)} CPU and {_gib(memory)} GiB): it would stay Pending "
            f"whatever else runs (lower the part's cpu/mem, or use larger nodes)"
        )
    return warnings


def shortfall(tally: Tally, free: Room) -> str | None:
    """The warning when the stack's requests exceed the room left for them, else None."""
    total = tally.total()
    cpu_left = free.cpu - free.used_cpu
    memory_left = free.memory - free.used_memory
    if total.cpu <= cpu_left and total.memory <= memory_left:
        return None
    largest = sorted(tally.parts.items(), key=lambda item: (-item[1].cpu, item[0]))[:4]
    parts = ", ".join(
        f"{name} {_cores(r.cpu)} CPU / {_gib(r.memory)} GiB ({r.pods} pods)" for name, r in largest
    )
    return (
        f"{NAMESPACE}: the stack's {total.pods} pods request {_cores(total.cpu)} CPU and "
        f"{_gib(total.memory)} GiB (most: {parts}); the cluster's {free.nodes} nodes that take "
        f"pods have {_cores(free.cpu)} CPU and {_gib(free.memory)} GiB allocatable, of which "
        f"other namespaces' pods request {_cores(free.used_cpu)} CPU and "
        f"{_gib(free.used_memory)} GiB: some pods would stay Pending, and a training Job "
        "starts only when all its pods fit (lower trainers, pservers or a part's cpu/mem, "
        "add nodes, or give the parts that must run a priority_class); a cube reshape needs "
        "room for both layouts while it runs"
    )


def _cores(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.01')).normalize():f}"


def _gib(value: Decimal) -> str:
    return f"{(value / GIB).quantize(Decimal('0.1')):f}"
