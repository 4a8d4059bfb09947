"""A broken user network: two outputs per example instead of one logit."""

import paddle


def build(inputs):
    return paddle.static.nn.fc(paddle.concat(inputs.slots, axis=1), 2)
