"""Online evaluation per served version: exact AUC (ties half) against sklearn and a
brute-force pairwise count, log loss against sklearn, calibration by hand, and the
sliding windows (by count per version, by data time across versions)."""

from __future__ import annotations

import math
import random

import pytest
from elasticctr_common.online_eval import EPS, OnlineEvaluator, auc, log_loss, quality
from sklearn.metrics import log_loss as sk_log_loss
from sklearn.metrics import roc_auc_score


def pairwise_auc(scores, labels) -> float:
    """Every (clicked, unclicked) pair: 1 if ordered right, 1/2 if tied."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(6))
def test_auc_is_exact_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 400)
    # Few distinct scores: many ties, within and across the classes.
    scores = [round(rng.random(), 1) for _ in range(n)]
    labels = [int(rng.random() < 0.2 + 0.6 * s) for s in scores]
    labels[0], labels[1] = 0, 1  # both classes
    got = auc(scores, labels)
    assert got == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)
    assert got == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_auc_of_known_cases():
    assert auc([0.1, 0.9], [0, 1]) == 1.0
    assert auc([0.9, 0.1], [0, 1]) == 0.0
    assert auc([0.5, 0.5, 0.5], [0, 1, 1]) == 0.5  # all tied: a coin
    assert math.isnan(auc([0.2, 0.3], [1, 1]))  # one class: undefined


def test_log_loss_and_calibration():
    rng = random.Random(3)
    scores = [rng.uniform(0.01, 0.99) for _ in range(500)]
    labels = [int(rng.random() < s) for s in scores]
    assert log_loss(scores, labels) == pytest.approx(sk_log_loss(labels, scores), rel=1e-12)
    q = quality(scores, labels)
    assert q.calibration == pytest.approx((sum(scores) / 500) / (sum(labels) / 500), rel=1e-12)
    assert (q.examples, q.clicks) == (500, sum(labels))
    # A certain, wrong score costs -log(EPS), not infinity.
    assert log_loss([0.0, 1.0], [1, 0]) == pytest.approx(-math.log(EPS), rel=1e-3)
    assert math.isnan(quality([0.2, 0.4], [0, 0]).calibration)  # no click: undefined


def test_each_version_has_its_own_window_of_its_newest_examples():
    ev = OnlineEvaluator(window_examples=4, window_seconds=1000)
    for i, (s, y) in enumerate([(0.9, 0), (0.8, 0), (0.1, 1), (0.2, 1), (0.7, 1), (0.3, 0)]):
        ev.add(1, 100.0 + i, s, y)  # the first two leave the window of 4
    for i in range(10):
        ev.add(2, 100.0 + i, 0.5, i % 2)
    got = ev.evaluate()
    assert got[1].examples == 4 and got[1].auc == pairwise_auc([0.1, 0.2, 0.7, 0.3], [1, 1, 1, 0])
    assert (got[2].examples, got[2].clicks, got[2].auc) == (4, 2, 0.5)


def test_a_version_no_longer_served_leaves_the_window_as_traffic_moves_on():
    ev = OnlineEvaluator(window_examples=100, window_seconds=60)
    ev.add(1, 1000.0, 0.3, 1)
    ev.add(1, 1000.0, 0.2, 0)
    ev.add(2, 1050.0, 0.4, 1)
    assert sorted(ev.evaluate()) == [1, 2]
    ev.add(2, 1061.0, 0.1, 0)  # version 1's examples are now more than 60 s older
    assert sorted(ev.evaluate()) == [2]
    assert ev.evaluate()[2].examples == 2


@pytest.mark.parametrize("score", [-0.1, 1.5, math.nan, math.inf])
def test_a_score_outside_0_1_is_refused_naming_it(score):
    with pytest.raises(ValueError, match=r"score .* of version 7: must be in \[0, 1\]"):
        OnlineEvaluator().add(7, 1.0, score, 0)


def test_a_window_of_nothing_is_refused():
    with pytest.raises(ValueError, match="need examples >= 1 and seconds > 0, got 0 examples"):
        OnlineEvaluator(window_examples=0)


def test_figures_as_json_have_null_where_undefined() -> None:
    """One class only: no AUC and, without a click, no calibration; JSON has no NaN."""
    import json

    figures = quality([0.2, 0.4], [0, 0]).as_json()
    assert figures == {
        "examples": 2,
        "clicks": 0,
        "auc": None,
        "calibration": None,
        "log_loss": figures["log_loss"],
    }
    assert figures["log_loss"] is not None and figures["log_loss"] > 0
    assert json.loads(json.dumps(figures, allow_nan=False)) == figures
