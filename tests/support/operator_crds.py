"""The Prometheus Operator's CRDs (PodMonitor, PrometheusRule) as schemas, from its Go
module (`go mod download github.com/prometheus-operator/prometheus-operator@v0.85.0`, the
repository at the tag, checksum-verified), cached under $ELASTICCTR_CACHE."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from tests.support.volcano_crds import CrdsUnavailable, _from_go_module, closed

MODULE = "github.com/prometheus-operator/prometheus-operator"
VERSION = "v0.85.0"
DIRECTORY = "example/prometheus-operator-crd"
FILES = {
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


def crd_dir() -> Path:
    cache = (
        Path(os.environ.get("ELASTICCTR_CACHE", Path.home() / ".cache" / "elasticctr"))
        / f"prometheus-operator-crds-{VERSION}"
    )
    cache.mkdir(parents=True, exist_ok=True)
    files = tuple(FILES.values())
    if all((cache / f).is_file() for f in files):
        return cache
    error = _from_go_module(cache, MODULE, VERSION, DIRECTORY, files)
    if error is not None:
        raise CrdsUnavailable(f"{MODULE}@{VERSION} from the Go proxy: {error}")
    return cache


def schema(kind: str) -> dict[str, Any]:
    """The served v1 schema of `kind`, unknown fields rejected (raises CrdsUnavailable)."""
    crd = yaml.safe_load((crd_dir() / FILES[kind]).read_text(encoding="utf-8"))
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return dict(closed(served["schema"]["openAPIV3Schema"]))
