"""The pipe command of Paddle's dataset: example lines on stdin -> MultiSlot lines on stdout.

Paddle runs it once per data file as `(<command>) < "<file>"`, so stdin is the file
itself and `/proc/self/fd/0` names it. gzip, bzip2, xz and zstd data is decompressed first,
known by its first bytes (elasticctr_common.datafiles). Bad lines are skipped; at the end a
JSON report for that file goes into `--report-dir` for the trainer to aggregate.

A file that is not lines of text (binary, not UTF-8, a refused format, compressed data that
breaks off or is damaged) is *failed*: the pipe stops converting at the first sign of it,
keeps the counts of the lines before and says why in the report (`failed`); the trainer
counts it as a bad file. So is a file on which the pipe itself failed (the report is
written, then the error raised), and a file without a report (the pipe was killed).

    python -m elasticctr_trainer.pipe --slot-conf slot.conf --sparse-dim N --report-dir DIR
        [--format elasticctr|paddlerec] [--dense NAME:DIM ...] [--cross A:B ...]

Where `ELASTICCTR_PIPE_BIN` names the native pipe (images/trainer/pipe, installed by the
image), the trainer runs that instead: same rules, same output, same report, ~0.09 of the
CPU (docs/trainer.md, "Data").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import IO, Any, BinaryIO

from elasticctr_common.cargo import cargo_build
from elasticctr_common.datafiles import BadFile, data_lines
from elasticctr_common.lines import DenseFeature, LineFormat, parse_int
from elasticctr_common.slotconf import read_slot_conf

from .lines import BadLine, LineParser, is_blank

FIRST_BAD_KEPT = 5
NATIVE_PIPE_ENV = "ELASTICCTR_PIPE_BIN"
NATIVE_PIPE_DIR = Path(__file__).resolve().parents[1] / "pipe"


def build_native_pipe(offline: bool = False) -> Path:
    """`cargo build --release --locked` of the native pipe, for tests and local runs."""
    return cargo_build(NATIVE_PIPE_DIR, "elasticctr-pipe", "the native dataset pipe", offline)


def native_pipe() -> str | None:
    """The native pipe's path when `ELASTICCTR_PIPE_BIN` names one, else None."""
    path = os.environ.get(NATIVE_PIPE_ENV, "")
    if not path:
        return None
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{NATIVE_PIPE_ENV}={path}: no executable file there")
    return path


def stdin_name() -> str:
    try:
        return os.readlink("/proc/self/fd/0")
    except OSError:
        return "<stdin>"


def convert(stream: BinaryIO, parser: LineParser, out: IO[str]) -> dict[str, Any]:
    """Write converted lines of the data file `stream` to `out`; return the report counts
    for it. `failed` is None, or why it is a bad file (the lines before that were read)."""
    total = 0
    reasons: Counter[str] = Counter()
    first_bad: list[list[Any]] = []
    failed = None
    try:
        for number, line in data_lines(stream):
            if is_blank(line):
                continue
            total += 1
            try:
                example = parser.parse(line)
            except BadLine as bad:
                reasons[bad.reason] += 1
                if len(first_bad) < FIRST_BAD_KEPT:
                    first_bad.append([number, str(bad)])
                continue
            out.write(parser.multislot(example))
            out.write("\n")
    except BadFile as err:
        failed = str(err)
        if err.__cause__:  # the decoder's own words, for the log
            print(f"elasticctr_trainer.pipe: {err.__cause__}", file=sys.stderr)
    return {
        "lines": total,
        "bad": sum(reasons.values()),
        "reasons": dict(reasons),
        "first_bad": first_bad,
        "failed": failed,
    }


def write_report(report_dir: str, report: dict[str, Any]) -> None:
    os.makedirs(report_dir, exist_ok=True)
    tmp = os.path.join(report_dir, f".{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(report, f)
    os.replace(tmp, os.path.join(report_dir, f"{uuid.uuid4().hex}.json"))


def main(argv: list[str] | None = None) -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--slot-conf", required=True)
    args.add_argument("--sparse-dim", type=int, required=True)
    args.add_argument("--report-dir", required=True)
    args.add_argument("--format", default="elasticctr", help="elasticctr or paddlerec")
    args.add_argument(
        "--dense", action="append", default=[], metavar="NAME:DIM", help="a dense feature"
    )
    args.add_argument(
        "--cross", action="append", default=[], metavar="A:B", help="a cross of two slots"
    )
    opts = args.parse_args(argv)
    report: dict[str, Any] = {"path": stdin_name()}
    try:
        dense = [DenseFeature(n, int(d)) for n, _, d in (f.rpartition(":") for f in opts.dense)]
        form = LineFormat(opts.format, tuple(dense))
        crosses = [[parse_int(s) for s in cross.split(":", 1)] for cross in opts.cross]
        parser = LineParser(read_slot_conf(opts.slot_conf), opts.sparse_dim, form, crosses)
        stdin = open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
        out = open(sys.stdout.fileno(), "w", encoding="utf-8", buffering=1 << 20, closefd=False)  # noqa: SIM115
        with stdin, out:
            report.update(convert(stdin, parser, out))
    except BaseException as err:
        report.update(lines=0, bad=0, reasons={}, first_bad=[])
        report["failed"] = f"the pipe command failed: {type(err).__name__}: {err}"
        write_report(opts.report_dir, report)
        raise
    write_report(opts.report_dir, report)


if __name__ == "__main__":
    main()
