"""Plain Python feed: parsed examples -> the feed dict of the CTR-DNN program.

Used for evaluation and by the benchmark's Python data path; training reads through
Paddle's C++ dataset instead.
"""

from __future__ import annotations

import itertools

import numpy as np
from paddle.base import core

from .lines import Example


def lod_tensor(key_lists: list[list[int]]) -> core.LoDTensor:
    """One variable-length id list per example, as an int64 LoDTensor of level 1."""
    offsets = np.zeros(len(key_lists) + 1, dtype=np.int64)
    np.cumsum([len(keys) for keys in key_lists], out=offsets[1:])
    flat = np.fromiter((k for keys in key_lists for k in keys), np.int64, int(offsets[-1]))
    tensor = core.LoDTensor()
    tensor.set(flat.reshape(-1, 1), core.CPUPlace())
    tensor.set_lod([offsets.tolist()])
    return tensor


def feed_dict(
    names: list[str], examples: list[Example], dense_dims: list[int] | None = None
) -> dict[str, object]:
    """`names` in `CtrModel.feed_order` order: label, show, click, the slots, then the dense
    features, of `dense_dims` values each (an example's `dense` holds them in that order)."""
    dims = dense_dims or []
    label, show, click, *inputs = names
    slots, dense = inputs[: len(inputs) - len(dims)], inputs[len(inputs) - len(dims) :]
    feed: dict[str, object] = {
        label: np.array([[e.label] for e in examples], dtype=np.int64),
        show: np.array([[e.show] for e in examples], dtype=np.float32),
        click: np.array([[e.click] for e in examples], dtype=np.float32),
    }
    for index, name in enumerate(slots):
        feed[name] = lod_tensor([e.keys[index] for e in examples])
    if dense:
        values = np.array([e.dense for e in examples], dtype=np.float32).reshape(len(examples), -1)
        offsets = np.cumsum([0, *dims])
        for name, (begin, end) in zip(dense, itertools.pairwise(offsets.tolist()), strict=True):
            feed[name] = values[:, begin:end]
    return feed
