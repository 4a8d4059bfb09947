"""Yardsticks for the model's held-out AUC: L2-regularised logistic regression on the
hashed ids (`feasign % sparse_dim`, the keys the model itself sees, one weight each) and
the dense features' values as written (one weight per component), optionally with
crossed pairs of slots (one weight per pair of ids).

The regularisation strength is chosen on a fifth of the training lines held back (never
on the held-out set), then the model is refit on all of them. Needs scipy (the dev
environment has it; the trainer image does not: baselines are for benchmarks and tests).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from elasticctr_common.lines import Line, LineFormat, dense_value
from numpy.typing import NDArray

from .metrics import auc

# lambda of 0.5 * lambda * |w|^2 (the loss summed over examples), strongest first: each
# fit starts from the previous one's weights
L2_GRID = (100.0, 30.0, 10.0, 3.0)
CROSS_BUCKETS = 1 << 22


def parse(lines: Sequence[str], form: LineFormat) -> list[Line]:
    """The lines as the trainer reads them (every line must be valid)."""
    return [form.split(line) for line in lines]


def _features(
    lines: Sequence[Line], sparse_dim: int, crosses: Sequence[tuple[int, int]]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Row, column and value of each feature of the lines, and their labels: a hashed id is
    column `feasign % sparse_dim` (value 1); a crossed pair of ids is a bucket above
    sparse_dim; dense component j is the column after those buckets plus j."""
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    labels = np.zeros(len(lines))
    dense_column = sparse_dim + CROSS_BUCKETS
    for row, line in enumerate(lines):
        labels[row] = line.label
        by_slot: dict[int, list[int]] = {}
        for feasign, slot in line.features:
            by_slot.setdefault(slot, []).append(feasign)
            rows.append(row)
            cols.append(feasign % sparse_dim)
        for first, second in crosses:
            for a in by_slot.get(first, ()):
                for b in by_slot.get(second, ()):
                    rows.append(row)
                    cols.append(sparse_dim + zlib.crc32(f"{a}x{b}".encode()) % CROSS_BUCKETS)
        values.extend([1.0] * (len(rows) - len(values)))
        for j, value in enumerate(line.dense):
            rows.append(row)
            cols.append(dense_column + j)
            values.append(dense_value(value))
    return (
        np.array(rows, dtype=np.int64),
        np.array(cols, dtype=np.int64),
        np.array(values),
        labels,
    )


class LogisticRegression:
    """Full-batch trust-region Newton-CG on a sparse design matrix, bias unregularised.
    (L-BFGS-B took 4x as long: its bound handling costs ~70 ms an iteration at 200,000
    weights, more than the loss and gradient themselves.)"""

    def __init__(self, l2: float) -> None:
        self.l2 = l2
        self.weights: NDArray[np.float64] = np.zeros(1)

    def fit(
        self, matrix: Any, labels: NDArray[np.float64], start: NDArray[np.float64] | None = None
    ) -> LogisticRegression:
        from scipy.optimize import minimize

        transposed = matrix.T.tocsr()  # once: `matrix.T @ x` would convert it at every call

        def margins(w: NDArray[np.float64]) -> NDArray[np.float64]:
            return np.asarray(matrix @ w[1:] + w[0])

        def loss(w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            z = margins(w)
            # log(1 + e^z) - y z, stable for large |z|
            value = np.sum(np.logaddexp(0, z) - labels * z) + 0.5 * self.l2 * w[1:] @ w[1:]
            error = 1.0 / (1.0 + np.exp(-z)) - labels
            grad = np.concatenate([[error.sum()], transposed @ error + self.l2 * w[1:]])
            return float(value), grad

        def hessian_times(w: NDArray[np.float64], v: NDArray[np.float64]) -> NDArray[np.float64]:
            p = 1.0 / (1.0 + np.exp(-margins(w)))
            weighted = p * (1 - p) * margins(v)  # X v + v0 (the bias column), weighted
            return np.concatenate([[weighted.sum()], transposed @ weighted + self.l2 * v[1:]])

        if start is None:
            start = np.zeros(matrix.shape[1] + 1)
        found = minimize(loss, start, jac=True, hessp=hessian_times, method="trust-ncg")
        self.weights = found.x
        return self

    def predict(self, matrix: Any) -> NDArray[np.float64]:
        return np.asarray(matrix @ self.weights[1:] + self.weights[0])


def logistic_baseline(
    train: Sequence[Line],
    heldout: Sequence[Line],
    sparse_dim: int,
    crosses: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> dict[str, float]:
    """Held-out AUC of the logistic regression on parsed lines (`parse`), and the L2
    strength picked for it."""
    from scipy.sparse import csr_matrix

    train_rows, train_cols, train_values, train_labels = _features(train, sparse_dim, crosses)
    held_rows, held_cols, held_values, held_labels = _features(heldout, sparse_dim, crosses)
    # Columns of features seen in training, numbered densely; unseen ones weigh nothing.
    known, train_index = np.unique(train_cols, return_inverse=True)
    position = np.searchsorted(known, held_cols).clip(0, len(known) - 1)
    seen = known[position] == held_cols

    def matrix(
        rows: NDArray[np.int64], cols: NDArray[np.int64], values: NDArray[np.float64], count: int
    ) -> Any:
        return csr_matrix((values, (rows, cols)), shape=(count, len(known)))

    # Dense columns scaled to unit spread on the training lines: the same model, conditioned for
    # L-BFGS (heavy-tailed counts otherwise take it thousands of iterations).
    first_dense = sparse_dim + CROSS_BUCKETS
    for cols, values in ((train_cols, train_values), (held_cols, held_values)):
        for column in np.unique(train_cols[train_cols >= first_dense]).tolist():
            column_values = train_values[train_cols == column]
            mean = column_values.sum() / len(train)
            std = np.sqrt(max((column_values**2).sum() / len(train) - mean**2, 1e-12))
            here = cols == column
            values[here] = values[here] / std
    train_matrix = matrix(train_rows, train_index, train_values, len(train))
    held_matrix = matrix(held_rows[seen], position[seen], held_values[seen], len(heldout))
    fit_part = np.random.default_rng(seed).random(len(train)) >= 0.2
    scores, weights = {}, {}
    start = None
    for l2 in L2_GRID:
        model = LogisticRegression(l2).fit(train_matrix[fit_part], train_labels[fit_part], start)
        scores[l2] = auc(train_labels[~fit_part], model.predict(train_matrix[~fit_part]))
        weights[l2] = start = model.weights
    best = max(scores, key=lambda l2: scores[l2])
    model = LogisticRegression(best).fit(train_matrix, train_labels, weights[best])
    return {"auc": auc(held_labels, model.predict(held_matrix)), "l2": best}
