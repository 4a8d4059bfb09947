"""Held-out AUC of the online test job, run after run, optionally under a CPU hog.

The job of `test_online_training_on_hdfs_waits_for_the_next_hour` on file:// storage: the
test's synthetic data (seed 11), 1 pserver + 2 trainers, online mode, hours 00 and 01
ready at the start, hour 02's donefile written once two versions are published. For every
version it prints the held-out AUC of `eval/predictions.txt` and the impressions the
exported table has counted (`table_shows`) against those in the data the version says it
trained on: a version missing some of its pass's pushes counts fewer.

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/trainer_online_auc.py \
        --runs 5 [--hog 4] [--out /tmp/online-auc] [--set delete_threshold=1000]

`--hog N` runs N busy-loop processes (started and stopped by PID) for the whole run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from local_job import local_job_command, trainer_env  # a module beside this script

REPO = Path(__file__).resolve().parents[1]
HOURS = ["20191221/00", "20191221/01", "20191221/02"]


def hog(count: int) -> list[subprocess.Popen[bytes]]:
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def data_shows(root: Path, hour: str, slots: list[int], sparse_dim: int) -> float:
    from elasticctr_trainer.lines import PADDING_KEY, BadLine, LineParser

    parser = LineParser(slots, sparse_dim)
    total = 0.0
    for path in sorted((root / "train" / hour).glob("part-*")):
        for line in path.read_text().splitlines():
            try:
                example = parser.parse(line)
            except BadLine:
                continue
            keys = sum(1 for ks in example.keys for k in ks if k != PADDING_KEY)
            total += example.show * keys
    return total


def stall(pid_file: Path, seconds: float) -> None:
    """Stop the process of `pid_file` as soon as it exists, resume it `seconds` later."""
    while not pid_file.exists():
        time.sleep(0.01)
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGSTOP)
    time.sleep(seconds)
    os.kill(pid, signal.SIGCONT)


def one_run(
    data: Path,
    work: Path,
    bayes: float,
    heldout: list[str],
    stall_seconds: float = 0.0,
    settings: dict[str, Any] | None = None,
) -> list[dict[str, float]]:
    from elasticctr_trainer.metrics import auc

    runner = {
        "mode": "online",
        "train_data_uri": f"file://{work}/train",
        "start_date_hr": HOURS[0],
        "end_date_hr": HOURS[2],
        "slot_conf": str(data / "slot.conf"),
        "model_uri": f"file://{work}/models",
        "checkpoint_uri": f"file://{work}/checkpoints",
        "eval_data_uri": f"file://{data}/heldout",
        "work_dir": str(work / "scratch"),
        "online_poll_seconds": 0.5,
    }
    hyper: dict[str, Any] = {"sparse_dim": 100003, "learning_rate": 0.003, "batch_size": 64}
    hyper.update(settings or {})
    subprocess.run(["cp", "-r", str(data / "train"), str(work / "train")], check=True)
    (work / "train" / HOURS[2] / "donefile").unlink()
    config = work / "trainer.json"
    config.write_text(json.dumps({"runner": runner, "hyper_parameters": hyper}))
    command = local_job_command(config, work / "logs", pservers=1, trainers=2)
    job = subprocess.Popen(
        command, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    donefile = work / "models" / "donefile"
    try:
        if stall_seconds:
            stall(work / "logs" / "trainer-0.pid", stall_seconds)
        deadline = time.time() + 900
        while not (donefile.exists() and len(donefile.read_text().splitlines()) >= 2):
            if job.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"job ended early or timed out; logs in {work / 'logs'}")
            time.sleep(0.5)
        (work / "train" / HOURS[2] / "donefile").write_text("")
        if job.wait(timeout=900) != 0:
            raise RuntimeError(f"job failed; logs in {work / 'logs'}")
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait()
    labels = np.array([int(line.split()[1]) > 0 for line in heldout])
    slots = [int(s) for s in (data / "slot.conf").read_text().split()]
    rows, expected = [], 0.0
    for version in (1, 2, 3):
        meta = json.loads((work / "models" / str(version) / "dense" / "meta.json").read_text())
        expected += data_shows(data, meta["hours"][0], slots, hyper["sparse_dim"])
        predictions = np.loadtxt(work / "models" / str(version) / "eval" / "predictions.txt")
        rows.append({
            "version": version,
            "auc": auc(labels, predictions),
            "gap": bayes - auc(labels, predictions),
            "table_shows": meta["table_shows"],
            "data_shows": expected,
        })  # fmt: skip
    return rows


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--runs", type=int, default=3)
    args.add_argument("--hog", type=int, default=0, help="busy-loop processes during the runs")
    args.add_argument("--out", default=None, help="keep each run's files here")
    args.add_argument(
        "--stall-trainer0", type=float, default=0.0,
        help="stop trainer 0 (SIGSTOP) as soon as it starts, for this many seconds",
    )  # fmt: skip
    args.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a hyper_parameters key (a JSON value), e.g. delete_threshold=1000",
    )  # fmt: skip
    opts = args.parse_args()
    settings = {k: json.loads(v) for k, v in (item.split("=", 1) for item in opts.set)}
    from elasticctr_trainer.generate import bayes_auc, generate

    base = Path(opts.out or tempfile.mkdtemp(prefix="online-auc-"))
    data = base / "data"
    if not (data / "heldout").exists():
        model = generate(
            f"file://{data}", slot_count=8, vocab=100, start=HOURS[0], hours=3,
            examples_per_hour=30000, files_per_hour=4, heldout=5000, seed=11,
        )  # fmt: skip
        (data / "truth.bayes").write_text(
            str(bayes_auc(model, (data / "heldout" / "part-00000").read_text().splitlines()))
        )
    bayes = float((data / "truth.bayes").read_text())
    heldout = (data / "heldout" / "part-00000").read_text().splitlines()
    hogs = hog(opts.hog)
    try:
        for run in range(opts.runs):
            work = base / f"run-{int(time.time())}-{run}"
            work.mkdir(parents=True)
            started = time.time()
            rows = one_run(data, work, bayes, heldout, opts.stall_trainer0, settings)
            seconds = time.time() - started
            load = os.getloadavg()[0]
            for row in rows:
                print(
                    f"run {run} v{row['version']}: AUC {row['auc']:.4f} (Bayes {bayes:.4f}, "
                    f"gap {row['gap']:.4f}) table_shows {row['table_shows']:.0f} / data "
                    f"{row['data_shows']:.0f} ({row['table_shows'] - row['data_shows']:+.0f})",
                    flush=True,
                )
            print(f"run {run}: {seconds:.0f} s, load average {load:.1f}", flush=True)
    finally:
        for proc in hogs:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
