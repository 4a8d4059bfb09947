"""The canary's contract: which requests the candidate scores, the standard error of an
online AUC against its spread over simulated windows, and the decision (wait, promote,
roll back) with its error rates when the transfer looks again at every partition."""

from __future__ import annotations

import math

import numpy as np
import pytest
from elasticctr_common import canary
from elasticctr_common.online_eval import OnlineEvaluator, Quality


def window(rng: np.random.Generator, separation: float, n: int, ctr: float = 0.05) -> Quality:
    """A version's window of `n` joined impressions: binormal scores whose classes are
    `separation` standard deviations apart (AUC = Phi(separation / sqrt 2)). Figures by
    numpy (continuous scores have no ties); online_eval's own are tested on their own."""
    labels = rng.random(n) < ctr
    logits = rng.normal(0.0, 1.0, n) + separation * labels - 3.0
    scores = 1.0 / (1.0 + np.exp(-logits))
    ranks = np.empty(n)
    ranks[np.argsort(scores)] = np.arange(1, n + 1)
    pos = int(labels.sum())
    auc = (ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * (n - pos))
    loss = -np.mean(np.where(labels, np.log(scores), np.log1p(-scores)))
    return Quality(n, pos, float(auc), float(scores.mean() / labels.mean()), float(loss))


def test_the_share_is_stable_per_id_and_uniform():
    ids = [f"4f2a9c1e0b7d-{i}" for i in range(20_000)]
    shares = [canary.request_share(i) for i in ids]
    assert shares == [canary.request_share(i) for i in ids]  # every replica agrees
    assert all(0.0 <= s < 1.0 for s in shares)
    for fraction in (0.01, 0.1, 0.5):
        chosen = sum(canary.routes_to_candidate(i, fraction) for i in ids) / len(ids)
        assert chosen == pytest.approx(fraction, abs=4 * math.sqrt(fraction / len(ids)) + 1e-3)
    assert not any(canary.routes_to_candidate(i, 0.0) for i in ids)


def test_the_standard_error_matches_the_spread_of_simulated_aucs():
    rng = np.random.default_rng(5)
    for separation, n in ((1.0, 6000), (0.3, 20_000)):
        windows = [window(rng, separation, n) for _ in range(300)]
        spread = float(np.std([w.auc for w in windows]))
        predicted = float(
            np.mean(
                [canary.auc_standard_error(w.auc, w.clicks, w.examples - w.clicks) for w in windows]
            )
        )
        assert predicted == pytest.approx(spread, rel=0.2), (separation, spread, predicted)


def test_undefined_aucs_have_no_standard_error():
    assert canary.auc_standard_error(0.7, 0, 10) == math.inf
    assert canary.auc_standard_error(math.nan, 10, 10) == math.inf
    assert 0 < canary.auc_standard_error(1.0, 10, 10) < 0.1  # perfect, yet not certain


def test_nothing_is_decided_before_each_version_has_enough_of_both_classes():
    base = Quality(examples=5000, clicks=250, auc=0.75, calibration=1.0, log_loss=0.2)
    few = Quality(examples=2000, clicks=40, auc=0.40, calibration=1.0, log_loss=0.3)
    d = canary.decide(base, few, min_clicks=100)
    assert d.decision == canary.WAIT and "candidate" in d.reason and "100 clicked" in d.reason
    assert d.candidate == few.as_json() and d.difference is None
    assert canary.decide(base, None).decision == canary.WAIT
    late = canary.decide(base, few, min_clicks=100, elapsed=4000, max_seconds=3600)
    assert late.decision == canary.ROLLBACK and "no decision within 3600s" in late.reason


def test_a_worse_version_is_rolled_back_and_an_equal_one_promoted():
    rng = np.random.default_rng(11)
    base = window(rng, 1.0, 20_000)
    shuffled = window(rng, 0.0, 4000)  # trained on shuffled labels: AUC about 0.5
    d = canary.decide(base, shuffled, min_clicks=100)
    assert d.decision == canary.ROLLBACK, d
    assert d.difference is not None and d.difference < -0.15
    assert d.z is not None and d.critical_z is not None and d.z < -d.critical_z
    assert "worse by more than 0.01" in d.reason
    same = canary.decide(base, window(rng, 1.0, 20_000), min_clicks=100, margin=0.05)
    assert same.decision == canary.PROMOTE, same
    assert same.as_json()["baseline"]["examples"] == base.examples


def test_error_rates_with_a_look_at_every_partition():
    """Looks at 10 growing windows per trial: a version as good as the baseline is almost
    never rolled back, a clearly worse one (AUC 0.1 lower) never promoted."""
    rng = np.random.default_rng(3)

    def trial(candidate_separation: float) -> str:
        base = window(rng, 1.0, 60_000)
        for look in range(1, 11):
            d = canary.decide(base, window(rng, candidate_separation, 2000 * look), margin=0.03)
            if d.decision != canary.WAIT:
                return d.decision
        return canary.WAIT

    equal = [trial(1.0) for _ in range(100)]
    worse = [trial(0.6) for _ in range(100)]  # AUC 0.76 -> 0.66
    assert equal.count(canary.ROLLBACK) <= 5, equal
    assert equal.count(canary.PROMOTE) >= 60, equal
    assert worse.count(canary.PROMOTE) == 0, worse
    assert worse.count(canary.ROLLBACK) >= 80, worse


def test_a_confidence_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="confidence must be in"):
        canary.decide(None, None, confidence=1.0)


def test_the_joiners_figures_read_back_as_they_were_written():
    evaluator = OnlineEvaluator()
    for i in range(200):
        evaluator.add(3, float(i), (i % 10) / 10, int(i % 7 == 0))
        evaluator.add(4, float(i), 0.5, int(i % 9 == 0))
    evaluator.add(5, 199.0, 0.2, 0)  # one class only: AUC and calibration undefined
    online = evaluator.evaluate()
    status = {"state": "running", "online": {str(v): q.as_json() for v, q in online.items()}}
    read = canary.online_figures(status)
    assert read.keys() == online.keys()
    assert read[3] == online[3] and read[4] == online[4]
    assert math.isnan(read[5].auc) and math.isnan(read[5].calibration)
    assert canary.online_figures({"state": "starting"}) == {}
    with pytest.raises(ValueError, match="online figures"):
        canary.online_figures({"online": {"3": {"auc": 0.7}}})
    with pytest.raises(ValueError, match='"online" must be an object'):
        canary.online_figures({"online": [1]})
