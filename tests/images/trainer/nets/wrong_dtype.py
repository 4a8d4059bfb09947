"""A broken user network: a float64 logit."""

import paddle


def build(inputs):
    logit = paddle.static.nn.fc(paddle.concat(inputs.slots, axis=1), 1)
    return paddle.cast(logit, "float64")
