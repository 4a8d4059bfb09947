"""Model quality: the quality matrix (and the realistic profile's sizes), each cell x seed
one offline job with the trainer's defaults, its held-out AUC pass by pass against the
data's Bayes-optimal AUC and two logistic regressions fitted in the same run on the same
held-out set (without crosses, and with the generator's interacting pairs crossed).

    PYTHONPATH=images/trainer:images/common .venv/bin/python bench/model_quality.py \
        [--cells base ctr1 ... | --matrix | --cells realistic-full] [--seeds 1 2 3] \
        [--passes 3] [--pservers 1] [--trainers 2] [--scale 1.0] \
        [--set hyper_parameters.delete_threshold=50 ...] [--auto-crosses] [--data DIR] \
        [--json OUT]

The cells are `elasticctr_trainer.quality.CELLS` (docs/trainer.md, "Model quality", has
the table); `--scale` multiplies every cell's training examples (0.5: half). Per cell and
seed: the data (generated into DATA/<cell>-<scale>-<seed>, or reused from there), the
baselines, one job whose trainer 0 evaluates every version on the held-out set. Prints one
row per cell and seed: Bayes, LR, LR + crosses, the model's AUC after each pass, whether
every pass meets the bars (within `quality.BAYES_MARGIN` of Bayes and at least the LR
without crosses) and the job's seconds. `--set section.key=JSON` overrides trainer.json,
for studies; the matrix's verdict is about the defaults (no --set; crosses `auto`, which
the job's trainer 0 chooses; `--set training.crosses=[]` for none). `--auto-crosses`:
the bench chooses the same pairs with `elasticctr_trainer.auto_crosses` from the lines a
new job's trainer 0 reads at start (prior.py), prints them per row and names them in the
job's config (the measurements before `auto` was the default ran so).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from local_job import local_job_command, trainer_env  # a module beside this script

REPO = Path(__file__).resolve().parents[1]


def generate(out: Path, cell: Any, seed: int, scale: float) -> dict[str, Any]:
    """The data and its summary (Bayes, baselines); reused when `out` has them already."""
    from elasticctr_trainer.quality import generate_cell

    summary_file = out / "summary.json"
    if summary_file.exists():
        return dict(json.loads(summary_file.read_text()))
    summary = generate_cell(f"file://{out}", cell, seed, scale)
    summary_file.write_text(json.dumps(summary))
    return summary


def auto_crosses(data: Path, summary: dict[str, Any]) -> list[list[int]]:
    """The pairs trainer 0 of a new offline job with crosses `auto` would choose: from the
    lines that set its prior (the first PRIOR_EXAMPLES of its first PRIOR_HOURS hours)."""
    from elasticctr_common.lines import DenseFeature, LineFormat
    from elasticctr_common.slotconf import read_slot_conf
    from elasticctr_common.storage import open_store
    from elasticctr_trainer.auto_crosses import SlotSample, choose_crosses
    from elasticctr_trainer.hours import ready_hours
    from elasticctr_trainer.lines import LineParser
    from elasticctr_trainer.prior import PRIOR_HOURS, click_rate
    from elasticctr_trainer.quality import SPARSE_DIM

    dense = tuple(DenseFeature(d["name"], d["dim"]) for d in summary["dense_features"])
    slots = read_slot_conf(data / "slot.conf")
    parser = LineParser(slots, SPARSE_DIM, LineFormat(summary["format"], dense))
    store = open_store(f"file://{data}/train")
    hours = ready_hours(store, summary["start"], summary["end"])[0][:PRIOR_HOURS]
    sample = SlotSample(len(slots))
    click_rate(store, hours, parser, observe=sample.add)
    return choose_crosses(sample, slots)


def trainer_config(data: Path, work: Path, summary: dict[str, Any], passes: int,
                   overrides: list[str]) -> Path:  # fmt: skip
    from elasticctr_common.trainer_json import apply_settings
    from elasticctr_trainer.quality import trainer_json

    config = trainer_json(summary, str(data), str(work), passes)
    apply_settings(config, overrides)
    path = work / "trainer.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def train(config: Path, work: Path, pservers: int, trainers: int) -> list[float]:
    command = local_job_command(config, work / "logs", pservers=pservers, trainers=trainers)
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
    from elasticctr_trainer.quality import BAYES_MARGIN, CELLS, MATRIX, verdict

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--cells", nargs="+", choices=sorted(CELLS), default=[])
    parser.add_argument("--matrix", action="store_true", help="every cell of the matrix")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--pservers", type=int, default=1)
    parser.add_argument("--trainers", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0, help="x every cell's examples")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=JSON")
    parser.add_argument("--keep", action="store_true", help="keep the job's work directory")
    parser.add_argument("--data", type=Path, help="generate into DATA/..., or reuse it")
    parser.add_argument("--json", type=Path, help="append one JSON line per row here")
    parser.add_argument(
        "--auto-crosses", action="store_true", help="name auto_crosses' pairs, printed per row"
    )
    args = parser.parse_args()
    cells = list(MATRIX) if args.matrix else args.cells
    if not cells:
        parser.error("name --cells or --matrix")
    print(
        f"{args.pservers} pserver(s) + {args.trainers} trainer(s), {args.passes} passes, "
        f"scale {args.scale}, settings {args.set or 'the defaults'}",
        flush=True,
    )
    passes = " | ".join(f"pass {p}" for p in range(1, args.passes + 1))
    print(f"| cell | seed | examples | Bayes | LR | LR + crosses | {passes} | bars | job s |")
    for name in cells:
        cell = CELLS[name]
        for seed in args.seeds:
            root = Path(tempfile.mkdtemp(prefix=f"model-quality-{name}-{seed}-"))
            data = args.data / f"{name}-{args.scale:g}-{seed}" if args.data else root / "data"
            summary = generate(data, cell, seed, args.scale)
            (root / "work").mkdir()
            settings = list(args.set)
            if args.auto_crosses:
                crosses = auto_crosses(data, summary)
                print(f"{name} {seed}: crosses {json.dumps(crosses)}", flush=True)
                settings.append(f"training.crosses={json.dumps(crosses)}")
            config = trainer_config(data, root / "work", summary, args.passes, settings)
            began = time.monotonic()
            try:
                aucs = train(config, root / "work", args.pservers, args.trainers)
            except RuntimeError as err:
                print(f"| {name} | {seed} | job failed: {err} |", flush=True)
                continue
            seconds = time.monotonic() - began
            bayes, lr = summary["heldout_bayes_auc"], summary["lr_auc"]
            ok = verdict(aucs, bayes, lr)
            cells_text = " | ".join(
                f"{v:.4f}" for v in [bayes, lr, summary["lr_crosses_auc"], *aucs]
            )
            bars = "met" if ok else f"MISSED (Bayes - {BAYES_MARGIN} = {bayes - BAYES_MARGIN:.4f})"
            print(
                f"| {name} | {seed} | {summary['train_examples']:,} | {cells_text} | {bars} "
                f"| {seconds:.0f} |",
                flush=True,
            )
            if args.json:
                row = {"cell": name, "seed": seed, "scale": args.scale, "settings": settings,
                       "passes": aucs, "met": ok, "seconds": seconds, **summary}  # fmt: skip
                with args.json.open("a") as out:
                    out.write(json.dumps(row) + "\n")
            if args.keep:
                print(f"kept {root}", file=sys.stderr)
            else:
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
