"""Online evaluation: how each served model version does on live traffic, from joined
feedback (the score serving gave an impression, whether it was clicked, the version that
scored it), over a sliding window per version.

Per version: exact ROC AUC on the window (tied scores count half, as the Mann-Whitney
statistic does), calibration (mean predicted CTR / observed CTR: 1 is calibrated, above 1
over-predicts) and log loss (scores clipped to [EPS, 1 - EPS]). The window holds a
version's newest `window_examples` examples, and only those served within
`window_seconds` of the newest example of any version (data time, not the clock: a
version no longer served leaves the window as traffic moves on, and a replay gives the
same figures). Standard library only: the joiner runs it on each partition it closes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

EPS: Final = 1e-15
WINDOW_EXAMPLES: Final = 100_000
WINDOW_SECONDS: Final = 3600.0


@dataclass(frozen=True)
class Quality:
    """One version's figures on its window; NaN where undefined (AUC with one class only,
    calibration without a click)."""

    examples: int
    clicks: int
    auc: float
    calibration: float
    log_loss: float

    @classmethod
    def from_json(cls, q: dict[str, Any]) -> Quality:
        """As as_json wrote it (null: NaN); ValueError naming what is wrong."""
        try:
            figures = {
                k: math.nan if q.get(k) is None else float(q[k])
                for k in ("auc", "calibration", "log_loss")
            }
            return cls(examples=int(q["examples"]), clicks=int(q["clicks"]), **figures)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"online figures {q!r}: {err!r}") from None

    def as_json(self) -> dict[str, float | int | None]:
        """As the joiner's /status gives it (and `elasticctr status` reads): NaN is null."""
        return {
            "examples": self.examples,
            "clicks": self.clicks,
            **{
                key: None if math.isnan(value) else value
                for key, value in (
                    ("auc", self.auc),
                    ("calibration", self.calibration),
                    ("log_loss", self.log_loss),
                )
            },
        }


def auc(scores: Iterable[float], labels: Iterable[int]) -> float:
    """Exact ROC AUC: the share of (clicked, unclicked) pairs the scores order right, a
    tie counting half; NaN unless both classes are present. O(n log n)."""
    pairs = sorted(zip(scores, labels, strict=True))
    positives = sum(1 for _, y in pairs if y)
    negatives = len(pairs) - positives
    if positives == 0 or negatives == 0:
        return math.nan
    rank_sum = 0.0  # of the positives, ties sharing their average rank (1-based)
    i = 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        tied_positives = sum(1 for _, y in pairs[i:j] if y)
        rank_sum += tied_positives * (i + 1 + j) / 2.0
        i = j
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def log_loss(scores: Iterable[float], labels: Iterable[int]) -> float:
    """Mean negative log-likelihood, scores clipped to [EPS, 1 - EPS]; NaN if empty."""
    total, n = 0.0, 0
    for p, y in zip(scores, labels, strict=True):
        p = min(max(p, EPS), 1.0 - EPS)
        total -= math.log(p) if y else math.log1p(-p)
        n += 1
    return total / n if n else math.nan


def quality(scores: list[float], labels: list[int]) -> Quality:
    clicks = sum(1 for y in labels if y)
    observed = clicks / len(labels) if labels else 0.0
    predicted = sum(scores) / len(scores) if scores else math.nan
    return Quality(
        examples=len(labels),
        clicks=clicks,
        auc=auc(scores, labels),
        calibration=predicted / observed if observed > 0 else math.nan,
        log_loss=log_loss(scores, labels),
    )


class OnlineEvaluator:
    """The sliding windows of every version; `add` joined examples, then `evaluate`."""

    def __init__(
        self, window_examples: int = WINDOW_EXAMPLES, window_seconds: float = WINDOW_SECONDS
    ) -> None:
        if window_examples < 1 or not window_seconds > 0:
            raise ValueError(
                f"online evaluation window: need examples >= 1 and seconds > 0, got "
                f"{window_examples} examples, {window_seconds} seconds"
            )
        self.window_examples, self.window_seconds = window_examples, window_seconds
        # version -> (time, score, label), in the order added
        self._windows: dict[int, deque[tuple[float, float, int]]] = {}
        self._newest = -math.inf

    def add(self, version: int, time: float, score: float, label: int) -> None:
        """One joined example: served at `time` by `version` with `score`, `label` 1 if
        clicked. A score outside [0, 1] or not finite is refused (ValueError naming it)."""
        if not (math.isfinite(score) and 0.0 <= score <= 1.0):
            raise ValueError(f"score {score!r} of version {version}: must be in [0, 1]")
        window = self._windows.get(version)
        if window is None:
            window = self._windows[version] = deque(maxlen=self.window_examples)
        window.append((time, score, 1 if label else 0))
        self._newest = max(self._newest, time)

    def _trim(self) -> None:
        oldest = self._newest - self.window_seconds
        for version in list(self._windows):
            window = self._windows[version]
            kept = [e for e in window if e[0] >= oldest]
            if not kept:
                del self._windows[version]
            elif len(kept) < len(window):
                self._windows[version] = deque(kept, maxlen=self.window_examples)

    def evaluate(self) -> dict[int, Quality]:
        """Each version with examples in its window, and its figures."""
        self._trim()
        return {
            version: quality([e[1] for e in window], [e[2] for e in window])
            for version, window in sorted(self._windows.items())
        }
