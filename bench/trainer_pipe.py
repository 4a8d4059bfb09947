"""The trainer's dataset pipe: the native one (images/trainer/pipe) against the Python one
(elasticctr_trainer.pipe), in turn on the same file, CPU seconds and wall per 100,000 lines.

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/trainer_pipe.py [--quick]

Lines as the benchmarks' jobs train on (26 slots, 1-3 raw 64-bit feasigns each, 1% bad
lines); the pipe runs as Paddle runs it, `(cmd) < file`, output to /dev/null. Prints one row
per round and a last line `trainer/pipe native/python cpu: R` (median of the rounds).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SLOTS = list(range(1, 27))


def write_lines(path: Path, count: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    with path.open("w") as out:
        for i in range(count):
            if i % 100 == 99:
                out.write("1 x broken line\n")
                continue
            tokens = [
                f"{int(f)}:{slot}"
                for slot in SLOTS
                for f in rng.integers(0, 2**63, int(rng.integers(1, 4)))
            ]
            out.write(f"1 {int(rng.random() < 0.2)} {' '.join(tokens)}\n")


def timed(command: list[str], data: Path) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one run of `command` with `data` on stdin."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with data.open("rb") as stdin:
        subprocess.run(command, stdin=stdin, stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--lines", type=int, default=200_000)
    args.add_argument("--rounds", type=int, default=3)
    args.add_argument("--quick", action="store_true", help="20,000 lines, 2 rounds")
    opts = args.parse_args()
    lines, rounds = (20_000, 2) if opts.quick else (opts.lines, opts.rounds)

    from elasticctr_trainer.pipe import build_native_pipe

    native = str(build_native_pipe())
    with tempfile.TemporaryDirectory(prefix="pipe-bench-") as tmp:
        work = Path(tmp)
        (work / "slot.conf").write_text("".join(f"{s}\n" for s in SLOTS))
        data = work / "part-00000"
        write_lines(data, lines)
        common = ["--sparse-dim", "1000001", "--report-dir", str(work / "reports")]
        commands = {
            "python": [sys.executable, "-m", "elasticctr_trainer.pipe",
                       "--slot-conf", str(work / "slot.conf"), *common],
            "native": [native, "--slots", ",".join(map(str, SLOTS)), *common],
        }  # fmt: skip
        per = 100_000 / lines
        ratios = []
        print(f"{lines:,} lines of 26 slots; per 100,000 lines: CPU s, wall s")
        for round_number in range(1, rounds + 1):
            figures = {name: timed(command, data) for name, command in commands.items()}
            (py_cpu, py_wall), (nat_cpu, nat_wall) = figures["python"], figures["native"]
            ratios.append(nat_cpu / py_cpu)
            print(
                f"round {round_number}: python {py_cpu * per:.3f} / {py_wall * per:.3f}, "
                f"native {nat_cpu * per:.3f} / {nat_wall * per:.3f}, "
                f"native/python cpu {ratios[-1]:.4f}"
            )
    print(f"trainer/pipe native/python cpu: {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
