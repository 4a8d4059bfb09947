"""Where a new model's logit starts: the log-odds of the data's click rate.

A network's output layer starts with a zero bias, a click probability of 0.5 for every
example. On data with a few percent of clicks the first batches spend themselves pulling
that down, and the per-id weights, which every example's gradient reaches, take a share of
the shift that they must unlearn later: measured on the quality matrix's 1%-click cell
(docs/trainer.md, "Where the logit starts"), held-out AUC after pass 1 0.667 -> 0.695 and
after pass 2 0.689 -> 0.709. So trainer 0 of a new model (no checkpoint) sets the output
bias (model.output_bias) to log(r / (1 - r)) before it pushes its dense parameters to the
pservers, r the share of clicked examples in the first lines of the first ready hours.

An offline job's trainer 0 waits for its range's data before it pushes the dense parameters
(the other trainers wait for it that much longer), so a job started before its upload
starts at its data's rate too; an online job waits for partitions one at a time, after the
push, so only a first partition already there at start is read (unless the model's crosses
are `auto`: trainer 0 then waits for it as an offline job does, to choose them from it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from elasticctr_common.datafiles import BadFile
from elasticctr_common.storage import Store
from elasticctr_common.trainer_json import Runner

from .hours import data_files, first_ready
from .lines import Example, LineParser, file_examples

log = logging.getLogger("trainer")
PRIOR_EXAMPLES = 100_000  # enough for a rate of 0.1% to within a tenth of itself (2 sigma)
PRIOR_HOURS = 3  # the first ready ones of the range, at most
# A rate of 0 or 1 has no log-odds; these bounds keep the start within what one batch moves.
RATE_BOUNDS = (1e-4, 1 - 1e-4)


def prior_hours(data: Store, runner: Runner, planned: list[str] | None) -> list[str]:
    """The hours whose click rate starts the logit: the first PRIOR_HOURS of an offline
    job's ready hours (`planned`, what trainer 0 waited for), an online job's first
    partition (hours.first_ready) if its donefile is there now."""
    if runner.mode == "offline":
        return (planned or [])[:PRIOR_HOURS]
    first = first_ready(data, runner.start_date_hr, runner.partition_minutes, 0, 0)
    return [first] if first is not None else []


def click_rate(
    data: Store,
    hours: list[str],
    parser: LineParser,
    limit: int = PRIOR_EXAMPLES,
    observe: Callable[[Example], None] | None = None,
) -> tuple[float, int] | None:
    """(share of clicked examples, examples read) in the first `limit` valid lines of
    `hours`' files, in order, each also given to `observe`; bad lines and files (not text,
    gone) are skipped: the pass counts them against its thresholds. None when there is no
    valid line."""
    examples = clicked = 0
    for hour in hours:
        for name in data_files(data, hour):
            try:
                for example in file_examples(data, name, parser):
                    examples += 1
                    clicked += example.label
                    if observe is not None:
                        observe(example)
                    if examples >= limit:
                        return clicked / examples, examples
            except (BadFile, OSError):  # gone, unreadable: the pass counts it, not this
                continue
    return (clicked / examples, examples) if examples else None


def log_odds(rate: float) -> float:
    low, high = RATE_BOUNDS
    rate = min(max(rate, low), high)
    return math.log(rate / (1 - rate))
