"""The simulator's pieces without serving: the drift changes the truth as documented, the
generated lines become the request instances serving reads, and the summary's AUCs are
the served scores' and the true probabilities', on the clicks and in expectation over them."""

from __future__ import annotations

import numpy as np
import pytest
from elasticctr_trainer.generate import SyntheticModel
from elasticctr_trainer.metrics import auc
from elasticctr_trainer.simulate import (
    NEW_ITEM,
    RECOVERY_IMPRESSIONS,
    drifted,
    instances_of,
    recovery,
    summarize,
)


def test_the_drift_makes_a_new_item_popular_and_flips_a_slot():
    truth = SyntheticModel.create(4, 50, seed=3)
    after = drifted(truth)
    assert after.feasigns[0][0] == NEW_ITEM and truth.feasigns[0][0] != NEW_ITEM
    assert after.weights[0][0] > np.abs(truth.weights[0]).max()  # the strongest effect
    np.testing.assert_array_equal(after.weights[1], -truth.weights[1])
    np.testing.assert_array_equal(after.weights[2], truth.weights[2])
    rng = np.random.default_rng(1)
    lines, _ = after.sample(2000, rng)
    # rank 0 is the most popular pick: the new item shows up often
    share = sum(f"{NEW_ITEM}:{truth.slots[0]}" in line for line in lines) / len(lines)
    assert share > 0.05


def test_lines_become_instances_slot_by_slot():
    lines = ["1 0 11:101 12:101 13:102", "1 1 7:103"]
    assert instances_of(lines) == [
        {"slots": [{"slot_name": "101", "feasigns": [11, 12]},
                   {"slot_name": "102", "feasigns": [13]}]},
        {"slots": [{"slot_name": "103", "feasigns": [7]}]},
    ]  # fmt: skip


def test_the_summary_per_version_and_drift_phase():
    rng = np.random.default_rng(5)
    records = []
    for n in range(400):
        p = float(rng.random())
        clicked = bool(rng.random() < p)
        records.append({
            "rid": f"r{n // 4}", "i": n % 4, "v": 1 + (n >= 200), "drifted": n >= 300,
            "s": p if n < 200 else 1 - p, "p": p, "click_at": 1.0 if clicked else None,
            "late": clicked and n % 10 == 0,
        })  # fmt: skip
    summary = summarize(records)
    assert (summary["requests"], summary["impressions"]) == (100, 400)
    rows = {(r["version"], r["drifted"]): r for r in summary["versions"]}
    assert set(rows) == {(1, False), (2, False), (2, True)}
    first = records[:200]
    labels = np.array([r["click_at"] is not None for r in first])
    assert rows[(1, False)]["auc"] == pytest.approx(auc(labels, np.array([r["s"] for r in first])))
    assert rows[(1, False)]["auc"] == pytest.approx(rows[(1, False)]["bayes_auc"])
    assert rows[(2, False)]["auc"] == pytest.approx(1 - rows[(2, False)]["bayes_auc"])
    # In expectation over the clicks: scored as the truth ranks, a version is the Bayes
    # ranking; scored the other way round, one minus it.
    one, two = rows[(1, False)], rows[(2, True)]
    assert one["expected_auc"] == pytest.approx(one["bayes_expected_auc"])
    assert two["expected_auc"] == pytest.approx(1 - two["bayes_expected_auc"])
    assert 0.5 < one["bayes_expected_auc"] < 1


def test_the_recovery_compares_the_first_and_last_versions_on_drifted_traffic():
    def row(version: int, drifted: bool, impressions: int, served: float) -> dict:
        return {"version": version, "drifted": drifted, "impressions": impressions,
                "expected_auc": served, "bayes_expected_auc": 0.83}  # fmt: skip

    rows = [
        row(3, False, 2000, 0.80),
        row(3, True, RECOVERY_IMPRESSIONS - 1, 0.60),  # too little drifted traffic to count
        row(4, True, 1900, 0.73),
        row(5, True, 1200, 0.77),
        row(6, True, 100, 0.81),  # served only in the last seconds
    ]
    found = recovery(rows)
    assert found is not None
    assert (found["first"]["version"], found["last"]["version"]) == (4, 5)
    assert found["first"]["gap"] == pytest.approx(0.10)
    assert found["gap_closed"] == pytest.approx(0.04)
    assert recovery(rows[:1]) is None  # no drift
