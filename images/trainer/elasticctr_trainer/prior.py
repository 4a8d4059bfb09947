"""Where a new model's logit starts: the log-odds of the data's click rate.

A network's output layer starts with a zero bias, a click probability of 0.5 for every
example. On data with a few percent of clicks the first batches spend themselves pulling
that down, and the per-id weights, which every example's gradient reaches, take a share of
the shift that they must unlearn later: measured on the quality matrix's 1%-click cell
(docs/trainer.md, "Where the logit starts"), held-out AUC after pass 1 0.667 -> 0.695 and
after pass 2 0.689 -> 0.709. So trainer 0 of a new model (no checkpoint) sets the output
bias (model.output_bias) to log(r / (1 - r)) before it pushes its dense parameters to the
pservers, r the share of clicked examples in the first lines of the first ready hours.

Only data already there at start is read: a job that must wait for its data starts at 0, as
before (the plan is made after the dense parameters are pushed, and the other trainers wait
for them only so long).
"""

from __future__ import annotations

import logging
import math

from elasticctr_common.datafiles import BadFile
from elasticctr_common.storage import Store
from elasticctr_common.trainer_json import Runner

from .hours import data_files, hour_range, is_ready
from .lines import LineParser, file_examples

log = logging.getLogger("trainer")
PRIOR_EXAMPLES = 100_000  # enough for a rate of 0.1% to within a tenth of itself (2 sigma)
PRIOR_HOURS = 3  # the first ready ones of the range, at most
# A rate of 0 or 1 has no log-odds; these bounds keep the start within what one batch moves.
RATE_BOUNDS = (1e-4, 1 - 1e-4)


def first_ready_hours(data: Store, runner: Runner) -> list[str]:
    """Up to PRIOR_HOURS hours of the job's range whose donefile is there now."""
    if runner.mode == "offline" and runner.end_date_hr is not None:
        candidates = hour_range(runner.start_date_hr, runner.end_date_hr)
    else:
        candidates = [runner.start_date_hr]
    ready = []
    for hour in candidates:
        if is_ready(data, hour):
            ready.append(hour)
            if len(ready) == PRIOR_HOURS:
                break
    return ready


def click_rate(
    data: Store, hours: list[str], parser: LineParser, limit: int = PRIOR_EXAMPLES
) -> tuple[float, int] | None:
    """(share of clicked examples, examples read) in the first `limit` valid lines of
    `hours`' files, in order; bad lines and files (not text, gone) are skipped: the pass
    counts them against its thresholds. None when there is no valid line."""
    examples = clicked = 0
    for hour in hours:
        for name in data_files(data, hour):
            try:
                for example in file_examples(data, name, parser):
                    examples += 1
                    clicked += example.label
                    if examples >= limit:
                        return clicked / examples, examples
            except (BadFile, OSError):  # gone, unreadable: the pass counts it, not this
                continue
    return (clicked / examples, examples) if examples else None


def log_odds(rate: float) -> float:
    low, high = RATE_BOUNDS
    rate = min(max(rate, low), high)
    return math.log(rate / (1 - rate))
