"""Model quality on the realistic profile: held-out AUC of the trained model, pass by pass,
against the data's Bayes-optimal AUC and two logistic-regression baselines fitted in the
same run on the same held-out set (issue 16).

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/model_quality.py \
        [--size full|quick|ci] [--passes 3] [--seeds 7] [--trainers 2] \
        [--examples-per-hour N --hours N --heldout N --max-vocab N] \
        [--set hyper_parameters.model=dnn ...]

Per seed: `generate --profile realistic` (`--size full`: 240,000 training examples in 8
hours across midnight, 60,000 held out; `quick`: 40,000 / 10,000; `ci`: the CI test's
size, 3 hours of 8,000 examples, 5,000 held out, the largest slot 300 ids; the size's
numbers can each be overridden), the baselines, then one offline job (1 pserver +
`--trainers`, `--passes` passes) whose trainer 0 evaluates every version on the held-out
set. Prints one table row per seed: Bayes, LR, LR + the interacting pair crossed, the
model's held-out AUC after each pass and the job's seconds. `--set section.key=JSON`
overrides trainer.json (for example `--set hyper_parameters.embedx_threshold=0`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from local_job import local_job_command, trainer_env  # a module beside this script

REPO = Path(__file__).resolve().parents[1]
# Per size: hours from START, examples an hour, held-out examples, the largest slot's ids.
START = "20191221/20"
SIZES: dict[str, dict[str, int]] = {
    "full": {"hours": 8, "examples_per_hour": 30000, "heldout": 60000, "max_vocab": 100_000},
    "quick": {"hours": 8, "examples_per_hour": 5000, "heldout": 10000, "max_vocab": 100_000},
    "ci": {"hours": 3, "examples_per_hour": 8000, "heldout": 5000, "max_vocab": 300},
}


def generate(out: Path, seed: int, size: dict[str, int]) -> dict[str, Any]:
    """The data and its summary (Bayes, baselines); reused when `out` has them already."""
    from elasticctr_trainer.generate import run_generate

    summary_file = out / "summary.json"
    if summary_file.exists():
        return dict(json.loads(summary_file.read_text()))

    args = argparse.Namespace(
        out=f"file://{out}", profile="realistic", baselines=True, sparse_dim=1000001,
        start=START, hours=size["hours"], heldout=size["heldout"],
        examples_per_hour=size["examples_per_hour"], files_per_hour=4, seed=seed,
        first_slot=101, max_vocab=size["max_vocab"], slots=0, vocab=0, missing_hour=[],
    )  # fmt: skip
    summary = run_generate(args)
    summary_file.write_text(json.dumps(summary))
    return summary


def trainer_config(data: Path, work: Path, hours: int, passes: int, overrides: list[str]) -> Path:
    from elasticctr_common.trainer_json import parse_hour
    from elasticctr_trainer.hours import format_hour

    end = format_hour(parse_hour(START) + timedelta(hours=hours - 1))
    config: dict[str, dict[str, Any]] = {
        "runner": {
            "train_data_uri": f"file://{data}/train",
            "start_date_hr": START,
            "end_date_hr": end,
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


def train(config: Path, work: Path, trainers: int) -> list[float]:
    command = local_job_command(config, work / "logs", pservers=1, trainers=trainers)
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
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--quick", action="store_true", help="--size quick")
    for key in ("hours", "examples_per_hour", "heldout", "max_vocab"):
        flag = "--" + key.replace("_", "-")
        parser.add_argument(flag, type=int, help=f"instead of the size's {key}")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--trainers", type=int, default=2, help="beside 1 pserver")
    parser.add_argument("--seeds", type=int, nargs="+", default=[7])
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=JSON")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs")
    parser.add_argument(
        "--data", type=Path, help="generate into DATA/<size>-<seed>, or reuse what is there"
    )
    args = parser.parse_args()
    name = "quick" if args.quick else args.size
    size = dict(SIZES[name])
    for key in size:
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
            name += f"-{key}{size[key]}"
    print(f"{name}: {size}, {args.trainers} trainer(s), settings {args.set}", flush=True)
    passes = " | ".join(f"pass {p}" for p in range(1, args.passes + 1))
    print(f"| seed | Bayes | LR | LR + cross | {passes} | job s |", flush=True)
    for seed in args.seeds:
        root = Path(tempfile.mkdtemp(prefix=f"model-quality-{seed}-"))
        data = args.data / f"{name}-{seed}" if args.data else root / "data"
        summary = generate(data, seed, size)
        (root / "work").mkdir()
        config = trainer_config(data, root / "work", size["hours"], args.passes, args.set)
        began = time.monotonic()
        aucs = train(config, root / "work", args.trainers)
        seconds = time.monotonic() - began
        cells = [summary["heldout_bayes_auc"], summary["lr_auc"], summary["lr_crosses_auc"], *aucs]
        row = " | ".join(f"{v:.4f}" for v in cells)
        print(f"| {seed} | {row} | {seconds:.0f} |", flush=True)
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", str(root)], check=True)


if __name__ == "__main__":
    main()
