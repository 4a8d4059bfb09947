"""The images a stack names, as the stack file says them: its project images' registry and
tags, and the stand-ins it runs for MinIO, Hadoop and Volcano (which must be exactly the
references built here, or its pods would wait for an image nothing can pull)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.config import FeedbackConfig, ImagesConfig, MonitoringConfig, VolcanoConfig
from tools.imagekit.recipes import STANDIN_PREFIX, Options, Recipe, catalog, normalise, recipe_for

STACKS_DIR = Path(__file__).resolve().parents[2] / "stacks"


class StackImagesError(ValueError):
    """The stack names an image no recipe builds; the message says what to set."""


def stack_config(stack: str) -> dict[str, Any]:
    path = STACKS_DIR / f"Pulumi.{stack}.yaml"
    if not path.is_file():
        raise StackImagesError(f"no stack file {path}")
    document = yaml.safe_load(path.read_text()) or {}
    return dict(document.get("config") or {})


def stack_options(stack: str, base: Options | None = None) -> Options:
    """`base` (tool binary dirs) with the registry and tags of `stack`'s project images."""
    config = stack_config(stack)
    images = ImagesConfig.model_validate(config.get("elasticctr:images") or {})
    base = base or Options()
    options = Options(
        registry=images.registry,
        tags=images.tags.model_dump(),
        minio_bin_dir=base.minio_bin_dir,
        prometheus_bin_dir=base.prometheus_bin_dir,
        volcano_bin_dir=base.volcano_bin_dir,
    )
    _check_standins(stack, config, images, catalog(options))
    return options


def _check_standins(
    stack: str, config: dict[str, Any], images: ImagesConfig, recipes: dict[str, Recipe]
) -> None:
    problems = []
    named = [("images.minio", images.minio), ("images.hadoop", images.hadoop)]
    feedback = FeedbackConfig.model_validate(config.get("elasticctr:feedback") or {})
    if feedback.enabled and feedback.kafka.mode == "in-cluster":
        named.append(("images.kafka", images.kafka))
    monitoring = MonitoringConfig.model_validate(config.get("elasticctr:monitoring") or {})
    if monitoring.prometheus == "in-cluster":
        named.append(("images.prometheus", images.prometheus))
    for key, reference in named:
        recipe = recipe_for(recipes, reference)
        if recipe is None or recipe.reference != normalise(reference):
            built = recipe.reference if recipe else "nothing"
            problems.append(f"{key} is {reference}, the image built here is {built}")
    volcano = VolcanoConfig.model_validate(config.get("elasticctr:volcano") or {})
    if not volcano.managed and volcano.image_registry != STANDIN_PREFIX:
        problems.append(
            f"volcano.image_registry is {volcano.image_registry}, the images built here are "
            f"under {STANDIN_PREFIX}"
        )
    if problems:
        raise StackImagesError(f"stack {stack}: " + "; ".join(problems))
