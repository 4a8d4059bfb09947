"""Volcano's CRDs (v1.15.0, the pinned chart) as data: for schema validation and for the
e2e API server. Taken from ../shared/schemas beside the clone, else from the release's Go
module (`go mod download volcano.sh/volcano@v1.15.0`: the Go proxy serves the whole
repository at the tag, checksum-verified), else from the release on GitHub; cached under
$ELASTICCTR_CACHE. The project does not carry a copy."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.pulumi_harness import ROOT
from tools.localcluster.crds import module_files
from tools.localcluster.settings import CACHE

VERSION = "v1.15.0"
FILES = (
    "batch.volcano.sh_jobs.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
    "scheduling.volcano.sh_queues.yaml",
)
MODULE = "volcano.sh/volcano"
CHART_CRDS = "installer/helm/chart/volcano/crd/bases"
RELEASE_URL = (
    "https://raw.githubusercontent.com/volcano-sh/volcano/{version}/" + CHART_CRDS + "/{file}"
)


class CrdsUnavailable(Exception):
    """Neither ../shared/schemas, the Go module nor the release could be read; the message
    says why."""


def crd_dir() -> Path:
    """A directory holding the CRD files: ../shared/schemas, else fetched into a cache."""
    shared = Path(
        os.environ.get(
            "ELASTICCTR_VOLCANO_CRDS", ROOT.parent / "shared" / "schemas" / f"volcano-{VERSION}"
        )
    )
    if all((shared / f).is_file() for f in FILES):
        return shared
    cache = CACHE / f"volcano-crds-{VERSION}"
    cache.mkdir(parents=True, exist_ok=True)
    if all((cache / f).is_file() for f in FILES):
        return cache
    module_error = _from_go_module(cache)
    if module_error is None:
        return cache
    for name in FILES:
        url = RELEASE_URL.format(version=VERSION, file=name)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                (cache / name).write_bytes(response.read())
        except OSError as err:
            raise CrdsUnavailable(
                f"no {shared}; {MODULE}@{VERSION} from the Go proxy: {module_error}; "
                f"{url} unreachable ({err})"
            ) from err
    return cache


def _from_go_module(cache: Path) -> str | None:
    """Copy the CRDs out of the release's Go module into `cache`; None, or what failed."""
    return module_files(MODULE, VERSION, CHART_CRDS, FILES, cache)


def openapi_schema(file: str, version: str = "v1alpha1") -> dict[str, Any]:
    crd = yaml.safe_load((crd_dir() / file).read_text(encoding="utf-8"))
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return dict(served["schema"]["openAPIV3Schema"])


def closed(schema: Any) -> Any:
    """The schema with unknown fields rejected wherever it lists the known ones."""
    if isinstance(schema, dict):
        result = {k: closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            result["additionalProperties"] = False
        return result
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema
