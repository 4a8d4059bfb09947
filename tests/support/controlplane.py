"""The end-to-end tests' control plane: the local cluster's (tools/localcluster/controlplane.py)
on loopback with no node, CustomResourceDefinitions registered from YAML files, and a CLI
for a control plane that outlives the test process (stacks/Pulumi.ci.yaml)::

    python -m tests.support.controlplane up --dir D [--crds DIR]...   # prints the kubeconfig
    python -m tests.support.controlplane down --dir D
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from tools.localcluster.controlplane import (
    STATE_FILE,
    ControlPlane,
    ControlPlaneError,
    terminate_pids,
)


def start(crd_dirs: Sequence[Path | str] = (), **settings: Any) -> ControlPlane:
    """A started ControlPlane(**settings) with the CRDs of `crd_dirs` served (stopped again,
    the error raised, if they cannot be)."""
    cp = ControlPlane(**settings).start()
    try:
        if crd_dirs:
            apply_crds(cp, crd_dirs)
    except BaseException:
        cp.stop()
        raise
    return cp


@contextlib.contextmanager
def api_client(cp: ControlPlane) -> Iterator[Any]:
    """A `kubernetes` package API client of `cp` as its admin, closed after."""
    import kubernetes  # only the e2e tests need it: imported here, not by the CLI

    api = kubernetes.config.new_client_from_config(config_file=str(cp.kubeconfig))
    try:
        yield api
    finally:
        api.close()


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


# ---- CLI ---------------------------------------------------------------------
def _cmd_up(args: argparse.Namespace) -> int:
    try:
        cp = start(
            args.crds,
            workdir=args.dir,
            controllers=not args.no_controllers,
            start_timeout=args.timeout,
            keep_workdir=True,
            detach=True,
        )
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    assert cp.dir is not None  # set by start()
    print(cp.kubeconfig)
    print(
        f"servers: {', '.join(f'{n} (pid {p})' for n, p in cp.pids.items())}; "
        f"state: {cp.dir / STATE_FILE}",
        file=sys.stderr,
    )
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    state_file = d / STATE_FILE
    if not state_file.exists():
        print(f"error: no {STATE_FILE} in {d}: nothing started there", file=sys.stderr)
        return 1
    state = json.loads(state_file.read_text())
    procs = [
        {"pid": p["pid"], "exe": p["exe"], "marker": str(d)} for p in reversed(state["processes"])
    ]
    left = terminate_pids(procs)
    if left:
        print(f"error: still alive: {left}", file=sys.stderr)
        return 1
    if not args.keep_dir:
        shutil.rmtree(d, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A throwaway Kubernetes control plane")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start; print the admin kubeconfig path")
    up.add_argument("--dir", required=True, help="state dir (created; must be empty)")
    up.add_argument(
        "--crds",
        action="append",
        default=[],
        metavar="DIR",
        help="register the CRD YAML files of DIR (repeatable)",
    )
    up.add_argument(
        "--no-controllers",
        action="store_true",
        help="do not start kube-controller-manager and kube-scheduler",
    )
    up.add_argument(
        "--timeout", type=float, default=120.0, help="seconds each server may take to be ready"
    )
    down = sub.add_parser("down", help="stop the servers started in --dir and remove it")
    down.add_argument("--dir", required=True)
    down.add_argument("--keep-dir", action="store_true", help="keep certs, data and logs")
    args = parser.parse_args(argv)
    return _cmd_up(args) if args.command == "up" else _cmd_down(args)


if __name__ == "__main__":
    sys.exit(main())
