"""The check every model version passes before it is published (docs/trainer.md, "Bad
data and bad models").

A version is refused when any dense parameter, exported embedding, table show count or
evaluation prediction is NaN or infinite, when a dense parameter reaches
`runner.max_abs_weight`, or when an embedding value reaches the smaller of that and the
sparse SGD rule's clamp (`model.SPARSE_WEIGHT_BOUND`): the rule clamps every update there,
so a value at the clamp is one the rule wanted to push further (a diverging key, or one
whose updates were divided by a zero show count). The check reads what is about to be
published; nothing is uploaded before it passes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .model import SPARSE_WEIGHT_BOUND

EXAMPLES_NAMED = 5


def _finite_problem(what: str, values: NDArray[Any]) -> str | None:
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    nan = int(np.isnan(values).sum())
    return f"{what}: {nan} NaN and {int(bad.sum()) - nan} infinite values"


def check_dense(dense: dict[str, NDArray[Any]], max_abs_weight: float) -> list[str]:
    problems = []
    for name in sorted(dense):
        values = np.asarray(dense[name], dtype=np.float64)
        problem = _finite_problem(f"dense parameter {name}", values)
        if problem:
            problems.append(problem)
        elif values.size and (peak := float(np.abs(values).max())) >= max_abs_weight:
            problems.append(
                f"dense parameter {name}: |value| up to {peak:.6g}, "
                f"runner.max_abs_weight is {max_abs_weight:g}"
            )
    return problems


class EmbeddingScan:
    """The embedding check folded chunk by chunk, so that the export can write each pulled
    chunk and drop it (a table of 10^8 keys is ~4 GB as arrays). Its problems are exactly
    those of one pass over every row in key order."""

    def __init__(self, max_abs_weight: float) -> None:
        self.bound = min(max_abs_weight, SPARSE_WEIGHT_BOUND)
        self.bad_rows = 0
        self.bad_keys: list[int] = []  # the first EXAMPLES_NAMED, in key order
        self.big_rows = 0
        self.big_keys = np.empty(0, np.uint64)  # the largest peaks so far, ties in key order
        self.big_peaks = np.empty(0, np.float64)

    def add(self, keys: NDArray[Any], values: NDArray[Any]) -> None:
        """`values`: one row per key of `keys`; chunks come in key order."""
        if not len(keys):
            return
        keys = np.asarray(keys, np.uint64)
        values = np.asarray(values, dtype=np.float64)
        rows_bad = ~np.isfinite(values).all(axis=1)
        if rows_bad.any():
            self.bad_rows += int(rows_bad.sum())
            self.bad_keys += keys[rows_bad][: EXAMPLES_NAMED - len(self.bad_keys)].tolist()
        peaks = np.abs(values).max(axis=1)
        rows_big = peaks >= self.bound
        if rows_big.any():
            self.big_rows += int(rows_big.sum())
            # Earlier candidates first: a stable sort then breaks ties in key order.
            keys_big = np.concatenate([self.big_keys, keys[rows_big]])
            peaks_big = np.concatenate([self.big_peaks, peaks[rows_big]])
            order = np.argsort(-peaks_big, kind="stable")[:EXAMPLES_NAMED]
            self.big_keys, self.big_peaks = keys_big[order], peaks_big[order]

    def problems(self) -> list[str]:
        if self.bad_rows:
            named = ", ".join(str(k) for k in self.bad_keys)
            return [f"embeddings of {self.bad_rows} keys have NaN or infinite values ({named})"]
        if self.big_rows:
            named = ", ".join(
                f"{k}: {p:.6g}" for k, p in zip(self.big_keys, self.big_peaks, strict=True)
            )
            clamp = " (the sparse rule's clamp)" if self.bound == SPARSE_WEIGHT_BOUND else ""
            return [
                f"embeddings of {self.big_rows} keys reach |value| >= {self.bound:g}{clamp}: "
                f"{named}"
            ]
        return []


def check_embeddings(keys: NDArray[Any], values: NDArray[Any], max_abs_weight: float) -> list[str]:
    """`values`: one row per exported key (`keys`)."""
    scan = EmbeddingScan(max_abs_weight)
    scan.add(keys, values)
    return scan.problems()


def check_model(
    dense: dict[str, NDArray[Any]],
    keys: NDArray[Any],
    embeddings: NDArray[Any],
    table_shows: float,
    predictions: NDArray[Any] | None,
    max_abs_weight: float,
) -> list[str]:
    """Every reason to refuse this version; empty when it may be published."""
    scan = EmbeddingScan(max_abs_weight)
    scan.add(keys, embeddings)
    return check_version(dense, scan, table_shows, predictions, max_abs_weight)


def check_version(
    dense: dict[str, NDArray[Any]],
    embeddings: EmbeddingScan,
    table_shows: float,
    predictions: NDArray[Any] | None,
    max_abs_weight: float,
) -> list[str]:
    """check_model with the embeddings already scanned (as the export does, chunk by chunk)."""
    problems = check_dense(dense, max_abs_weight)
    problems += embeddings.problems()
    if not np.isfinite(table_shows):
        problems.append(f"the table's show counts sum to {table_shows}")
    if predictions is not None:
        problem = _finite_problem("evaluation predictions", np.asarray(predictions, np.float64))
        if problem:
            problems.append(problem)
    return problems
