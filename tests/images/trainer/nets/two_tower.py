"""A user's own network, written as a user would (docs/trainer.md, "Your own network"):
a two-tower model. The first half of the slots is the user side, the rest of the slots
and the dense features the item side; each tower maps its inputs to a 16-wide vector,
the logit is their dot product plus the ids' own weights (column 0 of every slot).

The trainer calls `build(inputs)` once, inside its static program."""

import paddle


def tower(x, name):
    hidden = paddle.static.nn.fc(x, 64, activation="relu", name=f"{name}_hidden")
    return paddle.static.nn.fc(hidden, 16, name=f"{name}_out")


def build(inputs):
    half = max(1, len(inputs.slots) // 2)
    user = paddle.concat(inputs.slots[:half], axis=1)
    item = paddle.concat(inputs.slots[half:] + inputs.dense, axis=1)
    affinity = paddle.sum(tower(user, "user") * tower(item, "item"), axis=1, keepdim=True)
    id_weights = paddle.add_n([slot[:, 0:1] for slot in inputs.slots])
    return affinity + id_weights
