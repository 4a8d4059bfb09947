#!/usr/bin/env python3
"""The local one-node Kubernetes (tools/localcluster; docs/local-cluster.md).

    sudo .venv/bin/python tools/cluster.py up [--images] [--dir DIR]   # prints the kubeconfig
    sudo .venv/bin/python tools/cluster.py status [--dir DIR]
    sudo .venv/bin/python tools/cluster.py down [--dir DIR]

`up` is idempotent; one cluster per machine (a lock); `down` stops every process by PID and
restores what the node changed on the host.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.localcluster.cluster import ClusterError, LocalCluster  # noqa: E402
from tools.localcluster.settings import DEFAULT_DIR, Layout  # noqa: E402


def load_images(socket: Path) -> None:
    """Every image of the local stack, built (or taken from the cache) and imported."""
    subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "images.py"),
            "import",
            "--stack",
            "local",
            "--address",
            str(socket),
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"default {DEFAULT_DIR}")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start (or find running); print the kubeconfig path")
    up.add_argument("--node-ip", help="the node's address (default: the default route's)")
    up.add_argument("--images", action="store_true", help="build and import the images")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds per part")
    sub.add_parser("down", help="stop everything, restore the host")
    status = sub.add_parser("status", help="is it up and healthy (exit 0), down (1), broken (2)")
    status.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    cluster = LocalCluster(Layout.at(args.dir), getattr(args, "node_ip", None))
    log = lambda message: print(message, file=sys.stderr)  # noqa: E731
    try:
        if args.command == "up":
            state = cluster.up(load_images if args.images else None, args.timeout, say=log)
            print(state.kubeconfig)
            return 0
        if args.command == "down":
            return 1 if cluster.down(say=log) else 0
        report = cluster.status()
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            for key, value in report.items():
                print(f"{key}: {value}")
        return 0 if report["healthy"] else (2 if report["up"] else 1)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
