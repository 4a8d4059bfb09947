"""Trainer 0's evaluation of each version on `runner.eval_data_uri`: AUC and one
predicted click probability per valid example (files sorted by name, lines in order),
computed with the same pulled embeddings and dense parameters as the export."""

from __future__ import annotations

import numpy as np
from elasticctr_common.storage import Store

from .feed import feed_dict
from .lines import BadLine, LineParser
from .metrics import auc
from .model import CtrDnn

BATCH = 1000


def read_examples(data: Store, parser: LineParser) -> list:
    examples = []
    for name in data.list():
        if name.startswith(("_", ".")) or name == "donefile":
            continue
        for line in data.read_text(name).splitlines():
            if not line.strip():
                continue
            try:
                examples.append(parser.parse(line))
            except BadLine:
                continue
    return examples


def predict(exe, test_program, net: CtrDnn, examples: list) -> np.ndarray:
    names = [v.name for v in net.feed_order]
    out = []
    for start in range(0, len(examples), BATCH):
        feed = feed_dict(names, examples[start : start + BATCH])
        (prob,) = exe.run(test_program, feed=feed, fetch_list=[net.prob])
        out.append(np.asarray(prob)[:, 1])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def evaluate(exe, test_program, net: CtrDnn, data: Store, parser: LineParser) -> dict:
    examples = read_examples(data, parser)
    predictions = predict(exe, test_program, net, examples)
    labels = np.array([e.label for e in examples])
    return {
        "auc": auc(labels, predictions) if len(examples) else float("nan"),
        "examples": len(examples),
        "predictions": predictions,
    }


def predictions_text(predictions: np.ndarray) -> bytes:
    return "".join(f"{p:.9g}\n" for p in predictions.astype(np.float32)).encode()
