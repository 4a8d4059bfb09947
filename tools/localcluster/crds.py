"""CustomResourceDefinitions from YAML files, served by a control plane
(tools/localcluster/controlplane.py): the e2e tests' Volcano CRDs, the simulated cluster's."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import yaml

from tools.localcluster.controlplane import ControlPlane, ControlPlaneError


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
