"""Model quality on the realistic profile: held-out AUC of the trained model, pass by pass,
against the data's Bayes-optimal AUC and two logistic-regression baselines fitted in the
same run on the same held-out set (issue 16).

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/model_quality.py \
        [--quick] [--passes 3] [--seeds 7] [--set hyper_parameters.model=dnn ...]

Per seed: `generate --profile realistic` (240,000 training examples in 8 hours across
midnight, 60,000 held out; `--quick`: 40,000 / 10,000), the baselines, then one offline
job (1 pserver + 2 trainers, `--passes` passes) whose trainer 0 evaluates every version
on the held-out set. Prints one table row per seed: Bayes, LR, LR + the interacting pair
crossed, and the model's held-out AUC after each pass. `--set section.key=JSON` overrides
trainer.json (for example `--set hyper_parameters.embedx_threshold=0`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from local_job import local_job_command, trainer_env  # a module beside this script

REPO = Path(__file__).resolve().parents[1]
FULL = {"examples_per_hour": 30000, "heldout": 60000}
QUICK = {"examples_per_hour": 5000, "heldout": 10000}


def generate(out: Path, seed: int, size: dict[str, int]) -> dict[str, Any]:
    """The data and its summary (Bayes, baselines); reused when `out` has them already."""
    from elasticctr_trainer.generate import run_generate

    summary_file = out / "summary.json"
    if summary_file.exists():
        return dict(json.loads(summary_file.read_text()))

    args = argparse.Namespace(
        out=f"file://{out}", profile="realistic", baselines=True, sparse_dim=1000001,
        start=None, hours=None, heldout=size["heldout"],
        examples_per_hour=size["examples_per_hour"], files_per_hour=4, seed=seed,
        first_slot=101, max_vocab=100_000, slots=0, vocab=0, missing_hour=[],
    )  # fmt: skip
    summary = run_generate(args)
    summary_file.write_text(json.dumps(summary))
    return summary


def trainer_config(data: Path, work: Path, passes: int, overrides: list[str]) -> Path:
    config: dict[str, dict[str, Any]] = {
        "runner": {
            "train_data_uri": f"file://{data}/train",
            "start_date_hr": "20191221/20",
            "end_date_hr": "20191222/03",
            "slot_conf": str(data / "slot.conf"),
            "passes": passes,
            "model_uri": f"file://{work}/models",
            "checkpoint_uri": f"file://{work}/checkpoints",
            "eval_data_uri": f"file://{data}/heldout",
            "work_dir": str(work / "scratch"),
            "data_wait_seconds": 0,
        },
        "hyper_parameters": {},
    }
    from elasticctr_common.trainer_json import apply_settings

    apply_settings(config, overrides)
    path = work / "trainer.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def train(config: Path, work: Path) -> list[float]:
    command = local_job_command(config, work / "logs", pservers=1, trainers=2)
    result = subprocess.run(
        command, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )
    if result.returncode != 0:
        raise RuntimeError(f"job failed; logs in {work / 'logs'}")
    aucs = []
    for line in (work / "logs" / "trainer-0.log").read_text().splitlines():
        if line.startswith('{"event": "metrics"') and '"eval_auc"' in line:
            aucs.append(json.loads(line)["eval_auc"])
    return aucs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40,000 / 10,000 examples")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--seeds", type=int, nargs="+", default=[7])
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs")
    parser.add_argument(
        "--data", type=Path, help="generate into DATA/<size>-<seed>, or reuse what is there"
    )
    args = parser.parse_args()
    size = QUICK if args.quick else FULL
    passes = " | ".join(f"pass {p}" for p in range(1, args.passes + 1))
    print(f"| seed | Bayes | LR | LR + cross | {passes} |", flush=True)
    for seed in args.seeds:
        root = Path(tempfile.mkdtemp(prefix=f"model-quality-{seed}-"))
        name = f"{'quick' if args.quick else 'full'}-{seed}"
        data = args.data / name if args.data else root / "data"
        summary = generate(data, seed, size)
        (root / "work").mkdir()
        config = trainer_config(data, root / "work", args.passes, args.set)
        aucs = train(config, root / "work")
        cells = [summary["heldout_bayes_auc"], summary["lr_auc"], summary["lr_crosses_auc"], *aucs]
        print(f"| {seed} | " + " | ".join(f"{v:.4f}" for v in cells) + " |", flush=True)
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", str(root)], check=True)


if __name__ == "__main__":
    main()
