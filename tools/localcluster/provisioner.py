"""The local cluster's volume provisioner: a PersistentVolumeClaim of the `local-path`
StorageClass gets a host directory under the cluster's volumes dir as a hostPath
PersistentVolume bound to it; a released volume's directory and PV are deleted.

Runs as a host process of the node (`python -m tools.localcluster.provisioner`), started and
stopped by tools/localcluster/cluster.py; one node only, as hostPath volumes are.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tools.localcluster.addons import PROVISIONER, STORAGE_CLASS
from tools.localcluster.api import Api

ANNOTATION = "pv.kubernetes.io/provisioned-by"
CERT = "provisioner"  # its client certificate in the cluster's PKI (user PROVISIONER_USER)


def provision(api: Api, volumes: Path, claim: dict[str, Any]) -> str | None:
    """A PV for a pending claim of our class; returns its name (None if not ours)."""
    meta, spec = claim["metadata"], claim["spec"]
    if spec.get("storageClassName") != STORAGE_CLASS or spec.get("volumeName"):
        return None
    if claim.get("status", {}).get("phase") != "Pending":
        return None
    name = f"pvc-{meta['uid']}"
    directory = volumes / f"{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"
    directory.mkdir(parents=True, exist_ok=True)
    # Any pod user may write, as with Rancher's local-path provisioner: a hostPath volume
    # gets no fsGroup ownership change.
    directory.chmod(0o777)
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {ANNOTATION: PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": spec.get("accessModes", ["ReadWriteOnce"]),
            "volumeMode": spec.get("volumeMode", "Filesystem"),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": STORAGE_CLASS,
            "hostPath": {"path": str(directory), "type": "Directory"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }
    status, body = api.request("POST", "/api/v1/persistentvolumes", volume)
    if status not in (201, 409):
        raise RuntimeError(f"create PV {name}: HTTP {status}: {body.get('message')}")
    return name


def reclaim(api: Api, volumes: Path, volume: dict[str, Any]) -> bool:
    """Delete a released volume of ours and its directory; True if it did."""
    meta, spec = volume["metadata"], volume["spec"]
    if meta.get("annotations", {}).get(ANNOTATION) != PROVISIONER:
        return False
    if volume.get("status", {}).get("phase") != "Released":
        return False
    if spec.get("persistentVolumeReclaimPolicy") != "Delete":
        return False
    path = Path(spec["hostPath"]["path"])
    if path.parent == volumes:  # never outside our volumes dir
        shutil.rmtree(path, ignore_errors=True)
    api.request("DELETE", f"/api/v1/persistentvolumes/{meta['name']}")
    return True


def run(api: Api, volumes: Path, interval: float) -> None:
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    print(f"watching claims of class {STORAGE_CLASS}; volumes in {volumes}", flush=True)
    while not stop:
        try:
            for claim in api.get("/api/v1/persistentvolumeclaims")["items"]:
                if name := provision(api, volumes, claim):
                    print(f"provisioned {name} for {claim['metadata']['namespace']}/"
                          f"{claim['metadata']['name']}", flush=True)  # fmt: skip
            for volume in api.get("/api/v1/persistentvolumes")["items"]:
                if reclaim(api, volumes, volume):
                    print(f"deleted {volume['metadata']['name']}", flush=True)
        except (OSError, RuntimeError) as e:  # API restarting: try again next round
            print(f"provisioner: {e}", file=sys.stderr, flush=True)
        time.sleep(interval)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True)
    parser.add_argument("--pki", required=True, type=Path)
    parser.add_argument("--volumes", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    args.volumes.mkdir(parents=True, exist_ok=True)
    run(Api(args.server, args.pki, CERT), args.volumes.resolve(), args.interval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
