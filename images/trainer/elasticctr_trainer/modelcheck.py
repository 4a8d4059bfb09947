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


def check_embeddings(keys: NDArray[Any], values: NDArray[Any], max_abs_weight: float) -> list[str]:
    """`values`: one row per exported key (`keys`)."""
    if not len(keys):
        return []
    values = np.asarray(values, dtype=np.float64)
    bound = min(max_abs_weight, SPARSE_WEIGHT_BOUND)
    rows_bad = ~np.isfinite(values).all(axis=1)
    if rows_bad.any():
        named = ", ".join(str(k) for k in keys[rows_bad][:EXAMPLES_NAMED])
        return [f"embeddings of {int(rows_bad.sum())} keys have NaN or infinite values ({named})"]
    peaks = np.abs(values).max(axis=1)
    rows_big = peaks >= bound
    if rows_big.any():
        order = np.argsort(-peaks[rows_big], kind="stable")[:EXAMPLES_NAMED]
        named = ", ".join(
            f"{k}: {p:.6g}"
            for k, p in zip(keys[rows_big][order], peaks[rows_big][order], strict=True)
        )
        clamp = " (the sparse rule's clamp)" if bound == SPARSE_WEIGHT_BOUND else ""
        return [
            f"embeddings of {int(rows_big.sum())} keys reach |value| >= {bound:g}{clamp}: {named}"
        ]
    return []


def check_model(
    dense: dict[str, NDArray[Any]],
    keys: NDArray[Any],
    embeddings: NDArray[Any],
    table_shows: float,
    predictions: NDArray[Any] | None,
    max_abs_weight: float,
) -> list[str]:
    """Every reason to refuse this version; empty when it may be published."""
    problems = check_dense(dense, max_abs_weight)
    problems += check_embeddings(keys, embeddings, max_abs_weight)
    if not np.isfinite(table_shows):
        problems.append(f"the table's show counts sum to {table_shows}")
    if predictions is not None:
        problem = _finite_problem("evaluation predictions", np.asarray(predictions, np.float64))
        if problem:
            problems.append(problem)
    return problems
