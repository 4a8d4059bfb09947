"""The serving predictor against its FLOP bound, config by config, in one run (docs/serving.md).

    OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/serving_predictor.py [--quick] [--rounds 3]
        [--slots 26] [--fc 400,400,400] [--serving]

Writes a synthetic model version with the production architecture (26 slots x 9, FC
400-400-400, tests/support/make_model.py: the trainer's exported graph) and prints:
- the exported program's ops, and the FLOPs per example of its matrix products (2 x in x out
  per layer, from the weights' shapes);
- the FLOP bound: those products alone at batch 1 and 64 on numpy's BLAS (one thread;
  bench/sgemm_ceiling.py's timing), in µs per call;
- µs per call of the bare Paddle predictor at batch 1 and 64 under each config variant,
  the rounds interleaved so that every variant sees the same machine (medians), and each
  variant's largest difference from numpy's probabilities;
- serving's own DenseModel.predict (the chosen configs, and one input instead of 26 where
  graph.py can rewrite the program) and where a call of the 26-input program's time goes
  (copy in the 26 inputs, run, copy out);
- with --serving, the whole serving process at batch 64 (HTTP + batcher + cube, 3 shards):
  bench/serving_latency.py's cell, one concurrency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the bound on one core, as the predictor
os.environ.setdefault("GLOG_minloglevel", "3")
REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")] + [
    str(REPO / "images" / p) for p in ("serving", "cube", "common")
]

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import paddle.inference as paddle_infer  # noqa: E402
from elasticctr_serving import model as serving_model  # noqa: E402
from numpy.typing import NDArray  # noqa: E402
from sgemm_ceiling import step_seconds  # noqa: E402

BATCHES = (1, 64)
MATMUL_OPS = {"mul": "Y", "matmul": "Y", "matmul_v2": "Y", "fc": "W"}


def program_shapes(program: bytes) -> tuple[list[str], list[tuple[int, int]]]:
    """The program's op types and the [in, out] shape of each matrix product's weight."""
    paddle.enable_static()
    desc = paddle.static.Program.parse_from_string(program)
    block = desc.global_block()
    ops = [op.type for op in block.ops]
    shapes = []
    for op in block.ops:
        if op.type in MATMUL_OPS:
            shape = block.var(op.input(MATMUL_OPS[op.type])[0]).shape
            shapes.append((int(shape[0]), int(shape[1])))
    paddle.disable_static()
    return ops, shapes


def variants(program: bytes, params: bytes) -> dict[str, Callable[[], paddle_infer.Config]]:
    """Config variants; each starts from serving's (model.predictor_config) and changes one
    thing, or starts from Paddle's defaults."""

    def serving(onednn: bool = True, **change: Any) -> Callable[[], paddle_infer.Config]:
        def build() -> paddle_infer.Config:
            config = serving_model.predictor_config(program, params, onednn)
            if change.get("threads"):
                config.set_cpu_math_library_num_threads(change["threads"])
            if change.get("ir") is False:
                config.switch_ir_optim(False)
            if change.get("fc_fuse"):  # serving deletes fc_fuse_pass: a fresh config keeps it
                config = paddle_defaults(onednn_ops=True)()
            if change.get("no_memory_optim"):
                config.enable_memory_optim(False)
            return config

        return build

    def paddle_defaults(
        ir: bool = True, onednn: bool | None = None, onednn_ops: bool = False
    ) -> Callable[[], paddle_infer.Config]:
        def build() -> paddle_infer.Config:
            config = paddle_infer.Config()
            config.set_model_buffer(program, len(program), params, len(params))
            config.disable_gpu()
            config.disable_glog_info()
            config.set_cpu_math_library_num_threads(1)
            config.switch_ir_optim(ir)
            if onednn is True:
                config.enable_mkldnn()
            elif onednn is False:
                config.disable_mkldnn()
            if onednn_ops:
                config.set_mkldnn_op(set(serving_model.ONEDNN_OPS))
                for name in serving_model.ONEDNN_FUSES:
                    config.delete_pass(name)
            return config

        return build

    return {
        "serving (IR on, no fc_fuse, oneDNN matmul only)": serving(),
        "serving, oneDNN off (the batch-1 predictor)": serving(onednn=False),
        "serving, 2 math threads": serving(threads=2),
        "serving, IR optim off": serving(ir=False),
        "serving, memory optim off": serving(no_memory_optim=True),
        "serving + fc_fuse_pass": serving(fc_fuse=True),
        "Paddle defaults (IR on, oneDNN default)": paddle_defaults(),
        "Paddle defaults, enable_mkldnn (all ops)": paddle_defaults(onednn=True),
        "Paddle defaults, IR off, oneDNN off": paddle_defaults(ir=False, onednn=False),
    }


class Runner:
    """One predictor with its handles, fed [slots, n, dim] inputs."""

    def __init__(self, predictor: paddle_infer.Predictor, feed_names: list[str]) -> None:
        self.predictor = predictor
        self.inputs = [predictor.get_input_handle(n) for n in feed_names]
        self.output = predictor.get_output_handle(predictor.get_output_names()[0])

    def copy_in(self, pooled: NDArray[np.float32]) -> None:
        for handle, values in zip(self.inputs, pooled, strict=True):
            handle.copy_from_cpu(values)

    def __call__(self, pooled: NDArray[np.float32]) -> NDArray[np.float32]:
        self.copy_in(pooled)
        self.predictor.run()
        out: NDArray[np.float32] = self.output.copy_to_cpu()
        return out


def median_us(call: Callable[[], Any], calls: int) -> float:
    for _ in range(max(3, calls // 10)):
        call()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def numpy_probabilities(params_dir: Path, pooled: NDArray[np.float32]) -> NDArray[np.float32]:
    from tests.support.make_model import expected_probabilities

    flat = pooled.transpose(1, 0, 2).reshape(pooled.shape[1], -1)
    return expected_probabilities(params_dir, 1, flat)


def whole_serving(seconds: float) -> str:
    """bench/serving_latency.py at batch 64, concurrency 8: its table and references."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "serving_latency.py"), "--batches", "64",
         "--concurrency", "8", "--repeat", "1", "--seconds", str(seconds)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"serving_latency.py failed:\n{done.stderr[-3000:]}")
    return done.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 round, fewer calls (CI-sized)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--fc", default="400,400,400")
    p.add_argument("--serving", action="store_true", help="also the whole serving process")
    p.add_argument("--seconds", type=float, default=5.0, help="--serving's cell length")
    args = p.parse_args()
    rounds, calls = (1, {1: 100, 64: 30}) if args.quick else (args.rounds, {1: 400, 64: 100})
    from tests.support.make_model import default_spec, make_versions

    with tempfile.TemporaryDirectory(prefix="serving-predictor-") as tmp:
        spec = default_spec(Path(tmp), [1], slots=list(range(1, args.slots + 1)), keys=10,
                            fc_sizes=[int(x) for x in args.fc.split(",")])  # fmt: skip
        make_versions(spec)
        dense = Path(tmp) / "1" / "dense"
        program = (dense / "model.pdmodel").read_bytes()
        params = (dense / "model.pdiparams").read_bytes()
        meta = json.loads((dense / "meta.json").read_text())
        ops, shapes = program_shapes(program)
        flops = sum(2 * fan_in * fan_out for fan_in, fan_out in shapes)
        rng = np.random.default_rng(0)
        pooled = {b: rng.standard_normal((args.slots, b, 9)).astype(np.float32) for b in BATCHES}
        expected = {b: numpy_probabilities(Path(tmp), pooled[b]) for b in BATCHES}
        runners = {
            label: Runner(paddle_infer.create_predictor(build()), meta["feed_names"])
            for label, build in variants(program, params).items()
        }
        from elasticctr_common.storage import open_store

        model = serving_model.load_model(open_store(f"file://{tmp}"), 1, workers=1)
        serving = runners["serving (IR on, no fc_fuse, oneDNN matmul only)"]
        timings: dict[str, dict[int, list[float]]] = {}
        for _ in range(rounds):
            for b in BATCHES:
                bound_us = step_seconds(shapes, b, seconds=0.5, backward=False) * 1e6
                timings.setdefault("FLOP bound (numpy BLAS, 1 thread)", {}).setdefault(b, [])
                timings["FLOP bound (numpy BLAS, 1 thread)"][b].append(bound_us)
                for label, runner in runners.items():
                    us = median_us(partial(runner, pooled[b]), calls[b])
                    timings.setdefault(label, {}).setdefault(b, []).append(us)
                us = median_us(partial(model.predict, 0, pooled[b]), calls[b])
                timings.setdefault("serving's DenseModel.predict (chosen)", {}).setdefault(b, [])
                timings["serving's DenseModel.predict (chosen)"][b].append(us)
                split = {
                    "copy in": median_us(partial(serving.copy_in, pooled[b]), calls[b]),
                    "run": median_us(serving.predictor.run, calls[b]),
                    "copy out": median_us(serving.output.copy_to_cpu, calls[b]),
                }
                for part, us in split.items():
                    key = f"  of the 26-input call above: {part}"
                    timings.setdefault(key, {}).setdefault(b, []).append(us)
        differences = {
            label: max(float(np.abs(r(pooled[b])[:, 1] - expected[b]).max()) for b in BATCHES)
            for label, r in runners.items()
        }
        differences["serving's DenseModel.predict (chosen)"] = max(
            float(np.abs(model.predict(0, pooled[b])[:, 1] - expected[b]).max()) for b in BATCHES
        )
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; {rounds} round(s), medians")  # fmt: skip
    print(f"exported program: {len(ops)} ops: " + ", ".join(_runs(ops)))
    print(f"matrix products {shapes}: {flops:,} FLOPs per example")
    bound = {b: statistics.median(timings["FLOP bound (numpy BLAS, 1 thread)"][b]) for b in BATCHES}
    print(f"FLOP bound: {flops * 64 / bound[64] / 1e3:.1f} GFLOP/s at batch 64\n")
    print(
        "| what | µs per call, batch 1 | batch 64 | batch 64 / bound | examples/s per core "
        "at 64 | max abs diff from numpy |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for label, by_batch in timings.items():
        one, many = (statistics.median(by_batch[b]) for b in BATCHES)
        diff = differences.get(label)
        print(f"| {label} | {one:,.0f} | {many:,.0f} | {many / bound[64]:.2f} | "
              f"{64 / many * 1e6:,.0f} | {'' if diff is None else f'{diff:.1e}'} |")  # fmt: skip
    if args.serving:
        print("\nthe whole serving process (bench/serving_latency.py --batches 64 "
              f"--concurrency 8 --repeat 1 --seconds {args.seconds:g}):")  # fmt: skip
        print(whole_serving(args.seconds))
    return 0


def _runs(ops: list[str]) -> list[str]:
    """['feed', 'feed', 'concat'] -> ['feed x2', 'concat']."""
    out: list[tuple[str, int]] = []
    for op in ops:
        if out and out[-1][0] == op:
            out[-1] = (op, out[-1][1] + 1)
        else:
            out.append((op, 1))
    return [f"{op} x{n}" if n > 1 else op for op, n in out]


if __name__ == "__main__":
    sys.exit(main())
