"""Trainer 0's evaluation of each version on `runner.eval_data_uri`: AUC and one
predicted click probability per valid example (files sorted by name, lines in order),
computed with the same pulled embeddings and dense parameters as the export.

Files are read (decompressed if they are compressed data) and their lines parsed as the
training pipe does (`elasticctr_common.datafiles`, `lines.LineParser`). An eval file that
is not lines of text, whole, is an error, not a bad file to count: a held-out set read in
part would change the AUC versions are compared by."""

from __future__ import annotations

from typing import Any

import numpy as np
from elasticctr_common.datafiles import BadFile
from elasticctr_common.storage import Store
from numpy.typing import NDArray

from .feed import feed_dict
from .lines import Example, LineParser, file_examples
from .metrics import auc
from .model import CtrModel

BATCH = 1000


def read_examples(data: Store, parser: LineParser) -> list[Example]:
    examples: list[Example] = []
    for name in data.list():
        if name.startswith(("_", ".")) or name == "donefile":
            continue
        try:
            examples.extend(file_examples(data, name, parser))
        except BadFile as err:
            raise BadFile(f"eval data {data.uri(name)}: {err}") from None
    return examples


def predict(exe: Any, test_program: Any, net: CtrModel, examples: list[Example]) -> NDArray[Any]:
    names = [v.name for v in net.feed_order]
    dims = [int(v.shape[1]) for v in net.dense]
    out = []
    for start in range(0, len(examples), BATCH):
        feed = feed_dict(names, examples[start : start + BATCH], dims)
        (prob,) = exe.run(test_program, feed=feed, fetch_list=[net.prob])
        out.append(np.asarray(prob)[:, 1])
    return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)


def evaluate(
    exe: Any, test_program: Any, net: CtrModel, data: Store, parser: LineParser
) -> dict[str, Any]:
    examples = read_examples(data, parser)
    predictions = predict(exe, test_program, net, examples)
    labels = np.array([e.label for e in examples])
    return {
        "auc": auc(labels, predictions) if len(examples) else float("nan"),
        "examples": len(examples),
        "predictions": predictions,
    }


def predictions_text(predictions: NDArray[Any]) -> bytes:
    return "".join(f"{p:.9g}\n" for p in predictions.astype(np.float32)).encode()
