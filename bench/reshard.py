"""Time a pserver's resharding of a checkpoint (reshard.build), without Paddle.

    .venv/bin/python bench/reshard.py --rows 2000000 --cases 1:2 1:3 2:3 2:4 4:2 2:2

Writes a checkpoint of `--rows` random keys laid out as P pservers save it (8 gzip shard
files each; rows shaped as Paddle saves embedding_dim 9: key, 7 counters and weights,
8 embedding values and their g2sum, printed like `%g`), once per old count, then times
building pserver 0's part for the new count in a child process, so that its max RSS is
the build's alone (VmHWM). Prints rows read and kept, CPU and wall seconds, bytes written, max
RSS (docs/trainer.md, "Measured").
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "images" / "trainer"), str(HERE.parent / "images" / "common")]

from elasticctr_trainer import reshard  # noqa: E402

PER_SERVER = 8
DENSE_VALUES = 1000

CHILD = """
import json, sys, time
from pathlib import Path
from elasticctr_common.storage import open_store
from elasticctr_trainer import reshard
root, old, new, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
wall, cpu = time.monotonic(), time.process_time()
r = reshard.build(open_store("file://" + root), 1, old, 0, new, 8, int(sys.argv[5]), out)
print(json.dumps({
    "rows_read": r.rows_read, "rows_kept": r.rows_kept, "files_copied": r.files_copied,
    "cpu": time.process_time() - cpu, "wall": time.monotonic() - wall,
    "written": sum(p.stat().st_size for p in out.rglob("*.gz")),
    "max_rss": [int(line.split()[1]) * 1024 for line in open("/proc/self/status")
                if line.startswith("VmHWM:")][0],
}))
"""


def write_checkpoint(root: Path, rows: int, pservers: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    keys = rng.choice(10**9, size=rows, replace=False) + 1
    weights = rng.normal(0, 0.01, size=(rows, 10)).astype(np.float32)
    counts = rng.integers(1, 500, size=(rows, 3))
    shards = PER_SERVER * pservers
    files: dict[int, list[str]] = {s: [] for s in range(shards)}
    for key, count, weight in zip(keys.tolist(), counts.tolist(), weights.tolist(), strict=True):
        values = " ".join(map("{:g}".format, weight))
        files[key % shards].append(f"{key} 0 0 {count[0]} {count[1]} {count[2]} {values} 0.02\n")
    for rank in range(pservers):
        table = root / f"pass-1/pserver-{rank}/000"
        table.mkdir(parents=True)
        for shard in range(rank * PER_SERVER, (rank + 1) * PER_SERVER):
            part = table / f"part-{rank:03d}-{shard:05d}.gz"
            part.write_bytes(gzip.compress("".join(files[shard]).encode()))
        dense = root / f"pass-1/pserver-{rank}/001"
        dense.mkdir()
        span = reshard.dense_spans(DENSE_VALUES, pservers)[rank]
        (dense / f"part-{rank:03d}.gz").write_bytes(gzip.compress(b"0.1 0.2 0.3\n" * len(span)))
    return sum(p.stat().st_size for p in root.rglob("*.gz"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--cases", nargs="+", default=["1:2", "1:3", "2:3", "2:4", "4:2", "2:2"])
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    cases = [tuple(int(n) for n in case.split(":")) for case in args.cases]
    env_path = ":".join(sys.path[:2])
    with tempfile.TemporaryDirectory(prefix="reshard-bench-") as tmp:
        for old in sorted({old for old, _ in cases}):
            size = write_checkpoint(Path(tmp, f"old-{old}"), args.rows, old, args.seed)
            print(f"checkpoint of {old} pservers: {args.rows} rows, {size / 2**20:.0f} MiB gzip")
        for old, new in cases:
            out = Path(tmp, f"out-{old}-{new}")
            command = [sys.executable, "-c", CHILD, str(Path(tmp, f"old-{old}")), str(old),
                       str(new), str(out), str(DENSE_VALUES)]  # fmt: skip
            result = subprocess.run(
                command, env={"PYTHONPATH": env_path}, check=True, capture_output=True, text=True
            )
            m = json.loads(result.stdout)
            per_row = f"{m['cpu'] / m['rows_read'] * 1e6:.2f} us/row" if m["rows_read"] else "-"
            print(
                f"{old} -> {new}: read {m['rows_read']} rows, kept {m['rows_kept']}, "
                f"{m['files_copied']} files appended whole; CPU {m['cpu']:.1f} s ({per_row}), "
                f"wall {m['wall']:.1f} s, wrote {m['written'] / 2**20:.0f} MiB, "
                f"max RSS {m['max_rss'] / 2**20:.0f} MiB"
            )


if __name__ == "__main__":
    main()
