"""How far one SGD pass can take a logistic regression on a quality cell's data: the wide
part of the model alone, trained as the pservers train the sparse table, against the
logistic regression fitted to convergence (the matrix's bar, docs/trainer.md "The quality
matrix").

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/one_pass_lr.py \
        --data /tmp/mq/data/base-1-1 [--passes 2] [--rule 0.05:3] [--rule 0.2:3 ...] \
        [--l2 0.0]

DATA is a cell's directory as bench/model_quality.py writes it (`train/`, `heldout/`,
`summary.json`). Each `--rule LR:G2SUM` is Paddle's SparseAdaGradSGDRule on one weight an
id (`feasign % 1000001`), w -= LR * g * sqrt(G2SUM / (G2SUM + sum of earlier g^2)), one
example at a time in the files' order (the accessor divides a batch's gradient by the
id's shows in it, so a batch of one is the same step), plus an unregularised bias; `--l2`
adds L2 to each step's gradient. Prints the held-out AUC after each pass beside the
summary's Bayes and converged logistic regression.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
from elasticctr_common.contract import DONEFILE
from elasticctr_common.lines import DenseFeature, LineFormat
from elasticctr_trainer.baselines import parse
from elasticctr_trainer.metrics import auc

SPARSE_DIM = 1_000_001
BIAS_RATE = 0.01


def load(files: list[Path], form: LineFormat) -> tuple[list[list[int]], list[int]]:
    """Each line's hashed ids (dense features left out: the wide part's ids only) and label,
    read as the trainer reads them."""
    lines = parse([text for path in files for text in path.read_text().splitlines()], form)
    return [[f % SPARSE_DIM for f, _ in line.features] for line in lines], [
        line.label for line in lines
    ]


def one_pass_lr(
    train: tuple[list[list[int]], list[int]],
    heldout: tuple[list[list[int]], list[int]],
    rate: float, g2sum: float, l2: float, passes: int,
) -> list[float]:  # fmt: skip
    weights: dict[int, float] = {}
    squares: dict[int, float] = {}
    bias = 0.0
    found = []
    for _ in range(passes):
        for ids, label in zip(*train, strict=True):
            z = bias + sum(weights.get(k, 0.0) for k in ids)
            grad = 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z)))) - label
            bias -= BIAS_RATE * grad
            for k in ids:
                w, seen = weights.get(k, 0.0), squares.get(k, 0.0)
                g = grad + l2 * w
                weights[k] = w - rate * g * math.sqrt(g2sum / (g2sum + seen))
                squares[k] = seen + g * g
        scores = [bias + sum(weights.get(k, 0.0) for k in ids) for ids in heldout[0]]
        found.append(auc(np.array(heldout[1]), np.array(scores)))
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--rule", action="append", default=[], metavar="LR:G2SUM")
    p.add_argument("--l2", type=float, default=0.0)
    args = p.parse_args()
    summary = json.loads((args.data / "summary.json").read_text())
    dense = tuple(DenseFeature(d["name"], d["dim"]) for d in summary["dense_features"])
    form = LineFormat(summary["format"], dense)
    files = sorted(f for f in (args.data / "train").rglob("*") if f.is_file())
    train = load([f for f in files if f.name != DONEFILE], form)
    heldout = load(sorted(f for f in (args.data / "heldout").rglob("*") if f.is_file()), form)
    print(
        f"{args.data.name}: {len(train[1])} training, {len(heldout[1])} held-out examples; "
        f"Bayes {summary['heldout_bayes_auc']:.4f}, converged LR {summary['lr_auc']:.4f}"
    )
    for rule in args.rule or ["0.05:3"]:
        rate, g2sum = (float(x) for x in rule.split(":"))
        aucs = one_pass_lr(train, heldout, rate, g2sum, args.l2, args.passes)
        print(f"rule {rule} l2 {args.l2:g}: " + " / ".join(f"{a:.4f}" for a in aucs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
