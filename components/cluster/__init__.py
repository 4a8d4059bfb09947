"""One cluster interface for every cloud: whatever creates (or finds) the cluster hands the
rest of the program the same ClusterResult, and nothing else in the program knows the cloud.

One module per source of clusters: `existing.py` (a kubeconfig), `aws.py` (EKS),
`huawei.py` (CCE), `baidu/` (CCE v2 through dynamic providers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.kube import POOL_LABEL as POOL_LABEL  # the cloud modules label by it
from components.network import Route

# The project's images (images/<name>/Dockerfile); each cloud makes one repository per name.
PROJECT_IMAGES = ("trainer", "cube", "serving", "mlflow")


@dataclass(frozen=True)
class NodePoolSpec:
    """A pool of identical worker nodes, as every cloud component takes it."""

    name: str
    instance_type: str
    min_nodes: int
    desired_nodes: int
    max_nodes: int
    disk_gb: int


@dataclass(frozen=True)
class CloudBucket:
    """A bucket the cloud component created, as the S3 interface sees it."""

    # Resolves once the bucket exists, so whatever reads it waits for the bucket.
    endpoint: pulumi.Input[str]
    bucket: str
    region: str
    access_key: pulumi.Input[str] | None  # secret; None when pods use their cloud identity
    secret_key: pulumi.Input[str] | None
    # Where pods get that identity's credentials, outside the cluster's pods (egress).
    identity_routes: tuple[Route, ...] = ()


@dataclass(frozen=True)
class RegistryLogin:
    """How `docker push` logs in to the registry the cloud created (secret password)."""

    address: pulumi.Input[str]
    username: pulumi.Input[str]
    password: pulumi.Input[str]


@dataclass(frozen=True)
class ClusterResult:
    provider: pulumi.ProviderResource  # every Kubernetes object goes through this provider
    kubeconfig: pulumi.Output[str] | None  # secret; None for a cluster the user already has
    bucket: CloudBucket | None  # None: the stack's `storage` config decides
    image_registry: pulumi.Output[str] | None  # None: the `images.registry` config
    volcano_managed: bool  # the cluster runs Volcano already (a managed add-on)
    # None: pushes use the login of the machine running Pulumi (`docker login`).
    registry_login: RegistryLogin | None = None
    # On a LoadBalancer Service: the cloud's options (one that passes client addresses on).
    load_balancer_annotations: dict[str, str] | None = None


def kubernetes_provider(name: str, opts: pulumi.ResourceOptions, **connection: Any) -> k8s.Provider:
    """The provider every Kubernetes object of the stack goes through, for any cloud.

    ConfigMaps change in place: the pods that read one carry a hash of it on their
    template and roll. (By default the provider replaces a changed ConfigMap, and the
    engine then replaces everything naming it: serving would be deleted and re-created on
    every `cube_shards` change.)

    Creating an object that already exists fails (AlreadyExists) instead of adopting it:
    the stack must never take over, and then delete on destroy, what it did not create (a
    namespace of another team). Provider 4.29+ does so by default (`upsertExistingObjects`
    false); 4.25, the version built here, upserts under server-side apply, so the stack
    uses client-side apply, whose create is a plain create.
    """
    return k8s.Provider(
        name,
        enable_config_map_mutable=True,
        enable_server_side_apply=False,
        opts=opts,
        **connection,
    )


def after(resource: pulumi.CustomResource, value: str) -> pulumi.Output[str]:
    """`value`, known once `resource` exists: readers of it depend on the resource."""
    return resource.urn.apply(lambda _: value)
