"""Where the project's images come from: the registry of the stack (the cloud's own, or
`images.registry` on an existing cluster), at the pinned tags of the config (and their
digests, `images.digests`, where the stack records them), or built from images/ and pushed
there first (`images.build: true`, which pins the pushed digest)."""

from __future__ import annotations

from pathlib import Path

import pulumi

from components.cluster import PROJECT_IMAGES, ClusterResult
from components.images import ProjectImages, ProjectImagesArgs
from infra.config import StackConfig

IMAGES_DIR = Path(__file__).resolve().parent.parent / "images"


def project_images(config: StackConfig, cluster: ClusterResult) -> dict[str, pulumi.Input[str]]:
    """Image name (trainer, cube, serving, mlflow) -> the reference pods run."""
    registry: pulumi.Input[str] = (
        cluster.image_registry if cluster.image_registry is not None else config.images.registry
    )
    tags = {image: getattr(config.images.tags, image) for image in PROJECT_IMAGES}
    if config.images.build:
        built = ProjectImages(
            "images",
            ProjectImagesArgs(
                registry=registry, tags=tags, context_dir=IMAGES_DIR, login=cluster.registry_login
            ),
        )
        return dict(built.refs)
    digests = config.images.digests
    return {
        image: pulumi.Output.concat(registry, f"/{image}:{tag}", _at(getattr(digests, image)))
        for image, tag in tags.items()
    }


def _at(digest: str | None) -> str:
    return f"@{digest}" if digest else ""
