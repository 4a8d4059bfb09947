"""The dense-compute ceiling of a trainer: the network's matrix-product FLOPs per example
against this machine's measured sgemm rate (numpy's BLAS, the given thread count), on the
network's own shapes.

    OPENBLAS_NUM_THREADS=1 python bench/sgemm_ceiling.py --input-width 234 \
        --fc-sizes 400,400,400 --batch-size 512

Prints one JSON line: flops_per_example, gflops (measured), examples_per_sec (ceiling).

Per FC layer of a training step: the forward product X·W, and backward dY·Wᵀ (the input's
gradient, needed down to the embeddings) and Xᵀ·dY (the weight's): 3 x 2 x in x out FLOPs
per example. Everything else the step does (embedding lookups, pooling, activations, the
optimizer, the pulls and pushes) is left out, so no trainer can reach this rate.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time

import numpy as np


def layer_shapes(input_width: int, fc_sizes: list[int], classes: int = 2) -> list[tuple[int, int]]:
    widths = [input_width, *fc_sizes, classes]
    return list(itertools.pairwise(widths))


def flops_per_example(shapes: list[tuple[int, int]]) -> int:
    return sum(3 * 2 * fan_in * fan_out for fan_in, fan_out in shapes)


def step_seconds(
    shapes: list[tuple[int, int]], batch: int, seconds: float = 2.0, backward: bool = True
) -> float:
    """Median time of one step's matrix products, repeated for about `seconds`; without
    `backward`, of the forward products alone (inference)."""
    rng = np.random.default_rng(0)
    mats = [
        (rng.random((batch, i), np.float32), rng.random((i, o), np.float32),
         rng.random((batch, o), np.float32))
        for i, o in shapes
    ]  # fmt: skip

    def step() -> None:
        for x, w, dy in mats:
            x @ w
            if backward:
                dy @ w.T
                x.T @ dy

    step()  # warm-up: BLAS buffers, page faults
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 5:
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--input-width", type=int, required=True, help="slots x embedding_dim")
    args.add_argument("--fc-sizes", default="400,400,400")
    args.add_argument("--batch-size", type=int, default=512)
    args.add_argument("--seconds", type=float, default=2.0)
    opts = args.parse_args()
    shapes = layer_shapes(opts.input_width, [int(s) for s in opts.fc_sizes.split(",")])
    flops = flops_per_example(shapes)
    seconds = step_seconds(shapes, opts.batch_size, opts.seconds)
    result = {
        "flops_per_example": flops,
        "gflops": flops * opts.batch_size / seconds / 1e9,
        "examples_per_sec": opts.batch_size / seconds,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
