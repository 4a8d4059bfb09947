"""The cluster of a stack, by `cloud`: the one place that picks a cloud's component, fed
what CLOUD_TRAITS (infra/config.py) says that cloud does.

Each cloud component gets typed args mapped from its config section and hands back the same
ClusterResult (Kubernetes provider, kubeconfig, bucket, registry, Volcano), so the rest of
the program never asks which cloud it runs on.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi

from components.bucket_access import BucketUser
from components.cluster import ClusterResult, NodePoolSpec
from components.cluster.aws import EksCluster, EksClusterArgs
from components.cluster.baidu import BaiduCce, BaiduCceArgs
from components.cluster.existing import ExistingCluster, ExistingClusterArgs
from components.cluster.huawei import HuaweiCce, HuaweiCceArgs
from infra.config import CLOUD_TRAITS, Cloud, NodePool, StackConfig
from infra.load_config import as_secret


def build_cluster(config: StackConfig, bucket_users: tuple[BucketUser, ...]) -> ClusterResult:
    """The stack's cluster; a bucket the cloud makes gets `bucket_users` (AWS: a Pod
    Identity role each)."""
    cluster, traits = config.cluster, CLOUD_TRAITS[config.cloud]
    # One cluster per stack: the stack name keeps clusters of several stacks apart.
    name = f"elasticctr-{pulumi.get_stack()}"
    bucket = config.storage.bucket if config.storage.mode == "cloud" else None
    # A bucket the cloud makes: a role per workload, or the stack's keys.
    roles = bucket_users if traits.workload_identity else ()
    access_key, secret_key = (
        as_secret(config.storage.access_key),
        as_secret(config.storage.secret_key),
    )
    # volcano.managed: the cluster's own Volcano (the config allows it where the cloud can).
    managed_volcano = config.volcano.managed and traits.managed_volcano
    if config.cloud == Cloud.AWS:
        aws = cluster.aws
        return EksCluster(
            "cluster",
            EksClusterArgs(
                cluster_name=name,
                region=aws.region,
                kubernetes_version=aws.kubernetes_version,
                node_pools=_pools(aws.node_pools),
                subnet_ids=tuple(aws.subnet_ids),
                bucket=bucket,
                bucket_users=roles,
                bucket_namespace=config.namespace,
            ),
        ).result
    if config.cloud == Cloud.HUAWEI:
        huawei = cluster.huawei
        return HuaweiCce(
            "cluster",
            HuaweiCceArgs(
                cluster_name=name,
                region=huawei.region,
                kubernetes_version=huawei.kubernetes_version,
                cluster_flavor=huawei.cluster_flavor,
                key_pair=huawei.key_pair,
                node_pools=_pools(huawei.node_pools),
                volcano_addon=managed_volcano,
                bucket=bucket,
                bucket_access_key=access_key,
                bucket_secret_key=secret_key,
            ),
        ).result
    if config.cloud == Cloud.BAIDU:
        baidu = cluster.baidu
        return BaiduCce(
            "cluster",
            BaiduCceArgs(
                cluster_name=name,
                region=baidu.region,
                kubernetes_version=baidu.kubernetes_version,
                vpc_id=baidu.vpc_id,
                subnet_id=baidu.subnet_id,
                ssh_key_id=baidu.ssh_key_id,
                ccr_instance_id=baidu.ccr_instance_id,
                master_flavor=baidu.master_flavor,
                node_pools=_pools(baidu.node_pools),
                create_timeout_seconds=baidu.create_timeout_minutes * 60,
                bucket=bucket,
                bucket_access_key=access_key,
                bucket_secret_key=secret_key,
            ),
        ).result
    return ExistingCluster(
        "cluster",
        ExistingClusterArgs(
            kubeconfig=cluster.kubeconfig,
            context=cluster.context,
            volcano_managed=managed_volcano,
            render_dir=cluster.render_dir,
        ),
    ).result


def _pools(pools: Sequence[NodePool]) -> tuple[NodePoolSpec, ...]:
    return tuple(
        NodePoolSpec(
            name=pool.name,
            instance_type=pool.instance_type,
            min_nodes=pool.min_nodes,
            desired_nodes=pool.desired_nodes,
            max_nodes=pool.max_nodes,
            disk_gb=pool.disk_gb,
        )
        for pool in pools
    )
