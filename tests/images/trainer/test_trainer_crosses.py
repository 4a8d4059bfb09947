"""Crossed ids in training: which pairs `auto` chooses (auto_crosses.py), and a job of a new
model with crosses `auto` as real processes (1 pserver + 2 trainers): trainer 0 chooses
them from the data, trainer 1 adopts them from its welcome, the version lists them and
its exported model, fed the crossed keys, gives the trainer's own predictions; a resumed
job keeps them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from elasticctr_common.crosses import AUTO_CROSS_SLOTS
from elasticctr_trainer.auto_crosses import SlotSample, auto_cross_count, choose_crosses
from elasticctr_trainer.lines import LineParser

from tests.support.trainer import exported_predictions, full_table, run_job, write_config

HERE = Path(__file__).parent


def sample_of(lines: list[str], slots: list[int]) -> SlotSample:
    parser = LineParser(slots, 1000003)
    sample = SlotSample(len(slots))
    for line in lines:
        sample.add(parser.parse(line))
    return sample


def test_auto_crosses_the_smallest_single_hot_slots():
    slots = list(range(1, 11))
    lines = []
    for i in range(400):
        tokens = [f"{i % (2 + s)}:{s}" for s in range(1, 11)]  # slot s: 2 + s ids
        tokens += [f"{i % 2}:4", "7:9"]  # slot 4 multi-hot; slot 9 often one id more...
        if i % 3:
            tokens.remove(f"{i % 11}:9")  # ...but single-hot where that id was dropped
        lines.append("1 0 " + " ".join(tokens))
    chosen = choose_crosses(sample_of(lines, slots), slots)
    # Slot 4 is multi-hot in every example, slot 9 in a third of them: neither is crossed;
    # the 7 smallest of the others are 1, 2, 3, 5, 6, 7, 8.
    picked = [1, 2, 3, 5, 6, 7, 8]
    assert chosen == [[a, b] for i, a in enumerate(picked) for b in picked[i + 1 :]]
    assert len(chosen) == auto_cross_count(len(slots)) == 21


def test_slots_of_one_id_are_crossed_last_and_the_count_is_kept():
    slots = list(range(1, 9))
    # Slot 1 has one id; slots 2 and 3 are multi-hot; 4..8 single-hot of 7..11 ids.
    lines = [
        "1 0 3:1 " + " ".join(f"{1 + i % 5}:{s} {1 + (i + 1) % 5}:{s}" for s in (2, 3)) + " "
        + " ".join(f"{1 + i % (3 + s)}:{s}" for s in range(4, 9))
        for i in range(200)
    ]  # fmt: skip
    chosen = choose_crosses(sample_of(lines, slots), slots)
    assert len(chosen) == auto_cross_count(len(slots)) == 21
    crossed = {s for pair in chosen for s in pair}
    # The five single-hot slots, then two others by their ids: slot 1 (one id) and slot 2
    # (five ids, before slot 3's five by slot.conf's order).
    assert crossed == {1, 2, 4, 5, 6, 7, 8}
    assert auto_cross_count(1) == 0 and auto_cross_count(AUTO_CROSS_SLOTS + 5) == 21


def test_without_data_auto_crosses_slot_confs_first_slots():
    slots = list(range(101, 111))
    chosen = choose_crosses(SlotSample(len(slots)), slots)
    assert {s for pair in chosen for s in pair} == set(slots[:AUTO_CROSS_SLOTS])


@pytest.fixture(scope="module")
def crossed_job(tmp_path_factory):
    from elasticctr_trainer.generate import generate

    root = tmp_path_factory.mktemp("crossed")
    generate(
        f"file://{root}/data", slot_count=4, vocab=30, start="20191221/00", hours=1,
        examples_per_hour=8000, files_per_hour=2, heldout=1000, seed=5,
    )  # fmt: skip
    work = root / "work"
    work.mkdir()
    runner = {
        "train_data_uri": f"file://{root}/data/train",
        "start_date_hr": "20191221/00",
        "end_date_hr": "20191221/00",
        "slot_conf": str(root / "data" / "slot.conf"),
        "passes": 1,
        "model_uri": f"file://{work}/models",
        "checkpoint_uri": f"file://{work}/checkpoints",
        "eval_data_uri": f"file://{root}/data/heldout",
        "publish_every_version": True,
        "work_dir": str(work / "scratch"),
        "data_wait_seconds": 0,
    }
    hyper = {"crosses": "auto", "sparse_dim": 100003}
    first = run_job(write_config(work / "trainer.json", runner, hyper), work / "logs-1", 1, 2)
    resumed = {**runner, "passes": 2}
    second = run_job(write_config(work / "resume.json", resumed, hyper), work / "logs-2", 1, 2)
    return root, work, first, second


def test_trainer_0_chooses_auto_crosses_and_the_version_lists_them(crossed_job):
    _, work, first, _ = crossed_job
    (event,) = first.events("trainer-0", "crosses")
    slots = [101, 102, 103, 104]
    assert event["chosen"] == [[a, b] for i, a in enumerate(slots) for b in slots[i + 1 :]]
    assert event["examples"] == 8000 and first.events("trainer-1", "crosses") == []
    meta = json.loads((work / "models/1/dense/meta.json").read_text())
    assert meta["crosses"] == event["chosen"] and len(meta["feed_names"]) == 4 + 6
    index = (work / "checkpoints" / "index").read_text().splitlines()
    assert json.loads(index[0])["layout"]["crosses"] == event["chosen"]


def test_a_resumed_job_keeps_its_crosses(crossed_job):
    _, work, first, second = crossed_job
    assert second.events("trainer-0", "crosses") == []  # nothing chosen again
    (chosen,) = first.events("trainer-0", "crosses")
    meta = json.loads((work / "models/2/dense/meta.json").read_text())
    assert meta["crosses"] == chosen["chosen"]


def test_the_exported_model_fed_the_crossed_keys_gives_the_trainers_predictions(
    crossed_job, tmp_path
):
    root, work, _, _ = crossed_job
    dense = work / "models/2/dense"
    meta = json.loads((dense / "meta.json").read_text())
    keys, values = full_table(work / "models", 2)
    table = {int(k): v for k, v in zip(keys, values, strict=True)}
    parser = LineParser(meta["slots"], meta["sparse_dim"], crosses=meta["crosses"])
    heldout = (root / "data" / "heldout" / "part-00000").read_text().splitlines()
    zero = np.zeros(values.shape[1], dtype=np.float32)
    pooled = {name: np.zeros((len(heldout), values.shape[1]), np.float32)
              for name in meta["feed_names"]}  # fmt: skip
    for row, line in enumerate(heldout):
        for name, input_keys in zip(meta["feed_names"], parser.parse(line).keys, strict=True):
            pooled[name][row] = sum((table.get(k, zero) for k in input_keys), zero)
    served = exported_predictions(dense, pooled, tmp_path)
    trainer = np.loadtxt(work / "models/2/eval/predictions.txt")
    assert served.shape == trainer.shape == (len(heldout),)
    assert np.max(np.abs(served - trainer)) <= 1e-5
