"""Volcano's v1.15.0 Helm chart, read from the Go module volcano.sh/volcano in the module
cache (`go mod download`), never copied into this repository: which images its templates
run, and the admission-init script its webhook image carries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from tools.imagekit import gomodule

VERSION = "1.15.0"
MODULE = "volcano.sh/volcano"
CHART = Path("installer/helm/chart/volcano")
ADMISSION_SCRIPT = Path("installer/dockerfile/webhook-manager/gen-admission-secret.sh")
# stand-in name -> the chart's values key (basic.<key>_image_name, <key>_image_tag_version)
COMPONENTS = {
    "vc-scheduler": "scheduler",
    "vc-controller-manager": "controller",
    "vc-webhook-manager": "admission",
}


class ChartUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class ChartImage:
    name: str  # e.g. volcanosh/vc-scheduler
    tag: str  # e.g. v1.15.0
    registry: str  # e.g. docker.io

    @property
    def upstream(self) -> str:
        return f"{self.registry}/{self.name}:{self.tag}"


def module_dir() -> Path:
    """The module's directory in the Go module cache (downloaded once)."""
    try:
        directory = gomodule.module_dir(MODULE, f"v{VERSION}")
    except gomodule.ModuleUnavailable as why:
        raise ChartUnavailable(str(why)) from why
    if not (directory / CHART / "values.yaml").is_file():
        raise ChartUnavailable(f"no chart in {directory / CHART}")
    return directory


def chart_images() -> dict[str, ChartImage]:
    """Stand-in name -> the image the chart's default values run for that component."""
    values = yaml.safe_load((module_dir() / CHART / "values.yaml").read_text())
    basic = values["basic"]
    images = {}
    for standin, key in COMPONENTS.items():
        tag = basic.get(f"{key}_image_tag_version") or basic["image_tag_version"]
        images[standin] = ChartImage(basic[f"{key}_image_name"], tag, basic["image_registry"])
    return images


def admission_script() -> Path:
    return module_dir() / ADMISSION_SCRIPT
