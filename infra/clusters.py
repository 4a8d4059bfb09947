"""The cluster of a stack, by `cloud`: the one place that knows which cloud it is."""

from __future__ import annotations

from components.cluster import ClusterResult
from components.cluster.existing import ExistingCluster, ExistingClusterArgs
from infra.config import StackConfig


def build_cluster(config: StackConfig) -> ClusterResult:
    # Until the cloud components exist (Baidu CCE, Huawei CCE, AWS EKS), every cloud means a
    # cluster the user already has, reached through `cluster.kubeconfig`.
    cluster = ExistingCluster(
        "cluster",
        ExistingClusterArgs(
            kubeconfig=config.cluster.kubeconfig,
            context=config.cluster.context,
            volcano_managed=config.volcano.managed,
            render_dir=config.cluster.render_dir,
        ),
    )
    return cluster.result
