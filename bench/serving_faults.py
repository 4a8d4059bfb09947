#!/usr/bin/env python3
"""Failed requests while cube loses a replica, switches versions fast, and rolls back every
second (what replicas and fast switches must survive), measured under load on loopback.

    .venv/bin/python bench/serving_faults.py [--replicas 2] [--down-seconds 10]
        [--rollbacks 60] [--deltas 60] [--no-drain]
        [--scenarios replica-down,fast-switches,rollbacks,deltas]

Real processes, from the tests' helpers: 3 cube shards of `--replicas` servers (plus their
agents) and a transfer, one serving process, synthetic model versions 1-4. A bounded load
loop (tests' `Load`: 4 client threads, requests of 1-16 instances, every answer checked
against what its version computes with numpy) runs through each scenario:

- replica-down: SIGKILL one cube-server of shard 1 (with one replica: the shard), count
  the requests of the next `--down-seconds`, then restart it (its agent restores it);
- fast-switches: three versions announced within 1.3 s; counted until serving has the
  last one and 2 s more;
- rollbacks: `--rollbacks` rollbacks asked at one per second (kept versions in turn; a
  409 while one is under way counts as not accepted), counted until serving follows;
- deltas: `--deltas` delta versions (each on the one before: 2% of the keys changed, 0.5%
  deleted) announced at one per second, then a rollback to the newest kept version older
  than the committed version's base (across a compaction: cube.base_every is 10), counted
  until serving follows it.

Prints, per scenario, requests answered, failed, and the failure share. Every process is
stopped by PID at the end.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.serving import Load

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)] + [str(REPO / "images" / p) for p in ("serving", "cube", "common")]


def counts(load: Load) -> tuple[int, int]:
    return load.answered(), len(load.errors)


def window(load: Load, before: tuple[int, int]) -> dict[str, float]:
    answered, failed = (now - then for now, then in zip(counts(load), before, strict=True))
    total = answered + failed
    return {"answered": answered, "failed": failed, "share": failed / total if total else 0.0}


def deltas(cluster: Any, stack: Any, load: Load, last: int) -> dict[str, Any]:
    """Delta versions 5..last at one per second, then a rollback across a compaction."""
    import json

    from elasticctr_common.storage import open_store
    from elasticctr_common.versions import Version, append_version, read_versions

    models = open_store(f"file://{cluster.model_dir}")
    for version in range(2, 5):  # the bases, unless fast-switches announced them
        if version not in {v.id for v in read_versions(models)}:
            append_version(models, Version(version, version, models.uri(f"{version}/sparse")))
    stack.serving.wait_version(4, 120)
    before = counts(load)
    started = len(cluster.history())
    for version in range(5, last + 1):
        line = Version(version, version, models.uri(f"{version}/sparse"), parent=version - 1)
        append_version(models, line)
        time.sleep(1.0)
    stack.serving.wait_version(last, 300)
    committed = [h for h in cluster.history()[started:] if h["result"] == "committed"]

    def manifest(version: int) -> dict[str, Any]:
        path = cluster.versions_dir / str(version) / "manifest.json"
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded

    kept = [h["version"] for h in committed if (cluster.versions_dir / str(h["version"])).exists()]
    bases = [v for v in kept if manifest(v)["parent"] is None]
    base = manifest(last)["base"] or last
    target = max(v for v in cluster.transfer_status()["kept_versions"] if v < base)
    code, answer = cluster.rollback(target)
    assert code == 202, answer
    stack.serving.wait_version(target, 300)
    time.sleep(2)
    return {
        **window(load, before),
        "committed": len(committed),
        "bases": bases,
        "rollback": f"{last} (base {base}) -> {target} (base {manifest(target)['base']})",
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--down-seconds", type=float, default=10.0)
    p.add_argument("--rollbacks", type=int, default=60)
    p.add_argument("--deltas", type=int, default=60)
    p.add_argument("--scenarios", default="replica-down,fast-switches,rollbacks,deltas")
    p.add_argument(
        "--no-drain",
        action="store_true",
        help="the transfer drops versions still read (--reader-quiet 0): as before the drain",
    )
    args = p.parse_args()
    from elasticctr_cube.server import build_server
    from elasticctr_serving.native import build_parser

    from tests.support.make_model import default_spec, make_versions
    from tests.support.serving import (
        Load,
        Processes,
        announce,
        expected,
        probe_instances,
        start_stack,
    )

    build_server()
    build_parser()
    root = Path(tempfile.mkdtemp(prefix="serving-faults-"))
    procs = Processes(root)
    results = {}
    try:
        no_drain = ("--reader-quiet", "0") if args.no_drain else ()
        # Deltas: kept versions reach back past a compaction (rollback target).
        keep = ("--keep", "25") if "deltas" in args.scenarios.split(",") else ()
        stack = start_stack(
            procs, root, replicas=args.replicas, unload_after="60",
            transfer_args=(*no_drain, *keep),
        )  # fmt: skip
        cluster = stack.cluster
        last = 4 + (args.deltas if "deltas" in args.scenarios.split(",") else 0)
        spec = default_spec(cluster.model_dir, list(range(2, last + 1)), publish=False,
                            delta_after=4)  # fmt: skip
        make_versions(spec, timeout=1200)
        instances = probe_instances(spec, 200, seed=21)
        want = {v: expected(spec, v, instances) for v in range(1, last + 1)}
        load = Load(stack.serving.url, instances, want)
        try:
            load.wait_answers(100)
            scenarios = args.scenarios.split(",")
            if "replica-down" in scenarios:
                victim = cluster.name("server", 1, 0)
                before = counts(load)
                procs.kill(victim)
                time.sleep(args.down_seconds)
                results["replica-down"] = window(load, before)
                cluster.start_server(1, 0)
                stack.serving.wait_version(1, 60)
                time.sleep(5)  # its agent restores it; requests recover
            if "fast-switches" in scenarios:
                before = counts(load)
                for version in (2, 3, 4):
                    announce(cluster, version)
                    time.sleep(0.4)
                stack.serving.wait_version(4, 120)
                time.sleep(2)
                results["fast-switches"] = window(load, before)
            if "rollbacks" in scenarios:
                before = counts(load)
                accepted = 0
                targets = itertools.cycle((1, 2, 3, 4))
                for _ in range(args.rollbacks):
                    code, _ = cluster.rollback(next(targets))
                    accepted += code == 202
                    time.sleep(1.0)
                deadline = time.monotonic() + 120
                while cluster.transfer_status()["phase"] != "idle" and time.monotonic() < deadline:
                    time.sleep(0.2)
                stack.serving.wait_version(cluster.transfer_status()["committed"], 120)
                time.sleep(2)
                results["rollbacks"] = {**window(load, before), "accepted": accepted}
            if "deltas" in scenarios:
                results["deltas"] = deltas(cluster, stack, load, last)
        finally:
            load.finish()
    finally:
        procs.stop_all()
    print(f"replicas per shard: {args.replicas}{', no drain' if args.no_drain else ''}")
    for name, r in results.items():
        extra = f", rollbacks accepted {r['accepted']}/{args.rollbacks}" if "accepted" in r else ""
        if "committed" in r:
            extra = (f", {r['committed']} of {args.deltas} versions committed (bases among "
                     f"those kept: {r['bases']}), rollback {r['rollback']}")  # fmt: skip
        print(f"{name}: {r['answered']} answered, {r['failed']} failed ({r['share']:.1%}){extra}")
    if load.errors:
        print(f"first errors: {load.errors[:2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
