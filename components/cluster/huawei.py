"""`cloud: huawei`: a CCE cluster (pulumi-huaweicloud) in a VPC of its own, with node pools,
the CCE Volcano add-on when the stack wants Volcano managed, an OBS bucket (S3 API) and an
SWR organization with one repository per project image.

Credentials are the provider's standard ones (HW_ACCESS_KEY / HW_SECRET_KEY); the region
comes from the stack config. The provider plugin must be installed by hand: its download URL
is broken upstream (docs/clouds.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_huaweicloud as huaweicloud

from components.cluster import (
    POOL_LABEL,
    PROJECT_IMAGES,
    CloudBucket,
    ClusterResult,
    NodePoolSpec,
    after,
    kubernetes_provider,
)

PLUGIN_DOWNLOAD_URL = "https://github.com/huaweicloud/pulumi-huaweicloud/releases/download/v0.0.12"
VPC_CIDR = "192.168.0.0/16"
SUBNET_CIDR = "192.168.0.0/18"
SUBNET_GATEWAY = "192.168.0.1"
NODE_OS = "EulerOS 2.9"  # supported by every current CCE version
# CCE's kubeconfig names: the API server through the cluster's EIP, checked against its CA.
EXTERNAL_CLUSTERS = ("externalClusterTLSVerify", "externalCluster")


@dataclass(frozen=True)
class HuaweiCceArgs:
    cluster_name: str
    region: str
    kubernetes_version: str  # e.g. v1.31
    cluster_flavor: str  # e.g. cce.s2.small
    key_pair: str  # KPS key pair for node login
    node_pools: tuple[NodePoolSpec, ...]
    volcano_addon: bool = False  # install Volcano as the CCE add-on
    bucket: str | None = None  # create this OBS bucket (storage mode cloud)
    # The pods' shared keys (secret), for workloads without keys of their own.
    bucket_access_key: pulumi.Input[str] | None = None
    bucket_secret_key: pulumi.Input[str] | None = None
    organization: str = "elasticctr"  # SWR organization


class HuaweiCce(pulumi.ComponentResource):
    result: ClusterResult

    def __init__(
        self, name: str, args: HuaweiCceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        if not args.node_pools:
            raise ValueError(f"{name}: at least one node pool is required")
        super().__init__("elasticctr:cluster:HuaweiCce", name, None, opts)
        self._name = name
        self._huawei = huaweicloud.Provider(
            f"{name}-huaweicloud",
            region=args.region,
            # The SDK's own download URL misses the release tag's "v" (docs/clouds.md).
            opts=pulumi.ResourceOptions(parent=self, plugin_download_url=PLUGIN_DOWNLOAD_URL),
        )

        vpc = huaweicloud.vpc.Vpc(
            f"{name}-vpc", name=args.cluster_name, cidr=VPC_CIDR, opts=self._opts()
        )
        subnet = huaweicloud.vpc.Subnet(
            f"{name}-subnet",
            name=args.cluster_name,
            vpc_id=vpc.id,
            cidr=SUBNET_CIDR,
            gateway_ip=SUBNET_GATEWAY,
            opts=self._opts(),
        )
        # Pulumi reaches the API server from outside the VPC: it needs a public address.
        api_address = huaweicloud.vpc.Eip(
            f"{name}-api-eip",
            publicip={"type": "5_bgp"},
            bandwidth={
                "name": f"{args.cluster_name}-api",
                "share_type": "PER",
                "size": 5,
                "charge_mode": "traffic",
            },
            opts=self._opts(),
        )
        cluster = huaweicloud.cce.Cluster(
            f"{name}-cce",
            name=args.cluster_name,
            flavor_id=args.cluster_flavor,
            cluster_version=args.kubernetes_version,
            vpc_id=vpc.id,
            subnet_id=subnet.id,
            container_network_type="overlay_l2",
            eip=api_address.address,
            # The client certificate and key are credentials: encrypted in the state.
            opts=pulumi.ResourceOptions.merge(
                self._opts(),
                pulumi.ResourceOptions(
                    additional_secret_outputs=["certificate_users", "kube_config_raw"]
                ),
            ),
        )
        self.node_pools = [
            huaweicloud.cce.NodePool(
                f"{name}-pool-{pool.name}",
                cluster_id=cluster.id,
                name=pool.name,
                os=NODE_OS,
                flavor_id=pool.instance_type,
                initial_node_count=pool.desired_nodes,
                min_node_count=pool.min_nodes,
                max_node_count=pool.max_nodes,
                # Scaling between min and max needs CCE's autoscaler add-on (docs/clouds.md).
                scall_enable=pool.min_nodes < pool.max_nodes,
                key_pair=args.key_pair,
                root_volume={"size": 50, "volumetype": "SSD"},
                data_volumes=[{"size": pool.disk_gb, "volumetype": "SSD"}],
                labels={POOL_LABEL: pool.name},
                opts=self._opts(),
            )
            for pool in args.node_pools
        ]
        if args.volcano_addon:
            huaweicloud.cce.Addon(
                f"{name}-volcano",
                cluster_id=cluster.id,
                template_name="volcano",
                # The scheduler runs on worker nodes: install it once a pool exists.
                opts=self._opts(depends_on=self.node_pools),
            )

        kubeconfig: pulumi.Output[str] = pulumi.Output.secret(
            pulumi.Output.all(cluster.certificate_clusters, cluster.certificate_users).apply(
                lambda certs: kubeconfig_from_certificates(args.cluster_name, *certs)
            )
        )
        provider = kubernetes_provider(
            f"{name}-provider",
            kubeconfig=kubeconfig,
            # Workloads need nodes: nothing is applied before the pools are ready.
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.node_pools),
        )

        bucket = self._bucket(args) if args.bucket is not None else None
        self.result = ClusterResult(
            provider=provider,
            kubeconfig=kubeconfig,
            bucket=bucket,
            image_registry=self._registry(args),
            volcano_managed=args.volcano_addon,
            # SWR logins derive from the deployer's keys: `docker login` by hand (docs).
            registry_login=None,
        )
        self.register_outputs(
            {"cluster_id": cluster.id, "image_registry": self.result.image_registry}
        )

    def _opts(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(
            parent=self, provider=self._huawei, depends_on=list(depends_on)
        )

    def _bucket(self, args: HuaweiCceArgs) -> CloudBucket:
        assert args.bucket is not None
        bucket = huaweicloud.obs.Bucket(
            f"{self._name}-bucket",
            bucket=args.bucket,
            acl="private",
            versioning=True,
            encryption=True,
            sse_algorithm="AES256",  # keys managed by OBS
            storage_class="STANDARD",
            opts=self._opts(),
        )
        return CloudBucket(
            endpoint=after(bucket, f"https://obs.{args.region}.myhuaweicloud.com"),
            bucket=args.bucket,
            region=args.region,
            access_key=args.bucket_access_key,
            secret_key=args.bucket_secret_key,
        )

    def _registry(self, args: HuaweiCceArgs) -> pulumi.Output[str]:
        organization = huaweicloud.swr.Organization(
            f"{self._name}-swr", name=args.organization, opts=self._opts()
        )
        repositories = [
            huaweicloud.swr.Repository(
                f"{self._name}-repo-{image}",
                organization=organization.name,
                name=image,
                # Pods carry no imagePullSecrets: nodes pull these images anonymously.
                is_public=True,
                category="other",
                opts=self._opts(),
            )
            for image in PROJECT_IMAGES
        ]
        return pulumi.Output.all(*[r.urn for r in repositories]).apply(
            lambda _: f"swr.{args.region}.myhuaweicloud.com/{args.organization}"
        )


def kubeconfig_from_certificates(
    name: str, clusters: Sequence[Any] | None, users: Sequence[Any] | None
) -> str:
    """A kubeconfig (JSON) for the cluster's public endpoint, from CCE's certificates.

    CCE names its endpoints internalCluster (VPC), externalCluster (EIP, no CA) and
    externalClusterTLSVerify (EIP, with CA); the user is a client certificate."""
    by_name = {_get(c, "name"): c for c in clusters or []}
    endpoint = next((by_name[n] for n in EXTERNAL_CLUSTERS if n in by_name), None)
    user = next(iter(users or []), None)
    if endpoint is None or user is None:
        # An empty kubeconfig would make the Kubernetes provider fall back to the user's
        # own current context: another cluster. Stop instead.
        found = ", ".join(str(n) for n in by_name) or "none"
        raise ValueError(f"CCE cluster {name} has no public endpoint (certificates for: {found})")
    cluster_entry: dict[str, Any] = {"server": _get(endpoint, "server")}
    ca = _get(endpoint, "certificate_authority_data")
    if ca:
        cluster_entry["certificate-authority-data"] = ca
    else:
        cluster_entry["insecure-skip-tls-verify"] = True
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": cluster_entry}],
            "users": [
                {
                    "name": name,
                    "user": {
                        "client-certificate-data": _get(user, "client_certificate_data"),
                        "client-key-data": _get(user, "client_key_data"),
                    },
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
        }
    )


def _get(item: Any, key: str) -> Any:
    """A field of an output object: the SDK's typed object, or a plain dict (camelCase or not)."""
    value = getattr(item, key, None)
    if value is None and isinstance(item, dict):
        camel = key.split("_")[0] + "".join(p.title() for p in key.split("_")[1:])
        value = dict.get(item, key, dict.get(item, camel))
    return value
