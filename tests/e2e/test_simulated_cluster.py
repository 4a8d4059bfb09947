"""The prod stacks on a simulated cluster (tests/support/simulated.py). Each one's pods fit
its own node pools at their desired size. And at sizes CI can afford, in 3 zones: the training Job waits whole for room, each shard's replicas land on two nodes
of two zones, a drain and a lost zone never leave a shard without a ready replica, and a
rescale of trainers and shards converges. bench/sim_scale.py runs the same at production
sizes (docs/simulated-cluster.md)."""

from __future__ import annotations

import pytest

from tests.support import simulated
from tests.support.prerequisites import unavailable
from tools.localcluster.controlplane import find_binaries
from tools.localcluster.simulated import VOLCANO_BINARIES, NodePool, SimulatedCluster

# About 4.5 minutes, with no root: run beside the cluster session's waits (tools/test.sh).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.beside_cluster]

SCENARIO = simulated.Scenario(
    stack="baidu-prod",
    training=NodePool("training", 6, "32", "128Gi"),
    serving=NodePool("serving", 6, "96", "384Gi"),
    zones=3,
    sizes=simulated.Sizes(trainers=16, pservers=4, cube_shards=6, cube_replicas=2),
    rescaled=simulated.Sizes(trainers=20, pservers=4, cube_shards=8, cube_replicas=2),
    # A lost zone loses a node as well (the bench times each on its own).
    node_loss=False,
    timeout=300.0,
)


def _require_simulated_cluster() -> None:
    needed = (*VOLCANO_BINARIES, "kwok", "kube-scheduler", "kube-controller-manager")
    missing = [n for n in needed if n not in find_binaries(needed)]
    if missing:
        unavailable(f"{', '.join(missing)} not built: `bash tools/build-tools.sh volcano kwok`")


@pytest.mark.parametrize("stack", ["baidu-prod", "aws-prod", "huawei-prod"])
def test_a_prod_stack_fits_its_own_node_pools(cluster_path: str, stack: str) -> None:
    _require_simulated_cluster()
    # Before: every stack's cube replicas asked for more memory than its serving nodes have.
    assert simulated.unplaced_on_own_pools(stack) == {}


def test_a_prod_stack_survives_drain_and_zone_loss_on_simulated_nodes(
    cluster_path: str,
) -> None:
    _require_simulated_cluster()
    figures = simulated.run(SCENARIO)
    assert figures.problems() == [], figures
    # The Job's pods were all held back, then all started; every shard got its replicas.
    assert figures.gang_waited and figures.spread_problems == 0
    # A drain takes one replica of a shard at a time (its PodDisruptionBudget); a zone
    # takes at most one (the spread), and the lost replicas come back elsewhere.
    assert figures.drain_min_ready == 1
    assert figures.zone_loss_replicas > 0
    assert figures.zone_loss_min_ready >= 1


def test_a_pod_no_node_of_its_pool_can_hold_is_a_preview_warning(cluster_path: str) -> None:
    _require_simulated_cluster()
    # baidu-prod's serving pool before: 8-core, 16 GiB machines; a cube replica asks 16 GiB.
    cpu, memory = simulated.allocatable(8, 16)
    pools = [NodePool("training", 1, "64", "256Gi"), NodePool("serving", 1, cpu, memory)]
    sizes = simulated.stack_sizes("baidu-prod")
    with (
        SimulatedCluster(pools, zones=0) as sim,
        simulated.stack_on(sim, "baidu-prod", sizes) as stack,
    ):
        preview = stack.run("preview")
    assert (
        "a cube pod requests 4 CPU and 16.0 GiB, more than any node of pool serving offers "
        "pods (1 nodes; the largest allocatable 7.91 CPU and 13.3 GiB)"
    ) in preview.output, preview.describe()
    assert "a serving pod" not in preview.output  # 4 CPU and 8 GiB fit
