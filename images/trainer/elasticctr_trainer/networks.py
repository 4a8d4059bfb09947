"""The networks: what turns an example's slot embeddings and dense features into its click
logit. Built in: `dnn`, `wide_deep`, `deepfm`, `dcn`; or the user's own module (`model:
custom`, `network_module`), with the same interface:

    def build(inputs: NetInputs) -> paddle.static.Variable   # [batch, 1] float32 logit

`inputs.slots[i]` is slot i's pooled embedding, [batch, embedding_dim] float32, slots in
slot.conf order: column 0 is the sum of the example's ids' own weights in that slot (an id's
`embed_w`, a logistic regression weight), columns 1.. the sum of their vectors (`embedx`,
zero for an id until it has `embedx_threshold` shows). `inputs.dense[j]` is dense feature
j's values, [batch, dim] float32, in `dense_features` order. The network builds into
Paddle's static default programs (paddle.static.nn.fc, paddle.concat, ...): the trainer adds
the sigmoid, the loss and the AUC, and exports everything from the inputs to the
probability as the dense model, which serving runs as it is. Parameters are created by the
layers as usual and live on the pservers' dense table; the sparse table is not the
network's business. A network must not read trainer.json or the environment (what it needs
is in `inputs`), and must build the same graph every time it is called.

The module is checked when the job starts (`load_network`, `check_network`): it must
import, have `build`, and return a float32 logit of shape [batch, 1] for a probe batch;
anything else fails every pod at start with an error naming the module and the problem.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import paddle
from elasticctr_common.trainer_json import HyperParameters

Network = Callable[["NetInputs"], Any]
PROBE_BATCH = 3


@dataclass(frozen=True)
class NetInputs:
    slots: list[Any]  # per slot: [batch, embedding_dim] float32
    dense: list[Any]  # per dense feature: [batch, dim] float32
    embedding_dim: int
    fc_sizes: list[int]  # the hidden layers' sizes (hyper_parameters.fc_sizes)
    dense_l2: float = 0.0  # L2 of the FC weights (hyper_parameters.dense_l2)


class NetworkError(ValueError):
    """The network module cannot be used; the message names it and says why."""


def fc(x: Any, size: int, activation: str | None, dense_l2: float = 0.0) -> Any:
    """A fully connected layer initialised N(0, 1/fan_in), optionally L2-regularised."""
    decay = paddle.regularizer.L2Decay(dense_l2) if dense_l2 else None
    init = paddle.nn.initializer.Normal(std=1.0 / math.sqrt(int(x.shape[-1])))
    attr = paddle.ParamAttr(initializer=init, regularizer=decay)
    return paddle.static.nn.fc(x, size, activation=activation, weight_attr=attr)


def mlp(x: Any, sizes: list[int], dense_l2: float = 0.0) -> Any:
    """ReLU layers of `sizes`, then one linear output: [batch, 1]."""
    for size in sizes:
        x = fc(x, size, "relu", dense_l2)
    return fc(x, 1, None, dense_l2)


def _all_inputs(inputs: NetInputs) -> Any:
    parts = [*inputs.slots, *inputs.dense]
    return paddle.concat(parts, axis=1) if len(parts) > 1 else parts[0]


def _id_weights(inputs: NetInputs) -> Any:
    """[batch, 1]: the sum of every id's own weight (column 0 of each slot)."""
    return paddle.add_n([paddle.slice(s, [1], [0], [1]) for s in inputs.slots])


def _dense_linear(inputs: NetInputs) -> Any | None:
    if not inputs.dense:
        return None
    dense = paddle.concat(inputs.dense, axis=1) if len(inputs.dense) > 1 else inputs.dense[0]
    return fc(dense, 1, None, inputs.dense_l2)


def dnn(inputs: NetInputs) -> Any:
    """The seeds' CTR-DNN: every input concatenated, FC layers, a linear logit."""
    return mlp(_all_inputs(inputs), inputs.fc_sizes, inputs.dense_l2)


def wide_deep(inputs: NetInputs) -> Any:
    """The DNN plus the wide part: the sum of the ids' own weights (a logistic regression on
    the ids, for long-tailed ids) and a linear function of the dense features."""
    logit = paddle.add(dnn(inputs), _id_weights(inputs))
    linear = _dense_linear(inputs)
    return logit if linear is None else paddle.add(logit, linear)


def deepfm(inputs: NetInputs) -> Any:
    """DeepFM: first order (the ids' own weights, a linear function of the dense
    features), second order (a factorisation machine over the fields: each slot's vector
    part, each dense component times a learned vector), and the DNN."""
    first = _id_weights(inputs)
    linear = _dense_linear(inputs)
    if linear is not None:
        first = paddle.add(first, linear)
    width = inputs.embedding_dim - 1
    fields = [paddle.slice(s, [1], [1], [inputs.embedding_dim]) for s in inputs.slots]
    if width > 0:
        for j, dense in enumerate(inputs.dense):
            dim = int(dense.shape[-1])
            init = paddle.nn.initializer.Normal(std=0.01)
            vectors = paddle.static.create_parameter(
                [dim, width], "float32", name=f"deepfm_dense_{j}.v", default_initializer=init
            )
            # component c times its vector: [batch, dim, 1] * [dim, width]
            fields.append(paddle.unsqueeze(dense, [2]) * vectors)
        stacked = paddle.concat(
            [f if len(f.shape) == 3 else paddle.unsqueeze(f, [1]) for f in fields], axis=1
        )  # [batch, fields, width]
        summed = paddle.sum(stacked, axis=1)
        second = 0.5 * paddle.sum(
            summed * summed - paddle.sum(stacked * stacked, axis=1), axis=1, keepdim=True
        )
        first = paddle.add(first, second)
    return paddle.add(first, dnn(inputs))


CROSS_LAYERS = 2


def dcn(inputs: NetInputs) -> Any:
    """Deep & Cross: x0 = every input concatenated; cross layers x' = x0 (x . w) + b + x
    beside the DNN's hidden layers; one linear logit over both."""
    x0 = _all_inputs(inputs)
    width = int(x0.shape[-1])
    x = x0
    for layer in range(CROSS_LAYERS):
        init = paddle.nn.initializer.Normal(std=1.0 / math.sqrt(width))
        w = paddle.static.create_parameter(
            [width, 1], "float32", name=f"dcn_cross_{layer}.w", default_initializer=init
        )
        b = paddle.static.create_parameter(
            [width], "float32", name=f"dcn_cross_{layer}.b",
            default_initializer=paddle.nn.initializer.Constant(0.0),
        )  # fmt: skip
        x = x0 * paddle.matmul(x, w) + b + x
    deep = x0
    for size in inputs.fc_sizes:
        deep = fc(deep, size, "relu", inputs.dense_l2)
    return fc(paddle.concat([x, deep], axis=1), 1, None, inputs.dense_l2)


BUILT_IN: dict[str, Network] = {
    "dnn": dnn,
    "wide_deep": wide_deep,
    "deepfm": deepfm,
    "dcn": dcn,
}


def load_network(model: str, module: str | None) -> tuple[str, Network]:
    """(what errors call the network, its build function): a built-in one, or for "custom"
    the `build` of `module`, a .py file or an importable module name."""
    if model != "custom":
        return f"network {model!r}", BUILT_IN[model]
    assert module is not None  # trainer_json requires it with custom
    try:
        if module.endswith(".py"):
            path = Path(module)
            if not path.is_file():
                raise FileNotFoundError(f"no file {path}")
            name = f"elasticctr_network_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            loaded = importlib.util.module_from_spec(spec)
            sys.modules[name] = loaded
            spec.loader.exec_module(loaded)
        else:
            loaded = importlib.import_module(module)
    except Exception as err:  # the user's code: anything it raises is the problem
        raise NetworkError(
            f"network module {module!r}: cannot be imported: {type(err).__name__}: {err}"
        ) from None
    build = getattr(loaded, "build", None)
    if not callable(build):
        raise NetworkError(
            f"network module {module!r}: has no function build(inputs) returning the click logit"
        )
    return f"network module {module!r}", build


def call_network(name: str, build: Network, inputs: NetInputs) -> Any:
    """The network's logit, checked where the graph says enough: a float32 Variable of
    shape [batch, 1]."""
    try:
        logit = build(inputs)
    except Exception as err:
        raise NetworkError(f"{name}: build(inputs) failed: {type(err).__name__}: {err}") from None
    if not isinstance(logit, paddle.static.Variable):
        raise NetworkError(
            f"{name}: build(inputs) must return a Paddle Variable (the click "
            f"logit, [batch, 1] float32), got {type(logit).__name__}"
        )
    if logit.dtype != paddle.float32:
        raise NetworkError(
            f"{name}: the logit must be float32, got {str(logit.dtype).split('.')[-1]}"
        )
    shape = list(logit.shape)
    if len(shape) != 2 or shape[1] not in (1, -1) or shape[0] not in (-1, None):
        raise NetworkError(f"{name}: the logit must have shape [batch, 1], got {shape}")
    return logit


def check_network(
    name: str, build: Network, slot_count: int, embedding_dim: int, dense_dims: list[int],
    fc_sizes: list[int], dense_l2: float,
) -> None:  # fmt: skip
    """Build the network alone on a probe batch of random inputs in programs of its own and
    run it: its logit must come out [PROBE_BATCH, 1] and finite. NetworkError otherwise."""
    paddle.enable_static()  # the trainer's mode; a checker may call this first
    main, startup = paddle.static.Program(), paddle.static.Program()
    scope = paddle.static.Scope()
    with paddle.static.program_guard(main, startup), paddle.utils.unique_name.guard():
        slots = [
            paddle.static.data(f"probe_slot_{i}", [-1, embedding_dim], "float32")
            for i in range(slot_count)
        ]
        dense = [
            paddle.static.data(f"probe_dense_{j}", [-1, dim], "float32")
            for j, dim in enumerate(dense_dims)
        ]
        inputs = NetInputs(slots, dense, embedding_dim, list(fc_sizes), dense_l2)
        logit = call_network(name, build, inputs)
    rng = np.random.default_rng(0)
    feed = {v.name: rng.normal(0, 0.1, (PROBE_BATCH, int(v.shape[1]))).astype(np.float32)
            for v in slots + dense}  # fmt: skip
    with paddle.static.scope_guard(scope):
        exe = paddle.static.Executor(paddle.CPUPlace())
        try:
            exe.run(startup)
            (out,) = exe.run(main, feed=feed, fetch_list=[logit])
        except Exception as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise NetworkError(
                f"{name}: running it on a probe batch failed: {type(err).__name__}: {first[:300]}"
            ) from None
    out = np.asarray(out)
    if out.shape != (PROBE_BATCH, 1):
        raise NetworkError(
            f"{name}: the logit must have shape [batch, 1]; for a batch of "
            f"{PROBE_BATCH} it had {list(out.shape)}"
        )
    if not np.isfinite(out).all():
        raise NetworkError(f"{name}: the logit of a probe batch is not finite")


def checked_network(hyper: HyperParameters, slot_count: int) -> tuple[str, Network]:
    """`hyper`'s network (load_network), checked on a probe batch of `slot_count` slots and
    its dense features (check_network): what every pod does first."""
    network = load_network(hyper.model, hyper.network_module)
    check_network(
        *network, slot_count, hyper.embedding_dim, [f.dim for f in hyper.dense_features],
        hyper.fc_sizes, hyper.dense_l2,
    )  # fmt: skip
    return network
