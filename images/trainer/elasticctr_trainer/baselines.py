"""Yardsticks for the model's held-out AUC: L2-regularised logistic regression on the
hashed ids (`feasign % sparse_dim`, the keys the model itself sees, one weight each),
optionally with crossed pairs of slots (one weight per pair of ids).

The regularisation strength is chosen on a fifth of the training lines held back (never
on the held-out set), then the model is refit on all of them. Needs scipy (the dev
environment has it; the trainer image does not: baselines are for benchmarks and tests).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .metrics import auc

# lambda of 0.5 * lambda * |w|^2 (the loss summed over examples), strongest first: each
# fit starts from the previous one's weights
L2_GRID = (100.0, 30.0, 10.0, 3.0)
CROSS_BUCKETS = 1 << 22


def _features(
    lines: Sequence[str], sparse_dim: int, crosses: Sequence[tuple[int, int]]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
    """Row and column of each feature of the lines, and their labels: a hashed id is column
    `feasign % sparse_dim`; a crossed pair of ids is a bucket above sparse_dim."""
    rows: list[int] = []
    cols: list[int] = []
    labels = np.zeros(len(lines))
    for row, line in enumerate(lines):
        _, click, *tokens = line.split()
        labels[row] = int(click) > 0
        by_slot: dict[int, list[int]] = {}
        for token in tokens:
            feasign, slot = token.split(":")
            by_slot.setdefault(int(slot), []).append(int(feasign))
            rows.append(row)
            cols.append(int(feasign) % sparse_dim)
        for first, second in crosses:
            for a in by_slot.get(first, ()):
                for b in by_slot.get(second, ()):
                    rows.append(row)
                    cols.append(sparse_dim + zlib.crc32(f"{a}x{b}".encode()) % CROSS_BUCKETS)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64), labels


class LogisticRegression:
    """Full-batch L-BFGS on a sparse design matrix, bias unregularised."""

    def __init__(self, l2: float) -> None:
        self.l2 = l2
        self.weights: NDArray[np.float64] = np.zeros(1)

    def fit(
        self, matrix: Any, labels: NDArray[np.float64], start: NDArray[np.float64] | None = None
    ) -> LogisticRegression:
        from scipy.optimize import minimize

        def loss(w: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
            z = matrix @ w[1:] + w[0]
            # log(1 + e^z) - y z, stable for large |z|
            value = np.sum(np.logaddexp(0, z) - labels * z) + 0.5 * self.l2 * w[1:] @ w[1:]
            error = 1.0 / (1.0 + np.exp(-z)) - labels
            grad = np.concatenate([[error.sum()], matrix.T @ error + self.l2 * w[1:]])
            return float(value), grad

        if start is None:
            start = np.zeros(matrix.shape[1] + 1)
        self.weights = minimize(loss, start, jac=True, method="L-BFGS-B").x
        return self

    def predict(self, matrix: Any) -> NDArray[np.float64]:
        return np.asarray(matrix @ self.weights[1:] + self.weights[0])


def logistic_baseline(
    train: Sequence[str],
    heldout: Sequence[str],
    sparse_dim: int,
    crosses: Sequence[tuple[int, int]] = (),
    seed: int = 0,
) -> dict[str, float]:
    """Held-out AUC of the logistic regression, and the L2 strength picked for it."""
    from scipy.sparse import csr_matrix

    train_rows, train_cols, train_labels = _features(train, sparse_dim, crosses)
    held_rows, held_cols, held_labels = _features(heldout, sparse_dim, crosses)
    # Columns of features seen in training, numbered densely; unseen ones weigh nothing.
    known, train_index = np.unique(train_cols, return_inverse=True)
    position = np.searchsorted(known, held_cols).clip(0, len(known) - 1)
    seen = known[position] == held_cols

    def matrix(rows: NDArray[np.int64], cols: NDArray[np.int64], count: int) -> Any:
        values = np.ones(len(rows))
        return csr_matrix((values, (rows, cols)), shape=(count, len(known)))

    train_matrix = matrix(train_rows, train_index, len(train))
    held_matrix = matrix(held_rows[seen], position[seen], len(heldout))
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
