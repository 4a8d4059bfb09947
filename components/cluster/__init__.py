"""One cluster interface for every cloud: whatever creates (or finds) the cluster hands the
rest of the program the same ClusterResult, and nothing else in the program knows the cloud."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi


@dataclass(frozen=True)
class CloudBucket:
    """A bucket the cloud component created, as the S3 interface sees it."""

    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    region: str
    access_key: pulumi.Input[str] | None  # secret; None when pods use their cloud identity
    secret_key: pulumi.Input[str] | None


@dataclass(frozen=True)
class ClusterResult:
    provider: pulumi.ProviderResource  # every Kubernetes object goes through this provider
    kubeconfig: pulumi.Output[str] | None  # secret; None for a cluster the user already has
    bucket: CloudBucket | None  # None: the stack's `storage` config decides
    image_registry: pulumi.Output[str] | None  # None: the `images.registry` config
    volcano_managed: bool  # the cluster runs Volcano already (a managed add-on)
