"""The end-to-end tests' control plane: the local cluster's (tools/localcluster/controlplane.py)
on loopback with no node, CustomResourceDefinitions registered from YAML files, and a CLI
for a control plane that outlives the test process (stacks/Pulumi.ci.yaml)::

    python -m tests.support.controlplane up --dir D [--crds DIR]...   # prints the kubeconfig
    python -m tests.support.controlplane down --dir D
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tools.localcluster.controlplane import (
    STATE_FILE,
    ControlPlane,
    ControlPlaneError,
    stop_detached,
)
from tools.localcluster.crds import apply_crds


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
    try:
        stop_detached(Path(args.dir), keep_dir=args.keep_dir)
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
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
