"""Crossed ids on a quality-matrix cell's data, before the trainer can form them itself.

Copies a cell's data directory (bench/model_quality.py's DATA/<cell>-<scale>-<seed>) and
appends to every line, training and held-out, one feasign for each crossed slot pair whose
two slots are both present in it (a 64-bit mix of the pair's first ids), in a slot of its
own numbered from --first-slot and added to slot.conf; summary.json is copied as it is, so
model_quality.py, given the copy's parent as --data, reuses the data and reports the
original data's Bayes AUC and baselines (docs/trainer.md, "crossed ids"). Lines are read
with the project's parser in the data's own format (summary.json's `format`), and the
crossed tokens written in it: `feasign:slot` (ElasticCTR) or `slot:feasign` (PaddleRec).

    .venv/bin/python bench/crossed_ids.py /work/mq/data/base-1-1 /work/mq/crossed/base-1-1 \\
        --smallest 101 102 103 104 105 106 107
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
from pathlib import Path

from elasticctr_common.lines import DenseFeature, LineFormat

MASK = (1 << 64) - 1


def crossed_line(line: str, line_format: LineFormat, pairs: dict[tuple[int, int], int]) -> str:
    """`line` with a token for each pair of `pairs` (slot pair -> crossed slot) whose slots
    both have an id in it; a multi-hot slot crosses its first id."""
    first: dict[int, int] = {}
    for feasign, slot in line_format.split(line).features:
        first.setdefault(slot, feasign)
    paddlerec = line_format.name == "paddlerec"
    extra = []
    for (a, b), crossed in pairs.items():
        if a in first and b in first:
            feasign = (first[a] * 1_000_003 + first[b] * 7_919 + crossed) & MASK
            extra.append(f"{crossed}:{feasign}" if paddlerec else f"{feasign}:{crossed}")
    return " ".join([line, *extra])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a cell's data directory")
    parser.add_argument("target", type=Path, help="where the copy goes (must not exist)")
    chosen = parser.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--pair", type=int, nargs=2, action="append", metavar=("A", "B"))
    chosen.add_argument(
        "--smallest", type=int, nargs="+", metavar="SLOT", help="cross every pair of these"
    )
    parser.add_argument("--first-slot", type=int, default=201)
    a = parser.parse_args()
    slot_pairs = a.pair or list(itertools.combinations(a.smallest, 2))
    pairs = {(x, y): a.first_slot + i for i, (x, y) in enumerate(slot_pairs)}
    summary = json.loads((a.source / "summary.json").read_text())
    dense = tuple(DenseFeature(d["name"], d["dim"]) for d in summary["dense_features"])
    line_format = LineFormat(summary["format"], dense)
    shutil.copytree(a.source, a.target)
    files = sorted(a.target.glob("train/*/*/part-*")) + sorted(a.target.glob("heldout/part-*"))
    for path in files:
        lines = path.read_text().splitlines()
        path.write_text("".join(crossed_line(line, line_format, pairs) + "\n" for line in lines))
    with open(a.target / "slot.conf", "a") as conf:
        conf.writelines(f"{slot}\n" for slot in pairs.values())
    print(f"{len(files)} files, {len(pairs)} crossed slots from {a.first_slot}")


if __name__ == "__main__":
    main()
