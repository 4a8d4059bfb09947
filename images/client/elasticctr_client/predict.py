"""`predict`: example lines -> serving, in batches; probabilities and AUC.

Lines are ElasticCTR's `<show> <click> <feasign>:<slot> ...` or PaddleRec's slot format
`click:<0|1> <dense>:<value> ... <slot>:<feasign> ...` (docs/architecture.md), read as the
trainer reads them (elasticctr_common.lines): the format the served model was trained on
(its /status `data_format`) unless one is given, with the served model's dense features.
Each batch is one `POST /ElasticCTRPredictionService/inference`, with the slots in
ElasticCTR's client form (a slot with no feasign in the line is left out: serving treats it
as padding) and the dense values under `dense`. Lines that are not examples, or use a slot
the served model does not have, are skipped and counted, like the trainer does. The label
of a line is click > 0. An example serving answers with its own error (err_code 207 for
the batch) has no probability: it is left out of the AUC and the rows, counted by cause
and named in the report.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

from elasticctr_common.lines import BadLine, DenseFeature, LineFormat, dense_value

from .endpoints import auth_header
from .errors import RefusedError
from .httpjson import DEFAULT_RETRY, Retry, request_json
from .progress import Progress

INFERENCE_PATH = "/ElasticCTRPredictionService/inference"


@dataclass
class Example:
    line_number: int
    label: int
    slots: dict[str, list[int]]
    dense: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Served:
    """What the client needs to know of the served model (its /status)."""

    slots: set[str] | None = None  # None: serving did not say
    form: LineFormat = field(default_factory=LineFormat)


PARTIAL = 207  # serving's err_code when some instances failed (each says why)
NAMED_FAILURES = 5  # failed examples the report names, at most


@dataclass
class Summary:
    examples: int = 0  # predicted (failed ones not included)
    skipped: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)  # examples serving failed, by cause
    failures: list[str] = field(default_factory=list)  # the first NAMED_FAILURES, with lines
    versions: set[int] = field(default_factory=set)
    labels: list[int] = field(default_factory=list)
    probabilities: list[float] = field(default_factory=list)

    @property
    def auc(self) -> float:
        return auc(self.labels, self.probabilities)


def parse_line(
    line: str, number: int, slots: set[str] | None, form: LineFormat | None = None
) -> Example | str:
    """An Example, or the reason the line is skipped (the trainer's reading of lines,
    elasticctr_common.lines, so both skip the same lines for the same reasons)."""
    form = form or LineFormat()
    try:
        parsed = form.split(line)
    except BadLine as bad:
        return bad.reason
    grouped: dict[str, list[int]] = {}
    for feasign, slot in parsed.features:
        name = str(slot)
        if slots is not None and name not in slots:
            return f"unknown slot {name}"
        grouped.setdefault(name, []).append(feasign)
    dense: dict[str, list[float]] = {}
    start = 0
    for feature in form.dense:
        dense[feature.name] = [dense_value(v) for v in parsed.dense[start : start + feature.dim]]
        start += feature.dim
    return Example(number, parsed.label, grouped, dense)


def read_examples(lines: Iterable[str], served: Served, summary: Summary) -> Iterator[Example]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        parsed = parse_line(line, number, served.slots, served.form)
        if isinstance(parsed, str):
            summary.skipped[parsed] = summary.skipped.get(parsed, 0) + 1
        else:
            yield parsed


def served_model(
    serving_url: str,
    timeout: float,
    token: str | None = None,
    data_format: str | None = None,
    retry: Retry = DEFAULT_RETRY,
) -> Served:
    """The slots, line format and dense features of the model serving now (its /status);
    `data_format` (the user's) over the served one. A serving that does not say: ElasticCTR
    lines, any slot."""
    url = serving_url.rstrip("/") + "/status"
    try:
        status = request_json("GET", url, None, timeout, auth_header(token), retry=retry)
    except RefusedError:  # a serving without /status: the first batch says what is wrong
        status = {}
    if not isinstance(status, dict):
        status = {}
    slots = status.get("slots")
    dense = tuple(DenseFeature(f["name"], f["dim"]) for f in status.get("dense_features") or [])
    name = data_format or status.get("data_format") or "elasticctr"
    try:
        form = LineFormat(name, dense)
    except ValueError as err:
        raise RefusedError(f"serving at {url} serves lines of format {name}: {err}") from None
    return Served({str(s) for s in slots} if slots else None, form)


def predict(
    serving_url: str,
    lines: Iterable[str],
    batch_size: int = 64,
    timeout: float = 30.0,
    total: int | None = None,
    out: TextIO | None = None,
    progress: bool = True,
    token: str | None = None,
    data_format: str | None = None,
    retry: Retry = DEFAULT_RETRY,
) -> Summary:
    """Send every example; write `<line>\t<label>\t<prob1>\t<version>` rows to `out`.
    `data_format`: the lines' format (default: the served model's). A batch that meets a
    refused connection or a 502/503/504 is sent again as `retry` says."""
    url = serving_url.rstrip("/") + INFERENCE_PATH
    summary = Summary()
    bar = Progress(total, "examples", enabled=progress)
    batch: list[Example] = []
    served = served_model(serving_url, timeout, token, data_format, retry)
    examples = read_examples(lines, served, summary)
    for example in _with_end(examples):
        if example is not None:
            batch.append(example)
        if batch and (example is None or len(batch) >= batch_size):
            _send(url, batch, timeout, summary, out, token, retry)
            bar.update(len(batch))
            batch = []
    bar.close()
    return summary


def _with_end(items: Iterator[Example]) -> Iterator[Example | None]:
    yield from items
    yield None


def _send(url: str, batch: list[Example], timeout: float, summary: Summary, out: TextIO | None,
          token: str | None = None, retry: Retry = DEFAULT_RETRY) -> None:  # fmt: skip
    instances: list[dict[str, Any]] = []
    for example in batch:
        instance: dict[str, Any] = {
            "slots": [{"slot_name": s, "feasigns": f} for s, f in example.slots.items()]
        }
        if example.dense:
            instance["dense"] = example.dense
        instances.append(instance)
    body = {"instances": instances}
    answer = request_json("POST", url, body, timeout, auth_header(token), retry=retry)
    if answer.get("err_code", 0) not in (0, PARTIAL):
        raise RefusedError(f"serving at {url} refused a batch: {answer.get('err_msg')}")
    predictions = answer["predictions"]
    if len(predictions) != len(batch):
        raise RefusedError(
            f"serving at {url}: {len(batch)} instances sent, {len(predictions)} predictions back"
        )
    version = answer.get("version")
    if version is not None:
        summary.versions.add(int(version))
    for example, p in zip(batch, predictions, strict=True):
        if p.get("err_code", 0) != 0:  # this example failed; the others have predictions
            cause = str(p.get("cause", p["err_code"]))
            summary.failed[cause] = summary.failed.get(cause, 0) + 1
            if len(summary.failures) < NAMED_FAILURES:
                summary.failures.append(f"line {example.line_number}: {p.get('err_msg')}")
            continue
        summary.examples += 1
        summary.labels.append(example.label)
        summary.probabilities.append(float(p["prob1"]))
        if out is not None:
            out.write(f"{example.line_number}\t{example.label}\t{p['prob1']:.9g}\t{version}\n")


def auc(labels: list[int], scores: list[float]) -> float:
    """ROC AUC by ranks (ties share their average rank); nan without both classes."""
    order = sorted(range(len(scores)), key=scores.__getitem__)
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    positives = sum(1 for label in labels if label)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return float("nan")
    rank_sum = sum(r for r, label in zip(ranks, labels, strict=True) if label)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def summary_json(summary: Summary, seconds: float) -> dict[str, Any]:
    """What `report` prints, as JSON (`predict --json`); AUC null without both classes."""
    auc_value = summary.auc
    return {
        "examples": summary.examples,
        "model_versions": sorted(summary.versions),
        "skipped_lines": summary.skipped,
        "failed_examples": summary.failed,
        "failures": summary.failures,
        "auc": None if math.isnan(auc_value) else auc_value,
        "examples_per_sec": summary.examples / seconds if seconds > 0 else 0.0,
    }


def report(summary: Summary, seconds: float, stream: TextIO = sys.stdout) -> None:
    skipped = sum(summary.skipped.values())
    versions = ",".join(str(v) for v in sorted(summary.versions)) or "?"
    rate = summary.examples / seconds if seconds > 0 else 0.0
    print(
        f"examples: {summary.examples} (model version {versions}), skipped lines: {skipped}"
        + (f" {summary.skipped}" if skipped else "")
        + f", {rate:,.0f} examples/s",
        file=stream,
    )
    if summary.failed:
        failed = sum(summary.failed.values())
        print(f"failed examples (no prediction): {failed} {summary.failed}", file=stream)
        for failure in summary.failures:
            print(f"  {failure}", file=stream)
    print(f"AUC: {summary.auc:.4f}", file=stream)
