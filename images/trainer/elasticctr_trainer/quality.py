"""The quality matrix: cells of generator knobs (synth.py) on which the trainer's defaults
must hold, and the bars they are held to (docs/trainer.md, "Model quality").

A cell is a profile and a size. Its data: `hours` hour directories of training examples
(the cell's examples over the hours), a held-out set, slot.conf and the held-out set's true
probabilities; its summary: the Bayes-optimal AUC of the held-out set and the held-out AUC
of two logistic regressions on the same ids (without crosses, and with the generator's
interacting pairs crossed), all computed in the same run. bench/model_quality.py trains
each cell's data with the defaults; test_trainer_quality.py runs a few small cells.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from elasticctr_common.trainer_json import parse_hour

from . import realistic, synth
from .generate import baseline_aucs, write_profile
from .hours import format_hour
from .synth import Profile, SynthModel

# The bars: every pass's version within this of the Bayes-optimal AUC, and at least the
# logistic regression without crosses.
BAYES_MARGIN = 0.03
START = "20191221/20"  # the hours cross midnight
SPARSE_DIM = 1_000_001  # the baselines' hashing: the trainer's default


@dataclass(frozen=True)
class Cell:
    profile: Profile
    examples: int  # training examples, over `hours` hours
    heldout: int
    hours: int = 8
    first_slot: int = 101
    about: str = ""


def _cell(about: str, examples: int = 200_000, heldout: int = 50_000, **knobs: Any) -> Cell:
    return Cell(synth.knobs(**knobs), examples, heldout, about=about)


CELLS: dict[str, Cell] = {
    "base": _cell("20 slots to 100,000 ids, Zipf 1.1, 3 multi-hot, 3 often empty, a pair, 4%"),
    "zipf-0.9": _cell("the base with a heavier tail (Zipf 0.9)", zipf=0.9),
    "zipf-1.3": _cell("the base with a steeper head (Zipf 1.3)", zipf=1.3),
    "vocab-10k": _cell("slots up to 10,000 ids", max_vocab=10_000),
    "vocab-1m": _cell("slots up to 1,000,000 ids", max_vocab=1_000_000),
    "slots-8": _cell("8 slots", slots=8, multi_hot=1, often_empty=1),
    "slots-40": _cell("40 slots", slots=40, multi_hot=6, often_empty=6),
    "ctr-1": _cell("1% clicks", ctr=0.01),
    "ctr-10": _cell("10% clicks", ctr=0.10),
    "multi-hot": _cell("8 multi-hot slots of 1..10 ids", multi_hot=8, max_hot=10),
    "pairs-3": _cell("3 interacting pairs", pairs=3),
    "small-ids": _cell("pre-hashed ids below 1,000,001 (Criteo's preparation)", raw_ids=False),
    "dense": _cell("13 dense count features, PaddleRec's slot format", dense=13),
    "criteo": Cell(synth.criteo(), 200_000, 50_000, first_slot=1, about="the Criteo profile"),
    "realistic": Cell(realistic.profile(), 240_000, 60_000, about="the realistic profile"),
    "large": _cell("the base at 1,000,000 examples", examples=1_000_000, heldout=100_000),
    # Small cells for CI (tests/images/trainer/test_trainer_quality.py): slots of 300 ids
    # at most, so that CI's 24,000 examples (--scale 0.24) cover the head and show a tail.
    "ci-base": _cell("CI: the base at 100,000 examples, 300 ids", 100_000, 20_000, max_vocab=300),
    "ci-dense": _cell("CI: ci-base with 13 dense counts", 100_000, 20_000, max_vocab=300, dense=13),
}
MATRIX = [name for name in CELLS if not name.startswith("ci-")]


def generate_cell(out_uri: str, cell: Cell, seed: int, scale: float = 1.0) -> dict[str, Any]:
    """The cell's data into `out_uri` and its summary (Bayes AUC, baselines)."""
    examples = int(cell.examples * scale)
    per_hour = -(-examples // cell.hours)
    model = SynthModel.create(cell.profile, seed, cell.first_slot)
    data = write_profile(out_uri, model, START, cell.hours, per_hour, 4, cell.heldout, seed)
    end = format_hour(parse_hour(START) + timedelta(hours=cell.hours - 1))
    return {
        "start": START,
        "end": end,
        "train_examples": len(data.train),
        "heldout_examples": len(data.heldout),
        "format": data.format.name,
        "dense_features": [{"name": d.name, "dim": d.dim} for d in data.format.dense],
        "heldout_bayes_auc": data.bayes_auc,
        **baseline_aucs(data, SPARSE_DIM, model.crosses),
    }


def trainer_json(summary: dict[str, Any], data: str, work: str, passes: int) -> dict[str, Any]:
    """trainer.json for one offline job on a cell's data (`generate_cell` wrote it into the
    directory `data`, `summary` is what it returned), the trainer's defaults otherwise;
    models, checkpoints and scratch under the directory `work`."""
    config: dict[str, Any] = {
        "runner": {
            "train_data_uri": f"file://{data}/train",
            "start_date_hr": summary["start"],
            "end_date_hr": summary["end"],
            "slot_conf": f"{data}/slot.conf",
            "passes": passes,
            "model_uri": f"file://{work}/models",
            "checkpoint_uri": f"file://{work}/checkpoints",
            "eval_data_uri": f"file://{data}/heldout",
            "work_dir": f"{work}/scratch",
            "data_wait_seconds": 0,  # the data is all there
        },
        "hyper_parameters": {},
    }
    if summary["format"] != "elasticctr":
        config["runner"]["data_format"] = summary["format"]
        config["hyper_parameters"]["dense_features"] = summary["dense_features"]
    return config


def verdict(aucs: list[float], bayes: float, lr: float) -> bool:
    """Every pass's held-out AUC within BAYES_MARGIN of Bayes and at least the LR's."""
    return bool(aucs) and all(a >= bayes - BAYES_MARGIN and a >= lr for a in aucs)
