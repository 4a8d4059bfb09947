"""Trainer throughput against its bounds, in one run on the same generated data
(26 slots, the stack's CTR-DNN), rounds interleaved so the machine's drift hits all alike:

- ours: the real job, `python -m elasticctr_trainer local` with 1 pserver + 1 trainer
  (the trainer's own `examples_per_sec` of its pass: the C++ dataset through our pipe,
  pulls and pushes to the pserver);
- local bound: the same network and batch in one process with a local embedding table of
  the same size, no parameter server, same thread count (trainer_local_bound.py);
- dense-compute ceiling: the network's matrix-product FLOPs per example against this
  machine's measured sgemm rate (sgemm_ceiling.py);
- PaddleRec's static parameter-server trainer on the same data, when `--paddlerec DIR`
  names a checkout of it (paddlerec_peer.py; never part of this repository).

    PYTHONPATH=images/trainer:images/common nice -n 10 .venv/bin/python \
        bench/trainer_bounds.py [--quick] [--rounds 3] [--threads 1] [--batch-size 512]

The last line is `trainer/local-bound: R`, the median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from job_cpu import JobCpu  # noqa: E402 - modules beside this script
from local_job import local_job_command, trainer_env  # noqa: E402

REPO = BENCH.parent
SLOTS = 26
HOUR = "20191221/00"


def generate_data(work: Path, examples: int, files: int, vocab: int) -> Path:
    """ElasticCTR lines for one hour (`<work>/data`) and the same examples in Paddle's
    MultiSlot text, converted once by the trainer's pipe (`<work>/multislot`)."""
    code = (
        "import sys; from elasticctr_trainer.generate import generate; "
        f"generate(sys.argv[1], {SLOTS}, {vocab}, '{HOUR}', 1, {examples}, {files}, "
        "heldout=0, seed=5)"
    )
    subprocess.run([sys.executable, "-c", code, f"file://{work}/data"], env=trainer_env(),
                   check=True)  # fmt: skip
    multislot = work / "multislot"
    multislot.mkdir()
    for source in sorted((work / "data/train" / HOUR).glob("part-*")):
        with open(source, "rb") as stdin, open(multislot / source.name, "wb") as stdout:
            subprocess.run(
                [sys.executable, "-m", "elasticctr_trainer.pipe",
                 "--slot-conf", str(work / "data/slot.conf"), "--sparse-dim", "1000001",
                 "--report-dir", str(work / "reports")],
                stdin=stdin, stdout=stdout, env=trainer_env(), check=True,
            )  # fmt: skip
    return multislot


def run_ours(
    work: Path, run: str, batch: int, threads: int, sparse_dim: int, cpu: dict[str, list[float]]
) -> float:
    """examples/s of trainer 0's pass in a 1-pserver, 1-trainer local job; the pass's CPU
    seconds per 1,000 examples of each process role are appended to `cpu`."""
    root = work / run
    runner = {
        "train_data_uri": f"file://{work}/data/train", "start_date_hr": HOUR,
        "end_date_hr": HOUR, "slot_conf": str(work / "data/slot.conf"),
        "model_uri": f"file://{root}/models", "checkpoint_uri": f"file://{root}/ckpt",
        "work_dir": str(root / "scratch"), "thread_num": threads, "data_wait_seconds": 0,
    }  # fmt: skip
    hyper = {"batch_size": batch, "sparse_dim": sparse_dim}
    root.mkdir()
    config = root / "trainer.json"
    config.write_text(json.dumps({"runner": runner, "hyper_parameters": hyper}))
    command = local_job_command(config, root / "logs", pservers=1, trainers=1)
    job = subprocess.Popen(command, env=trainer_env(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    sampler = JobCpu(job.pid, root / "logs/trainer-0.log")
    code = job.wait()
    split = sampler.stop()
    log = (root / "logs/trainer-0.log").read_text(errors="replace")
    if code != 0:
        raise RuntimeError(f"{run}: the local job failed ({code}):\n{log[-3000:]}")
    for line in log.splitlines():
        if line.startswith('{"event": "metrics"') and "examples_per_sec" in line:
            metrics = json.loads(line)
            for role in ("trainer", "pserver", "pipe"):
                cpu.setdefault(role, []).append(1000 * split.get(role, 0.0) / metrics["examples"])
            return float(metrics["examples_per_sec"])
    raise RuntimeError(f"{run}: no pass metrics in trainer-0.log:\n{log[-3000:]}")


def run_json(command: list[str], env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{command[1]} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_local_bound(
    multislot: Path, batch: int, threads: int, sparse_dim: int, cpu: dict[str, list[float]]
) -> float:
    command = [sys.executable, str(BENCH / "trainer_local_bound.py"), "--data", str(multislot),
               "--slots", str(SLOTS), "--sparse-dim", str(sparse_dim),
               "--batch-size", str(batch), "--threads", str(threads)]  # fmt: skip
    result = run_json(command, trainer_env())
    cpu.setdefault("local bound", []).append(1000 * result["cpu_seconds"] / result["examples"])
    return result["examples_per_sec"]


def run_sgemm_ceiling(batch: int, threads: int, seconds: float) -> dict[str, float]:
    from elasticctr_common.trainer_json import HyperParameters

    hyper = HyperParameters()
    command = [sys.executable, str(BENCH / "sgemm_ceiling.py"),
               "--input-width", str(SLOTS * hyper.embedding_dim),
               "--fc-sizes", ",".join(map(str, hyper.fc_sizes)),
               "--batch-size", str(batch), "--seconds", str(seconds)]  # fmt: skip
    blas_threads = {v: str(threads) for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    return run_json(command, trainer_env(blas_threads))


def run_paddlerec(checkout: Path, work: Path, batch: int, threads: int, sparse_dim: int) -> float:
    command = [sys.executable, str(BENCH / "paddlerec_peer.py"), "--paddlerec", str(checkout),
               "--data", str(work / "multislot"), "--work", str(work / "paddlerec"),
               "--slots", str(SLOTS), "--sparse-dim", str(sparse_dim),
               "--batch-size", str(batch), "--threads", str(threads)]  # fmt: skip
    return run_json(command, trainer_env())["examples_per_sec"]


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--quick", action="store_true", help="CI-sized: 20,000 examples, 1 round")
    args.add_argument("--examples", type=int, default=100_000)
    args.add_argument("--files", type=int, default=4)
    args.add_argument("--vocab", type=int, default=10_000, help="feasigns per slot")
    args.add_argument("--batch-size", type=int, default=512)
    args.add_argument("--threads", type=int, default=1)
    args.add_argument("--sparse-dim", type=int, default=1_000_001)
    args.add_argument("--rounds", type=int, default=3)
    args.add_argument("--paddlerec", type=Path, help="a PaddleRec checkout to run beside")
    opts = args.parse_args()
    if opts.quick:
        opts.examples, opts.rounds = 20_000, 1

    work = Path(tempfile.mkdtemp(prefix="elasticctr-bounds-"))
    os.chdir(work)  # Paddle writes <id>_train_desc.prototxt files into the working directory
    multislot = generate_data(work, opts.examples, opts.files, opts.vocab)
    batch, threads, dim = opts.batch_size, opts.threads, opts.sparse_dim
    contenders: dict[str, Callable[[int], float]] = {
        "ours": lambda r: run_ours(work, f"ours-{r}", batch, threads, dim, cpu),
        "local bound": lambda r: run_local_bound(multislot, batch, threads, dim, cpu),
    }
    if opts.paddlerec:
        contenders["PaddleRec"] = lambda r: run_paddlerec(opts.paddlerec, work, batch, threads, dim)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    cpu: dict[str, list[float]] = {}  # ours: CPU seconds per 1,000 examples, per role
    ceilings: list[dict[str, float]] = []
    for r in range(opts.rounds):
        for name, run in contenders.items():
            rates[name].append(run(r))
            print(f"round {r + 1}: {name} {rates[name][-1]:,.0f} examples/s", flush=True)
        ceilings.append(run_sgemm_ceiling(batch, threads, 1.0 if opts.quick else 2.0))
        print(f"round {r + 1}: sgemm ceiling {ceilings[-1]['examples_per_sec']:,.0f} "
              f"examples/s ({ceilings[-1]['gflops']:.1f} GFLOP/s)", flush=True)  # fmt: skip
    report(opts, rates, ceilings, cpu)


def report(
    opts: argparse.Namespace,
    rates: dict[str, list[float]],
    ceilings: list[dict[str, float]],
    cpu: dict[str, list[float]],
) -> None:
    ceiling = [c["examples_per_sec"] for c in ceilings]
    rows = {**rates, "dense-compute ceiling (sgemm)": ceiling}
    ours = rates["ours"]
    mflop = ceilings[0]["flops_per_example"] / 1e6
    gflops = statistics.median(c["gflops"] for c in ceilings)
    print(
        f"\n{SLOTS} slots, {opts.examples:,} examples, batch {opts.batch_size}, "
        f"{opts.threads} thread(s), sparse_dim {opts.sparse_dim:,}, {opts.rounds} round(s); "
        f"{mflop:.2f} MFLOP per example in matrix products, sgemm {gflops:.1f} GFLOP/s\n"
    )
    print("| trainer | examples/s (each round) | median | ours / it (median of rounds) |")
    print("|---|---|---:|---:|")
    for name, values in rows.items():
        ratio = statistics.median(o / v for o, v in zip(ours, values, strict=True))
        each = ", ".join(f"{v:,.0f}" for v in values)
        print(f"| {name} | {each} | {statistics.median(values):,.0f} | {ratio:.2f} |")
    # On a shared machine a niced job waits for the CPU: CPU per example does not.
    roles = ("trainer", "pserver", "pipe")
    ours_cpu = [sum(parts) for parts in zip(*(cpu[r] for r in roles), strict=True)]
    split = ", ".join(f"{role} {statistics.median(v):.3f}" for role, v in cpu.items())
    ratio = statistics.median(b / o for o, b in zip(ours_cpu, cpu["local bound"], strict=True))
    print(
        f"\nCPU seconds per 1,000 examples in the pass (medians): {split}; ours in all "
        f"{statistics.median(ours_cpu):.3f}; local bound / ours: {ratio:.2f}"
    )
    local = statistics.median(o / v for o, v in zip(ours, rates["local bound"], strict=True))
    print(f"trainer/local-bound: {local:.2f}")


if __name__ == "__main__":
    main()
