"""The model's graph (elasticctr_trainer/model.py): what the network gets of the dense
features."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
from elasticctr_common.trainer_json import DENSE_TRANSFORMS
from elasticctr_trainer.model import transformed_dense

# Signs, zero, a fraction and a count of Criteo's tail.
VALUES = np.array([[-20.0, -0.5, 0.0, 0.25, 3.0, 1e5]], dtype=np.float32)
EXPECTED = {"none": VALUES, "signed_log1p": np.sign(VALUES) * np.log1p(np.abs(VALUES))}


@pytest.mark.parametrize("transform", DENSE_TRANSFORMS)
def test_each_dense_transform_is_computed_in_the_graph(transform: str) -> None:
    """In the graph, so the exported model (what serving runs) applies it too."""
    assert sorted(EXPECTED) == sorted(DENSE_TRANSFORMS)
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, VALUES.shape[1]], "float32")
        y = transformed_dense(x, transform)
    (out,) = paddle.static.Executor(paddle.CPUPlace()).run(main, feed={"x": VALUES}, fetch_list=[y])
    np.testing.assert_allclose(out, EXPECTED[transform], rtol=1e-6)


def test_an_unknown_dense_transform_is_refused_by_name() -> None:
    paddle.enable_static()
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x = paddle.static.data("x", [None, 1], "float32")
        with pytest.raises(
            ValueError, match="dense_transform: must be none or signed_log1p, got 'log'"
        ):
            transformed_dense(x, "log")
