"""The CTR model for the parameter server (static graph), as in ElasticCTR and PaddleRec's
`models/rank/*`: one sparse embedding table shared by all slots, sum pooling per slot, the
dense features beside them, a network (networks.py) from those to the click logit, the
sigmoid as a softmax over two classes [no click, click].

The table holds CTR-accessor rows: each pulled row is `[show, click, embed_w, embedx...]`
(`embedding_dim + 2` floats). The `cvm` op drops show/click from the forward pass and, in
the backward pass, writes each example's show/click into the first two gradient columns,
which is the push layout `[slot, show, click, grads...]` the CtrCommonAccessor expects.
The pooled slot embeddings (`embedding_dim` floats each) and the dense features are the
inputs of the exported dense model; serving sums the per-key vectors the same way.

This module knows nothing of trainer.json: `build_ctr_model` takes plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import paddle

from .networks import NetInputs, Network, call_network

SPARSE_TABLE = "embedding"
SHOW_CLICK_COLUMNS = 2
AUC_THRESHOLDS = 2**12
# The sparse SGD rule clamps every embedding value into [-bound, bound] (Paddle's default,
# set explicitly): modelcheck refuses a version with a value at the clamp.
SPARSE_WEIGHT_BOUND = 10.0


@dataclass
class CtrModel:
    label: paddle.static.Variable
    show: paddle.static.Variable
    click: paddle.static.Variable
    slot_ids: list[paddle.static.Variable]
    dense: list[paddle.static.Variable]  # per dense feature: [batch, dim]
    pulled: list[paddle.static.Variable]  # per slot: [ids, embedding_dim + 2] rows
    pooled: list[paddle.static.Variable]  # per slot: [batch, embedding_dim]
    prob: paddle.static.Variable  # [batch, 2]
    loss: paddle.static.Variable
    auc_stat_pos: paddle.static.Variable  # cumulative histograms, reset per pass
    auc_stat_neg: paddle.static.Variable
    loss_sum: paddle.static.Variable  # sum of example losses, reset per pass
    example_count: paddle.static.Variable
    # Values of the dense parameters, the pservers' merged dense table (counted here: on a
    # pserver, the parameter-server pass leaves the main program empty).
    dense_values: int
    # The bias added last on the way to the logit (a size-1 layer's, output_bias), which a
    # new model starts at the data's log-odds (prior.py); None when the network has none.
    output_bias: str | None = None

    @property
    def feed_order(self) -> list[paddle.static.Variable]:
        """Dataset variables, in the order `lines.multislot_line` writes them."""
        return [self.label, self.show, self.click, *self.slot_ids, *self.dense]

    @property
    def inference_inputs(self) -> list[paddle.static.Variable]:
        """The exported dense model's inputs: the pooled slots, then the dense features."""
        return [*self.pooled, *self.dense]

    @property
    def pass_state(self) -> list[paddle.static.Variable]:
        return [self.auc_stat_pos, self.auc_stat_neg, self.loss_sum, self.example_count]


def _accumulator(name: str) -> paddle.static.Variable:
    return paddle.static.create_global_var(
        shape=[1], value=0.0, dtype="float32", persistable=True, name=name
    )


def dense_var_name(name: str) -> str:
    return f"dense_{name}"


def transformed_dense(x: paddle.static.Variable, transform: str) -> paddle.static.Variable:
    """`x` as the network sees it. signed_log1p squashes heavy tails (counts of 0 to 10^5
    side by side) so that no feature's scale swamps the first layer; the sign keeps negative
    values apart from positive ones, and 0 stays 0. In the graph, so serving applies it."""
    if transform == "none":
        return x
    if transform == "signed_log1p":
        return paddle.multiply(paddle.sign(x), paddle.log1p(paddle.abs(x)))
    raise ValueError(f"dense_transform: must be none or signed_log1p, got {transform!r}")


def build_ctr_model(
    slot_count: int, sparse_dim: int, embedding_dim: int, fc_sizes: list[int],
    network: tuple[str, Network], dense: list[tuple[str, int]] | None = None,
    dense_l2: float = 0.0, dense_transform: str = "none",
) -> CtrModel:  # fmt: skip
    """Build the model into the default main/startup programs. `network`: (name, build), the
    function from the pooled slots and the dense features (`dense`: (name, dim) each) to the
    click logit (networks.py); `dense_l2`: L2 regularisation of its FC weights (not of the
    sparse table: Paddle's regulariser cannot take its SelectedRows gradient);
    `dense_transform`: what the network gets of each dense feature (transformed_dense)."""
    label = paddle.static.data("label", [None, 1], "int64")
    # Not "show"/"click": Paddle's PS pass creates variables with those names.
    show = paddle.static.data("ctr_show", [None, 1], "float32")
    click = paddle.static.data("ctr_click", [None, 1], "float32")
    slot_ids = [
        paddle.static.data(f"slot_{i}", [None, 1], "int64", lod_level=1) for i in range(slot_count)
    ]
    dense_vars = [
        paddle.static.data(dense_var_name(name), [None, dim], "float32")
        for name, dim in dense or []
    ]
    show_click = paddle.concat([paddle.reshape(show, [-1, 1]), paddle.reshape(click, [-1, 1])], 1)
    show_click.stop_gradient = True

    pulled, pooled = [], []
    for ids in slot_ids:
        rows = paddle.static.nn.sparse_embedding(
            ids,
            size=[sparse_dim, embedding_dim + SHOW_CLICK_COLUMNS],
            padding_idx=0,
            param_attr=paddle.ParamAttr(name=SPARSE_TABLE),
        )
        pulled.append(rows)
        embedding = paddle.static.nn.continuous_value_model(rows, show_click, use_cvm=False)
        pooled.append(paddle.static.nn.sequence_lod.sequence_pool(embedding, "sum"))

    name, build = network
    transformed = [transformed_dense(v, dense_transform) for v in dense_vars]
    inputs = NetInputs(pooled, transformed, embedding_dim, list(fc_sizes), dense_l2)
    logit = call_network(name, build, inputs)
    # Two classes [no click, click]: softmax([0, z]) is [1 - sigmoid(z), sigmoid(z)].
    logits = paddle.concat([paddle.zeros_like(logit), logit], axis=1)
    prob = paddle.nn.functional.softmax(logits)
    cost = paddle.nn.functional.cross_entropy(logits, label, reduction="none")
    loss = paddle.mean(cost)
    _, _, stats = paddle.static.auc(prob, label, num_thresholds=AUC_THRESHOLDS, slide_steps=1)

    loss_sum, example_count = _accumulator("pass_loss_sum"), _accumulator("pass_examples")
    paddle.assign(paddle.add(loss_sum, paddle.sum(cost)), loss_sum)
    batch = paddle.cast(paddle.shape(label)[0:1], "float32")
    paddle.assign(paddle.add(example_count, batch), example_count)
    dense_values = sum(
        math.prod(p.shape)
        for p in paddle.static.default_main_program().all_parameters()
        if p.name != SPARSE_TABLE
    )
    return CtrModel(
        label, show, click, slot_ids, dense_vars, pulled, pooled, prob, loss,
        stats[2], stats[3], loss_sum, example_count, dense_values, output_bias(logit),
    )  # fmt: skip


def output_bias(logit: paddle.static.Variable) -> str | None:
    """The name of a one-value parameter added to `logit` by the chain of additions that
    makes it (a size-1 fully connected layer's bias, for the built-in networks and any
    network whose last layer is one): what shifts every logit alike. Found by walking the
    program back from `logit` through `elementwise_add` ops only; None if there is none."""
    block = logit.block
    producers = {name: op for op in block.ops for name in op.output_arg_names}
    parameters = {p.name: p for p in block.all_parameters()}
    pending = [logit.name]
    while pending:
        op = producers.get(pending.pop(0))
        if op is None or op.type != "elementwise_add":
            continue
        for name in op.input_arg_names:
            parameter = parameters.get(name)
            if parameter is None:
                pending.append(name)
            elif math.prod(parameter.shape) == 1 and name != SPARSE_TABLE:
                return str(name)
    return None


# Paddle's rule of each optimizer (HyperParameters.sparse_optimizer), its parameters'
# section in the table config and what the rule takes beside the rate, range and bounds.
SPARSE_RULES: dict[str, tuple[str, str, dict[str, float]]] = {
    "sgd": ("SparseNaiveSGDRule", "naive", {}),
    "adagrad": ("SparseAdaGradSGDRule", "adagrad", {"initial_g2sum": 3.0}),
}


@dataclass(frozen=True)
class AccessorParams:
    """The CtrCommonAccessor's thresholds (Paddle's ctr_accessor_param and embedx_threshold);
    score = (shows - clicks) * nonclk_coeff + clicks * click_coeff. Defaults: config.py."""

    embedx_threshold: int  # score an id needs before it gets its embedding vector
    nonclk_coeff: float
    click_coeff: float
    show_click_decay_rate: float  # applied to shows and clicks at every shrink
    delete_threshold: float  # an id scoring below it after the decay is deleted


def async_strategy(
    embedding_dim: int,
    sparse_rule: tuple[str, float, float],
    sparse_initial_range: float,
    shard_num: int,
    accessor: AccessorParams,
) -> Any:
    """Async parameter-server strategy with the CTR accessor on the sparse table;
    `sparse_rule`: (optimizer, embed_w's learning rate, embedx's), HyperParameters.sparse_rule."""
    from paddle.distributed import fleet

    prefix = f"table_parameters.{SPARSE_TABLE}."
    table = {
        "shard_num": shard_num,
        "accessor.accessor_class": "CtrCommonAccessor",
        "accessor.fea_dim": embedding_dim + SHOW_CLICK_COLUMNS,
        "accessor.embedx_dim": embedding_dim - 1,
    }
    table["accessor.embedx_threshold"] = accessor.embedx_threshold
    for name in ("nonclk_coeff", "click_coeff", "show_click_decay_rate", "delete_threshold"):
        table[f"accessor.ctr_accessor_param.{name}"] = getattr(accessor, name)
    optimizer, weight_rate, vector_rate = sparse_rule
    rule, section, extra = SPARSE_RULES[optimizer]
    for part, rate, initial_range in (
        ("embed", weight_rate, 0.0), ("embedx", vector_rate, sparse_initial_range),
    ):  # fmt: skip
        param = f"accessor.{part}_sgd_param."
        table[param + "name"] = rule
        table[param + f"{section}.learning_rate"] = rate
        table[param + f"{section}.initial_range"] = initial_range
        table[param + f"{section}.weight_bounds"] = [-SPARSE_WEIGHT_BOUND, SPARSE_WEIGHT_BOUND]
        table.update({f"{param}{section}.{key}": value for key, value in extra.items()})
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    strategy.sparse_table_configs = {SPARSE_TABLE: {prefix + k: v for k, v in table.items()}}
    return strategy
