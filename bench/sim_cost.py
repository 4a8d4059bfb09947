"""The Pulumi program's own cost against the size of the stack: wall time and peak memory
of `pulumi preview` and `pulumi up` (the engine, the Python program and the Kubernetes
provider together) for a prod stack at several shard and trainer counts, each on a fresh
simulated cluster (tools/localcluster/simulated.py), all in one run.

    python bench/sim_cost.py                          # baidu-prod, the sizes below
    python bench/sim_cost.py --shards 8 64 --trainers 10 --json out.json

docs/simulated-cluster.md has the table and what it shows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support import simulated
from tools.localcluster.simulated import NodePool, SimulatedCluster

PAGE = os.sysconf("SC_PAGE_SIZE")
# Room for the largest sizes measured (300 trainers, 128 x 2 shards).
POOLS = [NodePool("training", 40, "64", "256Gi"), NodePool("serving", 30, "96", "384Gi")]
SHARDS = (8, 32, 64, 128)
TRAINERS = (10, 100, 300)


@dataclass
class Cost:
    trainers: int
    pservers: int
    cube_shards: int
    resources: int
    preview_seconds: float
    preview_peak_mib: float
    up_seconds: float
    up_peak_mib: float
    # The same `up` on a fresh cluster with the engine's intermediate checkpoints off
    # (PULUMI_SKIP_CHECKPOINTS=true); 0 when not measured.
    up_seconds_without_checkpoints: float = 0.0


class SessionMemory(simulated.Sampler):
    """Peak resident memory of every process in the session of a `pulumi` command (the
    CLI starts its own session: tests/support/pulumi_cli.py)."""

    interval = 0.1

    def __init__(self) -> None:
        super().__init__()
        self.peak = 0

    def sample(self) -> None:
        by_session: dict[int, int] = {}
        leaders = set()
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                resident = int(Path(entry.path, "statm").read_text().split()[1]) * PAGE
            except OSError:
                continue  # gone meanwhile
            comm = stat[stat.index("(") + 1 : stat.rindex(")")]
            session = int(stat.rsplit(")", 1)[1].split()[3])
            by_session[session] = by_session.get(session, 0) + resident
            if comm == "pulumi" and session == int(entry.name):
                leaders.add(session)
        self.peak = max(self.peak, sum(by_session[s] for s in leaders))


def measure(stack: str, sizes: simulated.Sizes, without_checkpoints: bool) -> Cost:
    with SimulatedCluster(POOLS, zones=3) as sim, simulated.stack_on(sim, stack, sizes) as project:
        with SessionMemory() as preview_memory:
            preview = project.run("preview")
        with SessionMemory() as up_memory:
            up = project.up()
        resources = len(project.export()["deployment"]["resources"])
    cost = Cost(
        sizes.trainers, sizes.pservers, sizes.cube_shards, resources,
        preview.seconds, preview_memory.peak / 2**20, up.seconds, up_memory.peak / 2**20,
    )  # fmt: skip
    if without_checkpoints:
        with (
            SimulatedCluster(POOLS, zones=3) as sim,
            simulated.stack_on(sim, stack, sizes) as project,
        ):
            project.env["PULUMI_SKIP_CHECKPOINTS"] = "true"
            cost.up_seconds_without_checkpoints = project.up().seconds
    simulated.log(f"{cost}")
    return cost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="baidu-prod")
    parser.add_argument("--shards", type=int, nargs="*", default=list(SHARDS))
    parser.add_argument("--trainers", type=int, nargs="*", default=list(TRAINERS))
    parser.add_argument(
        "--without-checkpoints",
        action="store_true",
        help="also time each `up` with PULUMI_SKIP_CHECKPOINTS=true, on a fresh cluster",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    # Shards at the fewest trainers, then trainers at the fewest shards (pservers: 1 per 5).
    sizes = [simulated.Sizes(min(args.trainers), 2, s) for s in args.shards]
    sizes += [simulated.Sizes(t, max(2, t // 5), min(args.shards)) for t in args.trainers]
    seen: set[simulated.Sizes] = set()
    costs = []
    for size in sizes:
        if size not in seen:
            seen.add(size)
            costs.append(measure(args.stack, size, args.without_checkpoints))
    rows = [asdict(c) for c in costs]
    print(json.dumps(rows, indent=2))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    print(
        "| trainers | pservers | shards x 2 | resources | preview s | preview MiB | up s | up MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for c in costs:
        print(f"| {c.trainers} | {c.pservers} | {c.cube_shards} | {c.resources} | "
              f"{c.preview_seconds:.0f} | {c.preview_peak_mib:.0f} | {c.up_seconds:.0f} | "
              f"{c.up_peak_mib:.0f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
