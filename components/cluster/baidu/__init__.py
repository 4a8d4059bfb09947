"""`cloud: baidu`: a CCE v2 cluster with one instance group per node pool, its kubeconfig, a
BOS bucket (S3 API) and a project in a CCR instance. No Pulumi provider exists for Baidu
Cloud: each part is a dynamic resource of this package over Baidu's OpenAPI.

Credentials: BAIDUCLOUD_ACCESS_KEY / BAIDUCLOUD_SECRET_KEY in the environment of `pulumi`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components.cluster import (
    POOL_LABEL,
    CloudBucket,
    ClusterResult,
    NodePoolSpec,
    after,
    kubernetes_provider,
)
from components.cluster.baidu.bos import BosBucket
from components.cluster.baidu.cce import CceCluster, CceInstanceGroup, CceKubeconfig
from components.cluster.baidu.ccr import CcrProject


@dataclass(frozen=True)
class BaiduCceArgs:
    cluster_name: str
    region: str  # bj, gz, su, ...
    kubernetes_version: str
    vpc_id: str
    subnet_id: str
    ssh_key_id: str
    ccr_instance_id: str
    master_flavor: str
    node_pools: tuple[NodePoolSpec, ...]
    create_timeout_seconds: float
    bucket: str | None = None  # create this BOS bucket (storage mode cloud)
    # The pods' shared keys (secret), for workloads without keys of their own.
    bucket_access_key: pulumi.Input[str] | None = None
    bucket_secret_key: pulumi.Input[str] | None = None
    project: str = "elasticctr"  # CCR project of the images

    def endpoint(self, service: str) -> str:
        return f"https://{service}.{self.region}.baidubce.com"


class BaiduCce(pulumi.ComponentResource):
    result: ClusterResult

    def __init__(
        self, name: str, args: BaiduCceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if not args.node_pools:
            raise ValueError(f"{name}: at least one node pool is required")
        super().__init__("elasticctr:cluster:BaiduCce", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cce = args.endpoint("cce")

        cluster = CceCluster(
            f"{name}-cce",
            endpoint=cce,
            cluster_name=args.cluster_name,
            k8s_version=args.kubernetes_version,
            vpc_id=args.vpc_id,
            subnet_id=args.subnet_id,
            master_flavor=args.master_flavor,
            timeout_seconds=args.create_timeout_seconds,
            opts=child,
        )
        self.instance_groups = [
            CceInstanceGroup(
                f"{name}-pool-{pool.name}",
                endpoint=cce,
                cluster_id=cluster.cluster_id,
                group_name=pool.name,
                instance_type=pool.instance_type,
                replicas=pool.desired_nodes,
                min_replicas=pool.min_nodes,
                max_replicas=pool.max_nodes,
                disk_gb=pool.disk_gb,
                vpc_id=args.vpc_id,
                subnet_id=args.subnet_id,
                ssh_key_id=args.ssh_key_id,
                labels={POOL_LABEL: pool.name},
                timeout_seconds=args.create_timeout_seconds,
                opts=child,
            )
            for pool in args.node_pools
        ]
        kubeconfig = CceKubeconfig(
            f"{name}-kubeconfig", endpoint=cce, cluster_id=cluster.cluster_id, opts=child
        )
        secret_kubeconfig: pulumi.Output[str] = pulumi.Output.secret(kubeconfig.kubeconfig)
        provider = kubernetes_provider(
            f"{name}-provider",
            kubeconfig=secret_kubeconfig,
            # Workloads need nodes: nothing is applied before the pools are ready.
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.instance_groups),
        )

        bucket = None
        if args.bucket is not None:
            bos = BosBucket(
                f"{name}-bucket",
                endpoint=f"https://s3.{args.region}.bcebos.com",
                region=args.region,
                bucket=args.bucket,
                opts=child,
            )
            bucket = CloudBucket(
                endpoint=after(bos, f"https://s3.{args.region}.bcebos.com"),
                bucket=args.bucket,
                region=args.region,
                access_key=args.bucket_access_key,
                secret_key=args.bucket_secret_key,
            )
        project = CcrProject(
            f"{name}-ccr",
            endpoint=args.endpoint("ccr"),
            instance_id=args.ccr_instance_id,
            project=args.project,
            opts=child,
        )
        self.result = ClusterResult(
            provider=provider,
            kubeconfig=secret_kubeconfig,
            bucket=bucket,
            image_registry=project.registry,
            volcano_managed=False,
            # CCR logins are temporary passwords of the instance: `docker login` by hand.
            registry_login=None,
        )
        self.register_outputs(
            {"cluster_id": cluster.cluster_id, "image_registry": project.registry}
        )
