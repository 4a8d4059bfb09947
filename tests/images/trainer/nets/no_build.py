"""A broken user network: the function has another name."""

import paddle


def network(inputs):
    return paddle.static.nn.fc(paddle.concat(inputs.slots, axis=1), 1)
