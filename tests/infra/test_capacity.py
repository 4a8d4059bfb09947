"""The stack's pods against the cluster's room (infra/capacity.py): the tally counts every
pod the program declares, as the scheduler would; the warning says when they cannot fit."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from infra import capacity
from tests.support import pulumi_harness as harness
from tests.support.stacks import run_stack

GIB = Decimal(1024**3)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[capacity.Tally, harness.Graph]:
    """The dev stack run under mocks, with the tally the program made."""
    made: list[capacity.Tally] = []
    original = capacity.Tally.start

    def start(self: capacity.Tally) -> None:
        made.append(self)
        original(self)

    monkeypatch.setattr(capacity.Tally, "start", start)
    graph = run_stack("dev", {})
    (tally,) = made
    return tally, graph


def _registered_pods(graph: harness.Graph) -> int:
    """Pods of the workloads as the engine received them (camelCase inputs)."""
    return sum(
        pods
        for resource in graph.resources
        for _, pods, _ in capacity.workload_pods(resource.type, resource.inputs)
    )


def test_the_tally_counts_every_pod_the_program_declares(
    counted: tuple[capacity.Tally, harness.Graph],
) -> None:
    tally, graph = counted
    total = tally.total()
    assert total.pods == _registered_pods(graph) > 0
    # dev: 2 trainers + 1 pserver, 1 CPU and 2 GiB each (top-level cpu/mem).
    assert set(tally.parts) >= {"trainer", "pserver", "cube", "serving", "mlflow", "minio"}
    trainers = tally.parts["trainer"]
    assert (trainers.pods, trainers.cpu, trainers.memory) == (2, Decimal(2), 4 * GIB)
    assert tally.parts["pserver"].pods == 1
    assert total.cpu == sum((p.cpu for p in tally.parts.values()), Decimal(0))


def test_init_containers_count_as_the_scheduler_counts_them() -> None:
    def container(cpu: str, memory: str) -> dict[str, Any]:
        return {"resources": {"requests": {"cpu": cpu, "memory": memory}}}

    template = {
        "spec": {
            "containers": [container("500m", "1Gi"), container("250m", "512Mi")],
            # One at a time, before: the largest counts when it is more than the sum.
            "init_containers": [container("2", "256Mi"), container("100m", "1Gi")],
        }
    }
    requests = capacity.pod_requests(template, 3)
    assert (requests.pods, requests.cpu, requests.memory) == (3, Decimal(6), Decimal("4.5") * GIB)


def test_other_namespaces_pods_count_their_init_containers_as_the_scheduler_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubernetes import client

    def container(cpu: str, memory: str) -> client.V1Container:
        requests = {"cpu": cpu, "memory": memory}
        return client.V1Container(
            name="c", resources=client.V1ResourceRequirements(requests=requests)
        )

    def pod(
        namespace: str,
        containers: list[client.V1Container],
        inits: list[client.V1Container] | None = None,
    ) -> client.V1Pod:
        return client.V1Pod(
            metadata=client.V1ObjectMeta(name="p", namespace=namespace),
            spec=client.V1PodSpec(node_name="n", containers=containers, init_containers=inits),
            status=client.V1PodStatus(phase="Running"),
        )

    node = client.V1Node(
        metadata=client.V1ObjectMeta(name="n"),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(allocatable={"cpu": "4", "memory": "16Gi"}),
    )
    pods = [
        # Its init container asks more than its containers together: that is what it holds.
        pod("kube-system", [container("100m", "128Mi")], [container("1", "1Gi")]),
        pod("monitoring", [container("250m", "256Mi"), container("250m", "256Mi")]),
        pod("elasticctr", [container("2", "4Gi")]),  # the stack's own: counted by the tally
    ]

    class Core:
        def __init__(self, api: Any) -> None:
            pass

        def list_node(self, **_: Any) -> client.V1NodeList:
            return client.V1NodeList(items=[node])

        def list_pod_for_all_namespaces(self, **_: Any) -> client.V1PodList:
            return client.V1PodList(items=pods)

    monkeypatch.setattr(client, "CoreV1Api", Core)
    with client.ApiClient() as api:
        free = capacity.room(api, "elasticctr", None)
    shapes = (("", Decimal(4), 16 * GIB),)  # node "n": no pool label
    assert free == capacity.Room(
        1, Decimal(4), 16 * GIB, Decimal("1.5"), Decimal("1.5") * GIB, shapes
    )


def test_values_not_known_yet_are_not_counted() -> None:
    assert capacity.workload_pods(capacity.DEPLOYMENT, {"spec": None}) == []
    template = {"metadata": {"labels": {"app.kubernetes.io/component": "x"}}}
    unknown_replicas = {"spec": {"replicas": object(), "template": template}}
    assert capacity.workload_pods(capacity.STATEFUL_SET, unknown_replicas) == []
    assert capacity.workload_pods("kubernetes:core/v1:ConfigMap", {"spec": {}}) == []


def _tally(**parts: tuple[int, str, int]) -> capacity.Tally:
    tally = capacity.Tally()
    for name, (pods, cpu, gib) in parts.items():
        tally.parts[name] = capacity.Requests(pods, Decimal(cpu), gib * GIB)
    return tally


def test_a_stack_that_fits_gets_no_warning() -> None:
    tally = _tally(trainer=(2, "2", 4), cube=(2, "0.5", 4))
    room = capacity.Room(1, Decimal(4), 16 * GIB, Decimal("1.5"), 2 * GIB)
    assert capacity.shortfall(tally, room) is None


def test_a_stack_short_of_cpu_is_named_with_its_sums_and_largest_parts() -> None:
    tally = _tally(trainer=(3, "1.5", 6), pserver=(2, "0.6", 4), serving=(1, "0.25", 1))
    room = capacity.Room(1, Decimal(2), 24 * GIB, Decimal("0.2"), Decimal("0.5") * GIB)
    warning = capacity.shortfall(tally, room)
    assert warning is not None
    assert warning.startswith(
        "elasticctr: the stack's 6 pods request 2.35 CPU and 11.0 GiB (most: trainer 1.5 CPU "
        "/ 6.0 GiB (3 pods), pserver 0.6 CPU / 4.0 GiB (2 pods), serving 0.25 CPU / 1.0 GiB "
        "(1 pods)); the cluster's 1 nodes that take pods have 2 CPU and 24.0 GiB allocatable, "
        "of which other namespaces' pods request 0.2 CPU and 0.5 GiB: some pods would stay "
        "Pending"
    ), warning


def test_a_stack_short_of_memory_only_is_warned_too() -> None:
    tally = _tally(cube=(2, "0.5", 16))
    room = capacity.Room(2, Decimal(8), 12 * GIB, Decimal(0), Decimal(0))
    assert capacity.shortfall(tally, room) is not None


def test_the_tally_keeps_each_parts_largest_pod_and_its_pool(
    counted: tuple[capacity.Tally, harness.Graph],
) -> None:
    tally, _ = counted
    # dev: a trainer asks 1 CPU and 2 GiB (top-level cpu/mem), on any node.
    assert tally.largest["trainer"] == capacity.Pod(Decimal(1), 2 * GIB, "")
    assert set(tally.largest) == set(tally.parts)


def _serving_nodes(count: int, cpu: str, gib: str) -> capacity.Room:
    shape = ("serving", Decimal(cpu), Decimal(gib) * GIB)
    return capacity.Room(count, Decimal(0), Decimal(0), Decimal(0), Decimal(0), (shape,) * count)


def test_a_pod_larger_than_every_node_of_its_pool_is_named() -> None:
    tally = capacity.Tally()
    tally.largest["cube"] = capacity.Pod(Decimal(4), 16 * GIB, "serving")
    tally.largest["serving"] = capacity.Pod(Decimal(4), 8 * GIB, "serving")
    # 8-core, 16 GiB machines offer pods about 7.91 cores and 13.3 GiB.
    assert capacity.too_large(tally, _serving_nodes(3, "7.91", "13.3")) == [
        "elasticctr: a cube pod requests 4 CPU and 16.0 GiB, more than any node of pool "
        "serving offers pods (3 nodes; the largest allocatable 7.91 CPU and 13.3 GiB): it would "
        "stay Pending whatever else runs (lower the part's cpu/mem, or use larger nodes)"
    ]
    assert capacity.too_large(tally, _serving_nodes(3, "15.89", "58.4")) == []


def test_only_the_nodes_a_pod_may_use_are_weighed() -> None:
    tally = capacity.Tally()
    tally.largest["trainer"] = capacity.Pod(Decimal(8), 32 * GIB, "")
    tally.largest["cube"] = capacity.Pod(Decimal(2), 8 * GIB, "missing-pool")
    small = ("serving", Decimal(4), 16 * GIB)
    large = ("training", Decimal(16), 64 * GIB)
    room = capacity.Room(2, Decimal(0), Decimal(0), Decimal(0), Decimal(0), (small, large))
    # A pod without a pool may use the large node; a pool without nodes is preflight's
    # node-pool warning, not this one.
    assert capacity.too_large(tally, room) == []
    only_small = capacity.Room(1, Decimal(0), Decimal(0), Decimal(0), Decimal(0), (small,))
    (warning,) = capacity.too_large(tally, only_small)
    assert warning.startswith("elasticctr: a trainer pod requests 8 CPU and 32.0 GiB, more than "
                              "any node that takes pods offers pods (1 nodes;")  # fmt: skip
