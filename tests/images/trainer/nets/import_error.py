"""A broken user network: it imports a package the trainer image does not have."""

import paddle
import tensorflow_recommenders  # type: ignore[import-not-found]  # noqa: F401


def build(inputs):
    return paddle.static.nn.fc(paddle.concat(inputs.slots, axis=1), 1)
