"""CustomResourceDefinitions from YAML files, served by a control plane
(tools/localcluster/controlplane.py): the e2e tests' Volcano CRDs, the simulated cluster's,
and the Prometheus Operator's (a stack with monitoring.operator makes its objects), taken
from its Go module."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import yaml

from tools.localcluster.controlplane import ControlPlane, ControlPlaneError
from tools.localcluster.settings import CACHE

# The Prometheus Operator's CRDs of the objects a stack makes (PodMonitor, PrometheusRule),
# from the repository at the tag (the Go proxy serves it whole, checksum-verified).
OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
OPERATOR_VERSION = "v0.85.0"
OPERATOR_CRD_DIR = "example/prometheus-operator-crd"
OPERATOR_CRDS = {
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
}


def module_files(
    module: str, version: str, directory: str, files: Iterable[str], dest: Path
) -> str | None:
    """Copy `files` of `directory` in the Go module `module@version` into `dest`; None, or
    what failed."""
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        return "go is not installed"
    dest.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            [go, "mod", "download", "-json", f"{module}@{version}"],
            capture_output=True, text=True, timeout=600, cwd=dest,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if done.returncode != 0:
        return (done.stdout + done.stderr).strip()[-500:]
    source = Path(json.loads(done.stdout)["Dir"]) / directory
    for name in files:
        if not (source / name).is_file():
            return f"{source / name} is not in the module"
        shutil.copyfile(source / name, dest / name)
    return None


def operator_crd_dir() -> Path:
    """A directory of the Prometheus Operator's CRD files, fetched once into the cache."""
    cache = CACHE / f"prometheus-operator-crds-{OPERATOR_VERSION}"
    if all((cache / f).is_file() for f in OPERATOR_CRDS.values()):
        return cache
    error = module_files(
        OPERATOR_MODULE, OPERATOR_VERSION, OPERATOR_CRD_DIR, OPERATOR_CRDS.values(), cache
    )
    if error is not None:
        raise ControlPlaneError(f"the Prometheus Operator's CRDs: {OPERATOR_MODULE}: {error}")
    return cache


def apply_crds(cp: ControlPlane, dirs: Iterable[Path | str], timeout: float = 60.0) -> list[str]:
    """Create the CRDs found in the YAML files of `dirs`; wait until Established and served."""
    crds = []
    for d in dirs:
        files = sorted(p for p in Path(d).iterdir() if p.suffix in (".yaml", ".yml"))
        if not files:
            raise ControlPlaneError(f"no CRD YAML files in {d}")
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    crds.append(doc)
    base = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    for crd in crds:
        status, resp = cp.request("POST", base, crd)
        if status == 409:  # already there: replace it with this definition
            _, current = cp.request("GET", f"{base}/{crd['metadata']['name']}")
            crd = {
                **crd,
                "metadata": {
                    **crd["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                },
            }
            status, resp = cp.request("PUT", f"{base}/{crd['metadata']['name']}", crd)
        if status not in (200, 201):
            raise ControlPlaneError(
                f"CRD {crd['metadata']['name']}: HTTP {status}: {resp.get('message')}"
            )
    deadline = time.monotonic() + timeout
    names = [c["metadata"]["name"] for c in crds]
    for crd in crds:
        name, group = crd["metadata"]["name"], crd["spec"]["group"]
        plural = crd["spec"]["names"]["plural"]
        versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served", True)]
        while True:
            _, cur = cp.request("GET", f"{base}/{name}")
            conds = {
                c["type"]: c["status"] for c in (cur.get("status") or {}).get("conditions") or []
            }
            served = conds.get("Established") == "True" and all(
                plural
                in [
                    r["name"]
                    for r in cp.request("GET", f"/apis/{group}/{v}")[1].get("resources", [])
                ]
                for v in versions
            )
            if served:
                break
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRD {name} not Established after {timeout:.0f}s: {conds}")
            time.sleep(0.2)
    return names
