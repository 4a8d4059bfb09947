"""CTR-DNN for the parameter server (static graph), as in ElasticCTR and PaddleRec's
`models/rank/dnn`: one sparse embedding table shared by all slots, sum pooling per slot,
FC layers with ReLU, softmax over two classes.

The table holds CTR-accessor rows: each pulled row is `[show, click, embed_w, embedx...]`
(`embedding_dim + 2` floats). The `cvm` op drops show/click from the forward pass and, in
the backward pass, writes each example's show/click into the first two gradient columns,
which is the push layout `[slot, show, click, grads...]` the CtrCommonAccessor expects.
The pooled slot embeddings (`embedding_dim` floats each) are the inputs of the exported
dense model; serving sums the per-key vectors the same way.

This module knows nothing of trainer.json: `build_ctr_dnn` takes plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import paddle

SPARSE_TABLE = "embedding"
SHOW_CLICK_COLUMNS = 2
AUC_THRESHOLDS = 2**12
# The sparse SGD rule clamps every embedding value into [-bound, bound] (Paddle's default,
# set explicitly): modelcheck refuses a version with a value at the clamp.
SPARSE_WEIGHT_BOUND = 10.0


@dataclass
class CtrDnn:
    label: paddle.static.Variable
    show: paddle.static.Variable
    click: paddle.static.Variable
    slot_ids: list[paddle.static.Variable]
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

    @property
    def feed_order(self) -> list[paddle.static.Variable]:
        """Dataset variables, in the order `lines.multislot_line` writes them."""
        return [self.label, self.show, self.click, *self.slot_ids]

    @property
    def pass_state(self) -> list[paddle.static.Variable]:
        return [self.auc_stat_pos, self.auc_stat_neg, self.loss_sum, self.example_count]


def _accumulator(name: str) -> paddle.static.Variable:
    return paddle.static.create_global_var(
        shape=[1], value=0.0, dtype="float32", persistable=True, name=name
    )


def build_ctr_dnn(
    slot_count: int, sparse_dim: int, embedding_dim: int, fc_sizes: list[int],
    wide: bool = False, dense_l2: float = 0.0,
) -> CtrDnn:  # fmt: skip
    """Build the network into the default main/startup programs. `wide`: Wide&Deep, the
    click logit plus the sum of the example's per-id weights (`embed_w`, column 0 of each
    pooled slot embedding), a logistic regression on the ids beside the DNN. `dense_l2`:
    L2 regularisation of the FC weights (not of the sparse table: Paddle's regulariser
    cannot take its SelectedRows gradient)."""
    label = paddle.static.data("label", [None, 1], "int64")
    # Not "show"/"click": Paddle's PS pass creates variables with those names.
    show = paddle.static.data("ctr_show", [None, 1], "float32")
    click = paddle.static.data("ctr_click", [None, 1], "float32")
    slot_ids = [
        paddle.static.data(f"slot_{i}", [None, 1], "int64", lod_level=1) for i in range(slot_count)
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

    hidden = paddle.concat(pooled, axis=1)
    width = slot_count * embedding_dim
    layers = [(size, "relu") for size in fc_sizes] + [(2, None)]
    decay = paddle.regularizer.L2Decay(dense_l2) if dense_l2 else None
    for size, activation in layers:
        init = paddle.nn.initializer.Normal(std=1.0 / math.sqrt(width))
        attr = paddle.ParamAttr(initializer=init, regularizer=decay)
        hidden = paddle.static.nn.fc(hidden, size, activation=activation, weight_attr=attr)
        width = size
    logits = hidden
    if wide:
        # The pooled inputs hold the summed embed_w in column 0: serving needs nothing new.
        wide_logit = paddle.add_n([paddle.slice(p, [1], [0], [1]) for p in pooled])
        logits = paddle.add(logits, paddle.concat([paddle.zeros_like(wide_logit), wide_logit], 1))
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
    return CtrDnn(
        label, show, click, slot_ids, pulled, pooled, prob, loss,
        stats[2], stats[3], loss_sum, example_count, dense_values,
    )  # fmt: skip


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
    sparse_learning_rate: float,
    sparse_initial_range: float,
    shard_num: int,
    accessor: AccessorParams,
) -> Any:
    """Async parameter-server strategy with the CTR accessor on the sparse table."""
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
    for part, initial_range in (("embed", 0.0), ("embedx", sparse_initial_range)):
        table[f"accessor.{part}_sgd_param.name"] = "SparseAdaGradSGDRule"
        table[f"accessor.{part}_sgd_param.adagrad.learning_rate"] = sparse_learning_rate
        table[f"accessor.{part}_sgd_param.adagrad.initial_range"] = initial_range
        table[f"accessor.{part}_sgd_param.adagrad.initial_g2sum"] = 3.0
        table[f"accessor.{part}_sgd_param.adagrad.weight_bounds"] = [
            -SPARSE_WEIGHT_BOUND, SPARSE_WEIGHT_BOUND,
        ]  # fmt: skip
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    strategy.sparse_table_configs = {SPARSE_TABLE: {prefix + k: v for k, v in table.items()}}
    return strategy
