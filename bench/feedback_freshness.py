"""Freshness of the feedback loop in pods: from a partition's donefile to serving on a
version trained on it, on the local stack with N-minute partitions (docs/feedback.md);
with `--drift-at`, also the served model's recovery when the simulator's truth drifts.

    sudo -E .venv/bin/python bench/feedback_freshness.py                 # 5-minute partitions
    sudo -E .venv/bin/python bench/feedback_freshness.py --minutes 5 --seconds 1500 \
        --json /tmp/freshness.json
    sudo -E .venv/bin/python bench/feedback_freshness.py --minutes 1 --seconds 600 \
        --qps 8 --batch 8 --drift-at 240 --bar 120                   # recovery after a drift
    sudo -E .venv/bin/python bench/feedback_freshness.py --minutes 1 --seconds 240 \
        --qps 4 --batch 8 --drift-at 30                              # CI's phase 7

Runs the lifecycle's phases 1-3 and 7 (tests/lifecycle: data in, the offline job, roll-out,
then the feedback loop with the online Job, the joiner's and Kafka's pods deleted early on)
on the cluster session's local stack, with the partitions and the simulator's traffic set
here, and prints each partition's freshness and the median, and the AUC of each served
version on the traffic it served against the Bayes AUC of that traffic. Exit 1 when the
median is over `--bar` seconds (the issue's 2 minutes) or the phases fail. Needs root, as
the cluster tests do, and `tools/setup.sh` done; takes the minutes of traffic plus about
20.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PHASES = "test_1_ or test_2_ or test_3_ or test_7_"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=5, help="the partitions' length")
    parser.add_argument(
        "--seconds", type=int, default=1500, help="the simulator's traffic (several partitions)"
    )
    parser.add_argument("--bar", type=float, default=120.0, help="median seconds allowed")
    parser.add_argument("--json", type=Path, help="write the lifecycle's report here")
    parser.add_argument("--qps", type=float, default=4.0, help="the simulator's requests a second")
    parser.add_argument("--batch", type=int, default=4, help="instances a request")
    parser.add_argument(
        "--drift-at", type=float, help="seconds into the traffic the simulator's truth drifts"
    )
    args = parser.parse_args(argv)
    if args.seconds < 3 * 60 * args.minutes:
        parser.error(
            f"--seconds {args.seconds}: give at least 3 partitions of traffic "
            f"({3 * 60 * args.minutes} s for {args.minutes}-minute partitions)"
        )
    with tempfile.TemporaryDirectory(prefix="elasticctr-freshness-") as tmp:
        report = args.json or Path(tmp) / "report.json"
        env = os.environ | {
            "ELASTICCTR_LIFECYCLE_FEEDBACK_MINUTES": str(args.minutes),
            "ELASTICCTR_LIFECYCLE_FEEDBACK_SECONDS": str(args.seconds),
            "ELASTICCTR_LIFECYCLE_FEEDBACK_QPS": str(args.qps),
            "ELASTICCTR_LIFECYCLE_FEEDBACK_BATCH": str(args.batch),
            "ELASTICCTR_LIFECYCLE_REPORT": str(report),
            "ELASTICCTR_E2E_REQUIRED": "1",
        }
        if args.drift_at is not None:
            env["ELASTICCTR_LIFECYCLE_FEEDBACK_DRIFT_AT"] = str(args.drift_at)
        tools_path = subprocess.run(
            ["bash", "tools/build-tools.sh", "--print-path"],
            cwd=REPO, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        env["PATH"] = os.pathsep.join([str(REPO / ".venv" / "bin"), env["PATH"], tools_path])
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-m", "cluster", "-p", "no:cacheprovider",
             "tests/lifecycle/test_lifecycle.py", "-k", PHASES],
            cwd=REPO, env=env, check=False,
        )  # fmt: skip
        if not report.exists():
            print(f"the lifecycle wrote no report (pytest exit {run.returncode})", file=sys.stderr)
            return 1
        all_figures = json.loads(report.read_text())["figures"]
        figures = all_figures.get("feedback freshness")
        served = all_figures.get("feedback in pods", {}).get("simulator", {}).get("versions", [])
        back = all_figures.get("recovery after the drift")
    if run.returncode != 0 or not figures:
        print(f"the lifecycle phases failed (pytest exit {run.returncode})", file=sys.stderr)
        return 1
    print(f"\n{args.minutes}-minute partitions, {args.seconds} s of traffic:")
    for row in figures["partitions"]:
        print(
            f"  {row['partition']}: version {row['version']} (served {row['served_version']})"
            f" {row['seconds']:.1f} s after the donefile"
        )
    print("\nAUC of each served version on the traffic it served (the simulator's record):")
    for line in quality_table(served):
        print(f"  {line}")
    if back:
        print(
            f"  the gap to the truth's ranking on the drifted traffic: version"
            f" {back['first']['version']} {back['first']['gap']:.3f}, version"
            f" {back['last']['version']} {back['last']['gap']:.3f}"
            f" (closed {back['gap_closed']:.3f})"
        )
    median = figures["median_seconds"]
    print(f"median {median:.1f} s (bar {args.bar:.0f} s)")
    return 0 if median <= args.bar else 1


def quality_table(versions: list[dict[str, Any]]) -> list[str]:
    """The simulator's rows (version, drifted, impressions, auc, bayes_auc, and both in
    expectation over the clicks) as lines, with the gap to Bayes and, after a drift, how
    many versions the served model took to come back to its AUC and within its gap before
    the drift (both weighted by impressions)."""
    lines: list[str] = []
    scored = [row for row in versions if "auc" in row]  # rows with clicks and non-clicks
    for row in scored:
        traffic = "after the drift" if row["drifted"] else "before"
        lines.append(
            f"version {row['version']:>3} {traffic:<15} {row['impressions']:>7} impressions"
            f"  AUC {row['auc']:.3f}  Bayes {row['bayes_auc']:.3f}"
            f"  gap {row['bayes_auc'] - row['auc']:.3f}"
            f"  (expected {row['expected_auc']:.3f}, gap"
            f" {row['bayes_expected_auc'] - row['expected_auc']:.3f})"
        )
    before = [row for row in scored if not row["drifted"]]
    after = [row for row in scored if row["drifted"]]
    if not before or not after:
        return lines
    weight = sum(row["impressions"] for row in before)
    auc = sum(row["auc"] * row["impressions"] for row in before) / weight
    gap = sum((row["bayes_auc"] - row["auc"]) * row["impressions"] for row in before) / weight
    lines.append(f"before the drift: AUC {auc:.3f}, gap to Bayes {gap:.3f}")
    first = after[0]["version"]  # the version serving when the truth drifted
    for what, back in (
        (f"the AUC back to {auc:.3f}", [row for row in after if row["auc"] >= auc]),
        (f"within the gap {gap:.3f}", [r for r in after if r["bayes_auc"] - r["auc"] <= gap]),
    ):
        lines.append(
            f"{what}: {back[0]['version'] - first} versions after the one serving at the drift"
            if back
            else f"{what}: not in this run"
        )
    return lines


if __name__ == "__main__":
    sys.exit(main())
