"""A user's own network, written as a user would (docs/trainer.md, "Your own network"):
DCN-V2's cross network (Wang et al., 2021: x' = x0 * (W x + b) + x, a full matrix per
layer, where the built-in `dcn` has a vector) beside a DNN, one linear logit over both,
plus the ids' own weights (column 0 of every slot).

The trainer calls `build(inputs)` once, inside its static program."""

import paddle

CROSS_LAYERS = 2


def build(inputs):
    x0 = paddle.concat(inputs.slots + inputs.dense, axis=1)
    width = x0.shape[1]
    x = x0
    for layer in range(CROSS_LAYERS):
        x = x0 * paddle.static.nn.fc(x, width, name=f"cross_{layer}") + x
    deep = x0
    for i, size in enumerate(inputs.fc_sizes):
        deep = paddle.static.nn.fc(deep, size, activation="relu", name=f"deep_{i}")
    logit = paddle.static.nn.fc(paddle.concat([x, deep], axis=1), 1, name="logit")
    id_weights = paddle.add_n([slot[:, 0:1] for slot in inputs.slots])
    return logit + id_weights
