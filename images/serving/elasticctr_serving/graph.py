"""One input instead of one per slot: a rewrite of the exported program at load.

The trainer exports one [n, dim] input per slot (and per cross), concatenated by the
program's first op (`feed` x26 + `concat`, axis 1). Feeding 26 inputs costs 55 µs per call
whatever the batch (one `copy_from_cpu` each: 0.4 of a batch-1 call), one [n, 26 * dim]
input ~2 µs. When the program has exactly that shape (every feed goes only into one
`concat` along axis 1, in meta.json's feed order), the feeds and the concat are replaced by
one feed of the concat's output; any other program (e.g. the wide model, which also slices
the pooled inputs) is served as exported. The arithmetic is unchanged: the rows are the
concat's, built by a transpose in numpy (`flatten`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from paddle.base.proto import framework_pb2


def fuse_inputs(program: bytes, feed_names: list[str]) -> tuple[bytes, str] | None:
    """(the rewritten program, its one input's name), or None if the program is not
    `feed` per slot + one `concat` of them all along axis 1."""
    desc = framework_pb2.ProgramDesc()
    desc.ParseFromString(program)
    block = desc.blocks[0]
    feeds = [op for op in block.ops if op.type == "feed"]
    fed = [_only(op.outputs, "Out") for op in feeds]
    if sorted(fed) != sorted(feed_names):
        return None
    users = [op for op in block.ops if op.type != "feed" and _reads_any(op, set(feed_names))]
    if len(users) != 1 or users[0].type != "concat":
        return None
    concat = users[0]
    inputs = {i.parameter: list(i.arguments) for i in concat.inputs}
    if inputs.get("X") != feed_names or inputs.get("AxisTensor"):
        return None
    if _int_attr(concat, "axis") != 1 or not all(_is_2d(block, name) for name in feed_names):
        return None
    fused = _only(concat.outputs, "Out")
    first = framework_pb2.OpDesc()
    first.CopyFrom(feeds[0])
    first.outputs[0].ClearField("arguments")
    first.outputs[0].arguments.append(fused)
    for attr in first.attrs:
        if attr.name == "col":
            attr.i = 0
    ops = [first] + [op for op in block.ops if op.type != "feed" and op is not concat]
    del block.ops[:]
    block.ops.extend(ops)
    kept = [v for v in block.vars if v.name not in set(feed_names)]
    del block.vars[:]
    block.vars.extend(kept)
    for var in block.vars:
        if var.name == fused:
            var.need_check_feed = True
    return desc.SerializeToString(), fused


def flatten(pooled: NDArray[np.float32]) -> NDArray[np.float32]:
    """[inputs, n, dim] -> [n, inputs * dim], each row input-major as the concat made it."""
    inputs, n, dim = pooled.shape
    return np.ascontiguousarray(pooled.transpose(1, 0, 2)).reshape(n, inputs * dim)


def _only(variables: object, parameter: str) -> str:
    for var in variables:  # type: ignore[attr-defined]
        if var.parameter == parameter and len(var.arguments) == 1:
            return str(var.arguments[0])
    return ""


def _reads_any(op: framework_pb2.OpDesc, names: set[str]) -> bool:
    return any(name in names for var in op.inputs for name in var.arguments)


def _int_attr(op: framework_pb2.OpDesc, name: str) -> int | None:
    return next((int(a.i) for a in op.attrs if a.name == name), None)


def _is_2d(block: framework_pb2.BlockDesc, name: str) -> bool:
    var = next((v for v in block.vars if v.name == name), None)
    return var is not None and len(var.type.lod_tensor.tensor.dims) == 2
