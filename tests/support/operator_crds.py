"""The Prometheus Operator's CRDs (PodMonitor, PrometheusRule) as schemas
(tools/localcluster/crds.py fetches them from the operator's Go module into the cache)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.support.volcano_crds import CrdsUnavailable, closed
from tools.localcluster.controlplane import ControlPlaneError
from tools.localcluster.crds import OPERATOR_CRDS, operator_crd_dir

FILES = OPERATOR_CRDS


def schema(kind: str) -> dict[str, Any]:
    """The served v1 schema of `kind`, unknown fields rejected (raises CrdsUnavailable)."""
    try:
        directory = operator_crd_dir()
    except ControlPlaneError as err:
        raise CrdsUnavailable(str(err)) from err
    crd = yaml.safe_load((directory / FILES[kind]).read_text(encoding="utf-8"))
    served = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return dict(closed(served["schema"]["openAPIV3Schema"]))
