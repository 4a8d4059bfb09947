"""The canary: a new version serves a share of requests beside the committed one until the
joined feedback tells whether it is worse, then it is promoted everywhere or rolled back.

Written once for the three parts that take part (docs/monitoring.md, "Canary"):
- cube-transfer stages the version (every cube-server holds it beside the committed one),
  asks the joiner for each version's online figures (`GET /status`, "online", as
  online_eval.Quality.as_json writes them) and `decide`s; its `/status` says `canary`;
- serving reads that `canary` and scores the requests whose id `routes_to_candidate` with
  the candidate, its cube lookups pinned to it; every impression records its version;
- the program sets the transfer's variables (CanaryEnv) from the stack's `canary` section.

The test: each version's online AUC, with the standard error of Hanley and McNeil (1982),
which needs only the AUC and the counts of clicked and unclicked impressions. The two
versions score disjoint sets of requests, so the errors add in quadrature. The candidate
is promoted once it is, at `confidence`, no worse than the baseline by more than `margin`
(d + margin > z * se, d = AUC_candidate - AUC_baseline) and rolled back once it is, at the
same confidence, worse than that (d + margin < -z * se). Until each version has
`min_clicks` clicked and as many unclicked impressions in its window, the normal
approximation does not hold and nothing is decided; without a decision after
`max_seconds` the candidate is rolled back (the committed version never stopped serving).
The transfer looks again at each of the joiner's partition closes: repeated looks raise
the error rates above 1 - confidence, which is why the default confidence is high.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Final

from .online_eval import Quality

FRACTION: Final = 0.1
MARGIN: Final = 0.01
CONFIDENCE: Final = 0.99
MIN_CLICKS: Final = 100
MAX_SECONDS: Final = 3600

PROMOTE: Final = "promote"
ROLLBACK: Final = "rollback"
WAIT: Final = "wait"
# Transfer's canary phases: serving scores the candidate's share only in "serving".
SERVING: Final = "serving"
DRAINING: Final = "draining"  # rolled back: readers leave the candidate before it is unloaded


class CanaryEnv:
    """cube-transfer's canary variables (each defaults an option of `transfer`)."""

    FRACTION: Final = "CANARY_FRACTION"  # 0: no canary, versions switch at once
    MARGIN: Final = "CANARY_MARGIN"
    CONFIDENCE: Final = "CANARY_CONFIDENCE"
    MIN_CLICKS: Final = "CANARY_MIN_CLICKS"
    MAX_SECONDS: Final = "CANARY_MAX_SECONDS"
    JOINER_URL: Final = "CANARY_JOINER_URL"  # the joiner's status port


def request_share(request_id: str) -> float:
    """Where a request id falls in [0, 1): the same for every replica and every retry."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def routes_to_candidate(request_id: str, fraction: float) -> bool:
    return request_share(request_id) < fraction


def auc_standard_error(auc: float, positives: int, negatives: int) -> float:
    """Hanley and McNeil's standard error of an AUC from `positives` clicked and
    `negatives` unclicked examples; inf when either is 0 or the AUC is undefined."""
    if positives < 1 or negatives < 1 or not math.isfinite(auc):
        return math.inf
    q1, q2 = auc / (2.0 - auc), 2.0 * auc * auc / (1.0 + auc)
    variance = (
        auc * (1.0 - auc) + (positives - 1) * (q1 - auc * auc) + (negatives - 1) * (q2 - auc * auc)
    ) / (positives * negatives)
    # An AUC of exactly 0 or 1 has variance 0 by the formula; one pair's worth stands in.
    return math.sqrt(max(variance, 1.0 / (4.0 * positives * negatives)))


@dataclass(frozen=True)
class Decision:
    """What the figures say, with the numbers behind it (recorded in the history, the
    status and MLflow)."""

    decision: str  # PROMOTE, ROLLBACK or WAIT
    reason: str
    baseline: dict[str, Any] | None
    candidate: dict[str, Any] | None
    difference: float | None = None  # candidate AUC - baseline AUC
    standard_error: float | None = None
    z: float | None = None  # (difference + margin) / standard_error
    critical_z: float | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _enough(q: Quality | None, min_clicks: int) -> bool:
    return (
        q is not None
        and q.clicks >= min_clicks
        and q.examples - q.clicks >= min_clicks
        and math.isfinite(q.auc)
    )


def decide(
    baseline: Quality | None,
    candidate: Quality | None,
    *,
    margin: float = MARGIN,
    confidence: float = CONFIDENCE,
    min_clicks: int = MIN_CLICKS,
    elapsed: float = 0.0,
    max_seconds: float = MAX_SECONDS,
) -> Decision:
    """The decision on `candidate` against `baseline` (their windows' figures), after the
    canary has served for `elapsed` seconds."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"canary confidence must be in [0.5, 1), got {confidence}")
    before = (baseline.as_json() if baseline else None, candidate.as_json() if candidate else None)
    if not (_enough(baseline, min_clicks) and _enough(candidate, min_clicks)):
        missing = " and ".join(
            name
            for name, q in (("baseline", baseline), ("candidate", candidate))
            if not _enough(q, min_clicks)
        )
        need = f"{min_clicks} clicked and {min_clicks} unclicked joined impressions"
        if elapsed >= max_seconds:
            reason = f"no decision within {max_seconds:g}s: {missing} without {need}"
            return Decision(ROLLBACK, reason, *before)
        return Decision(WAIT, f"waiting for {need} of the {missing}", *before)
    assert baseline is not None and candidate is not None
    difference = candidate.auc - baseline.auc
    se = math.hypot(
        auc_standard_error(baseline.auc, baseline.clicks, baseline.examples - baseline.clicks),
        auc_standard_error(candidate.auc, candidate.clicks, candidate.examples - candidate.clicks),
    )
    critical = NormalDist().inv_cdf(confidence)
    z = (difference + margin) / se
    auc_text = f"online AUC {candidate.auc:.4f} against {baseline.auc:.4f} (se {se:.4f})"
    if z > critical:
        verdict = PROMOTE
        reason = f"{auc_text}: not worse by more than {margin:g} at confidence {confidence:g}"
    elif z < -critical:
        verdict = ROLLBACK
        reason = f"{auc_text}: worse by more than {margin:g} at confidence {confidence:g}"
    elif elapsed >= max_seconds:
        verdict = ROLLBACK
        reason = f"{auc_text}: no decision within {max_seconds:g}s at confidence {confidence:g}"
    else:
        verdict, reason = WAIT, f"{auc_text}: not decided yet"
    return Decision(verdict, reason, *before, difference, se, z, critical)


def online_figures(joiner_status: dict[str, Any]) -> dict[int, Quality]:
    """Each version's figures from the joiner's `/status` (its "online")."""
    online = joiner_status.get("online") or {}
    if not isinstance(online, dict):
        raise ValueError(f'the joiner\'s "online" must be an object, got {online!r}')
    return {int(version): Quality.from_json(q) for version, q in online.items()}
