"""The pipe command of Paddle's dataset: ElasticCTR lines on stdin -> MultiSlot lines on stdout.

Paddle runs it once per data file as `(<command>) < "<file>"`, so stdin is the file
itself and `/proc/self/fd/0` names it. Bad lines are skipped; at the end a JSON report
for that file goes into `--report-dir` for the trainer to aggregate.

    python -m elasticctr_trainer.pipe --slot-conf slot.conf --sparse-dim N --report-dir DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections import Counter

from elasticctr_common.slotconf import read_slot_conf

from .lines import BadLine, LineParser, multislot_line

FIRST_BAD_KEPT = 5


def stdin_name() -> str:
    try:
        return os.readlink("/proc/self/fd/0")
    except OSError:
        return "<stdin>"


def convert(lines, parser: LineParser, out) -> dict:
    """Write converted lines to `out`; return the report counts for this input."""
    total = 0
    reasons: Counter[str] = Counter()
    first_bad: list[list] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        total += 1
        try:
            example = parser.parse(line)
        except BadLine as bad:
            reasons[bad.reason] += 1
            if len(first_bad) < FIRST_BAD_KEPT:
                first_bad.append([number, str(bad)])
            continue
        out.write(multislot_line(example))
        out.write("\n")
    return {
        "lines": total,
        "bad": sum(reasons.values()),
        "reasons": dict(reasons),
        "first_bad": first_bad,
    }


def main(argv: list[str] | None = None) -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--slot-conf", required=True)
    args.add_argument("--sparse-dim", type=int, required=True)
    args.add_argument("--report-dir", required=True)
    opts = args.parse_args(argv)
    parser = LineParser(read_slot_conf(opts.slot_conf), opts.sparse_dim)
    report = {"path": stdin_name()}
    with (
        open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False) as stdin,
        open(sys.stdout.fileno(), "w", encoding="utf-8", buffering=1 << 20, closefd=False) as out,
    ):
        report.update(convert(stdin, parser, out))
    os.makedirs(opts.report_dir, exist_ok=True)
    tmp = os.path.join(opts.report_dir, f".{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(tmp, os.path.join(opts.report_dir, f"{uuid.uuid4().hex}.json"))


if __name__ == "__main__":
    main()
