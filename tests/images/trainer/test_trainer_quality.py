"""Model quality without a job: the realistic data profile and its yardsticks, and the
publish gate that keeps a worse version from serving."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from elasticctr_common.storage import open_store
from elasticctr_common.trainer_json import delete_threshold_for, parse_config
from elasticctr_common.versions import Version, append_version, read_versions
from elasticctr_trainer import realistic
from elasticctr_trainer.export import (
    PreparedVersion,
    SparseParts,
    held_back_versions,
    publish_version,
)
from elasticctr_trainer.generate import baseline_aucs, generate_realistic
from elasticctr_trainer.modelcheck import EmbeddingScan
from elasticctr_trainer.roles import Role
from elasticctr_trainer.trainer import Trainer

from tests.support.trainer import run_job, write_config

SPARSE_DIM = 100003  # write_config's


@pytest.fixture(scope="module")
def small_realistic(tmp_path_factory):
    root = tmp_path_factory.mktemp("realistic")
    model, data = generate_realistic(
        f"file://{root}", "20191221/22", hours=3, examples_per_hour=4000, files_per_hour=2,
        heldout=4000, seed=5,
    )  # fmt: skip
    return root, model, data


def slot_ids(line: str) -> list[int]:
    return [int(token.split(":")[1]) for token in line.split()[2:]]


def test_realistic_profile_has_the_shape_of_ad_logs(small_realistic):
    root, model, data = small_realistic
    assert sorted(p.name for p in (root / "train").iterdir()) == ["20191221", "20191222"]
    assert (root / "train/20191222/00/donefile").exists()  # across midnight
    clicks = np.array([int(line.split()[1]) for line in data.train])
    assert 0.03 < clicks.mean() < 0.05
    seen = [slot for line in data.train for slot in slot_ids(line)]
    counts = {slot: seen.count(slot) for slot in model.slot_ids}
    assert counts[model.never_present[0]] == 0
    multi_hot = model.slots[realistic.MULTI_HOT[0]].slot
    assert counts[multi_hot] > 1.5 * len(data.train)  # 1..5 ids where present
    often_empty = model.slots[max(realistic.OFTEN_EMPTY)].slot
    assert counts[often_empty] < 0.6 * len(data.train)
    assert not model.slots[realistic.NOISE].weights.any()
    biggest = model.slots[-1]
    assert len(biggest.feasigns) == 100_000 and biggest.feasigns.max() > 2**63


def test_bayes_auc_bounds_both_logistic_baselines(small_realistic):
    _, model, data = small_realistic
    probs = np.loadtxt(small_realistic[0] / "truth/heldout-probs.txt")
    assert probs == pytest.approx(data.heldout_probs, rel=1e-6)
    baselines = baseline_aucs(data, SPARSE_DIM, [model.interaction])
    assert 0.5 < baselines["lr_auc"] < data.bayes_auc
    assert 0.5 < baselines["lr_crosses_auc"] < data.bayes_auc


def gate_trainer(tmp_path: Path, **runner: object) -> Trainer:
    (tmp_path / "slot.conf").write_text("101\n")
    config = parse_config(
        {
            "runner": {
                "train_data_uri": f"file://{tmp_path}/train",
                "start_date_hr": "20191221/00",
                "end_date_hr": "20191221/00",
                "slot_conf": str(tmp_path / "slot.conf"),
                "model_uri": f"file://{tmp_path}/models",
                "checkpoint_uri": f"file://{tmp_path}/checkpoints",
                "eval_data_uri": f"file://{tmp_path}/heldout",
                **runner,
            }
        }
    )
    models = open_store(f"file://{tmp_path}/models")
    models.write_text("1/dense/meta.json", json.dumps({"eval_auc": 0.80}))
    append_version(models, Version(1, 1, models.uri("1/sparse")))
    return Trainer(config, Role(False, 0, ["localhost:1"], 1))


def test_a_worse_version_is_kept_but_not_published(tmp_path):
    trainer = gate_trainer(tmp_path)
    reason = trainer.publish_gate(0.79)
    assert reason == (
        "held-out AUC 0.7900 is below serving version 1's 0.8000 by more than "
        "runner.publish_margin=0.002"
    )
    assert trainer.publish_gate(0.7985) is None  # within the margin
    assert trainer.publish_gate(0.81) is None
    dense = tmp_path / "prepared" / "dense"
    dense.mkdir(parents=True)
    for name in ("model.pdmodel", "model.pdiparams"):
        (dense / name).write_bytes(b"x")
    parts = SparseParts(dense.parent)
    keys, values = np.array([5], np.uint64), np.ones((1, 2), np.float32)
    parts.add(keys, values)
    scan = EmbeddingScan(10.0)
    scan.add(keys, values)
    prepared = PreparedVersion(dense.parent, {}, parts.close(), parts.records, 1.0, scan)
    models = trainer.models
    kept = publish_version(models, prepared, [101], 100, 2, {"eval_auc": 0.79}, None, reason)
    assert kept.id == 2 and [v.id for v in read_versions(models)] == [1]
    assert held_back_versions(models) == [{"id": 2, "reason": reason}]
    meta = json.loads(models.read_text("2/dense/meta.json"))
    assert meta["published"] is False and meta["held_back"] == reason
    assert models.exists("2/sparse/part-00000")
    # The next version gets its own id, and publishing it leaves the kept one alone.
    published = publish_version(models, prepared, [101], 100, 2, {"eval_auc": 0.81})
    assert published.id == 3 and [v.id for v in read_versions(models)] == [1, 3]


def test_publish_every_version_switches_the_gate_off(tmp_path):
    trainer = gate_trainer(tmp_path, publish_every_version=True)
    assert trainer.publish_gate(0.60) is None


# The CI-sized realistic profile: the largest slot has 300 ids instead of 100,000, so that
# 24,000 examples cover the head and still show a tail (about 20 s of CPU a seed). At this
# size no learner reaches the quality bars (within 0.03 of Bayes, at least the logistic
# regression), which the model meets on the full profile: the logistic regression itself
# is 0.03-0.08 below Bayes-optimal here, and the model needs more data than it to overtake
# it (docs/trainer.md, "Why CI cannot check the bars themselves": CI-sized runs up to
# 96,000 examples, bench/model_quality.py --size ci). It stays within CI_LR_MARGIN of the
# logistic regression and CI_BAYES_MARGIN of Bayes, with room over the gaps measured on
# seeds 1-4 (at most 0.023 and 0.066).
CI_SEEDS = (1, 2, 3)
CI_PROFILE = {"hours": 3, "examples_per_hour": 8000, "files_per_hour": 2, "heldout": 5000}
CI_LR_MARGIN = 0.04
CI_BAYES_MARGIN = 0.10


@pytest.mark.slow
@pytest.mark.parametrize("seed", CI_SEEDS)
def test_published_model_keeps_up_with_logistic_regression(seed, tmp_path):
    _, data = generate_realistic(
        f"file://{tmp_path}/data", "20191221/23", seed=seed, max_vocab=300, **CI_PROFILE
    )
    lr_auc = baseline_aucs(data, SPARSE_DIM, [])["lr_auc"]
    runner = {
        "train_data_uri": f"file://{tmp_path}/data/train",
        "start_date_hr": "20191221/23",
        "end_date_hr": "20191222/01",
        "slot_conf": str(tmp_path / "data/slot.conf"),
        "passes": 2,
        "model_uri": f"file://{tmp_path}/models",
        "checkpoint_uri": f"file://{tmp_path}/checkpoints",
        "eval_data_uri": f"file://{tmp_path}/data/heldout",
        "work_dir": str(tmp_path / "scratch"),
    }
    # The trainer's model defaults; the job tests' sparse_dim and learning rate.
    deletion = {"delete_threshold": delete_threshold_for("offline"), "crosses": "auto"}
    config = write_config(tmp_path / "trainer.json", runner, deletion)
    run_job(config, tmp_path / "logs", pservers=1, trainers=1)
    models = open_store(f"file://{tmp_path}/models")
    published = read_versions(models)[-1].id
    auc = json.loads(models.read_text(f"{published}/dense/meta.json"))["eval_auc"]
    print(
        f"seed {seed}: Bayes {data.bayes_auc:.4f}, LR {lr_auc:.4f}, version {published} {auc:.4f}"
    )
    assert auc >= lr_auc - CI_LR_MARGIN
    assert auc >= data.bayes_auc - CI_BAYES_MARGIN


def test_a_matrix_cell_carries_its_yardsticks_and_the_bars_judge_each_pass(tmp_path):
    """A quality-matrix cell as bench/model_quality.py generates it (the dense cell, at a
    tenth of its size): data in its format, Bayes above both logistic regressions fitted
    in the same run; the verdict fails a run if any pass misses either bar."""
    from elasticctr_trainer.quality import BAYES_MARGIN, CELLS, generate_cell, verdict

    summary = generate_cell(f"file://{tmp_path}", CELLS["dense"], seed=1, scale=0.1)
    assert summary["train_examples"] == 20_000 and summary["heldout_examples"] == 50_000
    assert summary["format"] == "paddlerec"
    assert summary["dense_features"] == [{"name": "dense_feature", "dim": 13}]
    bayes, lr = summary["heldout_bayes_auc"], summary["lr_auc"]
    assert bayes > summary["lr_crosses_auc"] and bayes > lr
    first = next((tmp_path / "train").rglob("part-*")).read_text().splitlines()[0]
    assert first.startswith("click:") and first.count("dense_feature:") == 13
    good = max(lr, bayes - BAYES_MARGIN)
    assert verdict([good, good + 0.001, good], bayes, lr)
    assert not verdict([good, good, lr - 0.001], bayes, lr)
    assert not verdict([bayes - BAYES_MARGIN - 0.001, good, good], bayes, lr)
    assert not verdict([], bayes, lr)


# Matrix cells at CI's size (quality.CELLS "ci-*" at 24,000 examples): the bench's data,
# config and defaults (bench/model_quality.py --cells ci-base ci-dense --scale 0.24), one
# job each. Every pass is held to margins with room over the gaps measured at this size
# on seeds 1-4 (docs/trainer.md, "The matrix's cells in CI": at most 0.006 below the
# logistic regression, 0.076 below Bayes), not to the matrix's own bars, which no
# learner reaches at this size.
CI_CELLS = ("ci-base", "ci-dense")
CI_CELL_SCALE = 0.24
CI_CELL_LR_MARGIN = 0.02
CI_CELL_BAYES_MARGIN = 0.10


@pytest.mark.slow
@pytest.mark.parametrize("name", CI_CELLS)
def test_a_ci_sized_matrix_cell_keeps_up_after_every_pass(name, tmp_path):
    from elasticctr_trainer.quality import CELLS, generate_cell, trainer_json

    data, work = tmp_path / "data", tmp_path / "work"
    summary = generate_cell(f"file://{data}", CELLS[name], seed=1, scale=CI_CELL_SCALE)
    config = tmp_path / "trainer.json"
    config.write_text(json.dumps(trainer_json(summary, str(data), str(work), passes=2)))
    job = run_job(config, tmp_path / "logs", pservers=1, trainers=1)
    aucs = [e["eval_auc"] for e in job.events("trainer-0", "metrics") if "eval_auc" in e]
    bayes, lr = summary["heldout_bayes_auc"], summary["lr_auc"]
    print(f"{name}: Bayes {bayes:.4f}, LR {lr:.4f}, passes {aucs}")
    assert len(aucs) == 2
    for auc in aucs:
        assert auc >= lr - CI_CELL_LR_MARGIN
        assert auc >= bayes - CI_CELL_BAYES_MARGIN
