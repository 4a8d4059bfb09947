"""The predictor configs serving chose (model.py, bench/serving_predictor.py) and the
one-input rewrite of the program (graph.py) give the predictions of the config before (26
inputs, oneDNN for the matrix products at every batch size), and numpy's, to 1e-5; batches
of one example run on their own predictor; a program of another shape is left as it is."""

from __future__ import annotations

import numpy as np
import paddle.inference as paddle_infer
import pytest
from elasticctr_common.storage import open_store
from elasticctr_serving.graph import fuse_inputs
from elasticctr_serving.model import ModelError, load_model, predictor_config
from paddle.base.proto import framework_pb2

from tests.support.make_model import default_spec, expected_probabilities, make_versions

SLOTS = list(range(1, 27))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    make_versions(default_spec(root, [1], slots=SLOTS, fc_sizes=[400, 400, 400], keys=10))
    return root


def before(model_dir, pooled: np.ndarray) -> np.ndarray:
    """Click probabilities from the config serving used for every batch before."""
    dense = model_dir / "1" / "dense"
    program, params = (
        (dense / "model.pdmodel").read_bytes(),
        (dense / "model.pdiparams").read_bytes(),
    )
    predictor = paddle_infer.create_predictor(predictor_config(program, params, onednn=True))
    for i, name in enumerate(predictor.get_input_names()):
        predictor.get_input_handle(name).copy_from_cpu(pooled[int(name.split("_")[1]) - 1])
        assert name == f"pooled_{SLOTS[i]}"
    predictor.run()
    out = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu()
    return out[:, 1]


def test_batch_of_one_equals_the_config_before_and_numpy(model_dir):
    model = load_model(open_store(f"file://{model_dir}"), 1, workers=2)
    assert len(model.single) == 2 and len(model.predictors) == 2
    assert model.fused_input == "concat_0.tmp_0"  # one input: the concat's output
    assert model.predictors[0].get_input_names() == ["concat_0.tmp_0"]
    rng = np.random.default_rng(11)
    pooled = rng.standard_normal((len(SLOTS), 40, 9)).astype(np.float32)
    flat = pooled.transpose(1, 0, 2).reshape(40, -1)
    numpy_probs = expected_probabilities(model_dir, 1, flat)
    before_probs = before(model_dir, pooled)
    for worker in (0, 1):
        one_by_one = np.array(
            [model.predict(worker, pooled[:, i : i + 1])[0, 1] for i in range(40)]
        )
        batched = model.predict(worker, pooled)[:, 1]
        np.testing.assert_allclose(one_by_one, before_probs, rtol=0, atol=1e-5)
        np.testing.assert_allclose(batched, before_probs, rtol=0, atol=1e-5)
        np.testing.assert_allclose(one_by_one, numpy_probs, rtol=0, atol=1e-5)
        # Each path took its own predictor (their handles are cached per path).
        assert {(worker, True), (worker, False)} <= set(model._handles)
    assert np.ptp(numpy_probs) > 0.05  # the examples differ: a constant answer would fail


def test_a_program_of_another_shape_keeps_its_inputs(model_dir):
    program = (model_dir / "1" / "dense" / "model.pdmodel").read_bytes()
    names = [f"pooled_{s}" for s in SLOTS]
    assert fuse_inputs(program, names) is not None
    assert fuse_inputs(program, names[::-1]) is None  # concat order differs from the feeds'
    assert fuse_inputs(program, names[:-1]) is None  # a feed meta.json does not name
    # An input read by another op too (as the wide model's slices do).
    desc = framework_pb2.ProgramDesc()
    desc.ParseFromString(program)
    block = desc.blocks[0]
    relu = next(op for op in block.ops if op.type == "relu")
    extra = block.ops.add()
    extra.CopyFrom(relu)
    del extra.inputs[0].arguments[:]
    extra.inputs[0].arguments.append("pooled_3")
    assert fuse_inputs(desc.SerializeToString(), names) is None


def test_dense_parameters_that_are_not_finite_are_rejected_naming_them(tmp_path):
    """A damaged or foreign export (the trainer's check bypassed). A NaN weight behind the
    first layer passed the probe on oneDNN's predictor: its product of the probe's zero
    inputs with NaN was 0. The parameters themselves are checked."""
    nan_weight, inf_bias = (
        {"2": [["w1", 3, 4, "nan"]]},
        {"3": [["b0", 5, "inf"], ["w2", 0, 1, "-inf"]]},
    )
    make_versions(default_spec(tmp_path, [1, 2, 3], overrides={**nan_weight, **inf_bias}))
    store = open_store(f"file://{tmp_path}")
    assert load_model(store, 1, workers=1).version == 1
    with pytest.raises(ModelError) as rejected:
        load_model(store, 2, workers=1)
    assert (
        str(rejected.value)
        == "version 2: dense parameters that are not finite: fc_w1 (1 NaN, 0 infinite)"
    )
    with pytest.raises(ModelError) as rejected:
        load_model(store, 3, workers=1)
    assert str(rejected.value) == (
        "version 3: dense parameters that are not finite: fc_b0 (0 NaN, 1 infinite), "
        "fc_w2 (0 NaN, 1 infinite)"
    )
