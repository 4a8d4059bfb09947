"""The predictor configs serving chose (model.py, bench/serving_predictor.py) and the
one-input rewrite of the program (graph.py) give the predictions of the config before (26
inputs, oneDNN for the matrix products at every batch size), and numpy's, to 1e-5; batches
of one example run on their own predictor; a program of another shape is left as it is. A
model trained with crosses is served from requests that name its slots only, its crossed
ids formed as the rule says (elasticctr_common.crosses); bad crosses reject a version."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import cast

import numpy as np
import paddle.inference as paddle_infer
import pytest
from elasticctr_common.crosses import crossed_keys, pair_seed
from elasticctr_common.cube.client import CubeClient, SeekResult
from elasticctr_common.storage import open_store
from elasticctr_serving.batcher import Batcher, Prediction
from elasticctr_serving.graph import fuse_inputs
from elasticctr_serving.instances import Parsed, parse_request
from elasticctr_serving.metrics import ServingMetrics
from elasticctr_serving.model import DenseModel, ModelError, load_model, predictor_config
from paddle.base.proto import framework_pb2

from tests.support.make_model import default_spec, expected_probabilities, make_versions, table

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


# -- crosses (meta.json `crosses`) -----------------------------------------------------------
CROSSED_SLOTS = [101, 102, 103]
CROSSES = [[101, 102], [103, 101]]


def write_meta(root, version: int, **meta) -> None:
    dense = root / str(version) / "dense"
    dense.mkdir(parents=True)
    (dense / "meta.json").write_text(json.dumps(meta))


@pytest.mark.parametrize(
    ("crosses", "feed_names", "problem"),
    [
        ("101,102", 5, "meta.json crosses is not a list of slot pairs: '101,102'"),
        ([[101, 101]], 4, "meta.json crosses: cross [101, 101]: a slot crossed with itself"),
        ([[101, 102], [102, 101]], 5,
         "meta.json crosses: cross [102, 101]: this pair is given twice"),
        ([[101, 104]], 4, "meta.json crosses: cross [101, 104]: slot 104 is not in slot.conf"),
        ([[101]], 4, "meta.json crosses: cross [101]: expected a pair of slot ids, e.g. [101, 102]"),
        ([[101, 102]], 3, "3 feed names for 3 slots, 1 crosses and 0 dense features"),
        (None, 4, "4 feed names for 3 slots, 0 crosses and 0 dense features"),
    ],
)  # fmt: skip
def test_a_version_with_bad_crosses_is_rejected_naming_them(tmp_path, crosses, feed_names,
                                                            problem):  # fmt: skip
    names = [f"pooled_{i}" for i in range(feed_names)]
    write_meta(tmp_path, 4, slots=CROSSED_SLOTS, embedding_dim=9, sparse_dim=1000,
               feed_names=names, crosses=crosses)  # fmt: skip
    with pytest.raises(ModelError) as rejected:
        load_model(open_store(f"file://{tmp_path}"), 4, workers=1)
    assert str(rejected.value) == f"version 4: {problem}"


@pytest.fixture(scope="module")
def crossed_model(tmp_path_factory):
    """(model dir, spec) of version 1 of a model trained with CROSSES, as the trainer
    exports it: one input per slot, then one per cross, and a meta.json of the slots and
    the crosses. Every key below sparse_dim is in its table (keys 1..K)."""
    root = tmp_path_factory.mktemp("crossed")
    spec = default_spec(root, [1], slots=CROSSED_SLOTS, crosses=CROSSES, keys=2000,
                        sparse_dim=2001, fc_sizes=[32], publish=False)  # fmt: skip
    make_versions(spec)
    return root, spec


class TableCube:
    """cube's answers from one version's table in memory: the batcher's lookups, no servers."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.conf = SimpleNamespace(max_keys=100_000)
        self.row = {int(k): i for i, k in enumerate(keys)}
        self.values = values

    def seek(self, keys: np.ndarray, version: int | None = None) -> SeekResult:
        rows = np.array([self.row.get(int(k), -1) for k in keys], dtype=np.int64)
        found = rows >= 0
        values = np.zeros((len(keys), self.values.shape[1]), dtype=np.float32)
        values[found] = self.values[rows[found]]
        return SeekResult(values, found, -1 if version is None else version, int((~found).sum()))


def predicted(model: DenseModel, cube: TableCube, parsed: Parsed) -> Prediction:
    """The batcher's prediction of one parsed request (its cube lookup, pooling, predictor)."""
    batcher = Batcher(cast(CubeClient, cube), lambda: model, lambda _: None, ServingMetrics())

    async def submit() -> Prediction:
        batcher.arrive()
        return await batcher.submit(parsed, model)

    # A loop of its own, never set as the thread's: asyncio.run would leave the thread
    # without one, and the tests after it in this process (Pulumi's mocks) need it.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(submit())
    finally:
        batcher.stop()
        loop.close()


def pooled_with_crosses(spec: dict, instances: list[dict], crossed: bool = True) -> np.ndarray:
    """The model's inputs [n, (slots + crosses) * dim] for plain `instances`, by the rule's
    own crossed_keys and numpy; the crosses' inputs zero when not `crossed`."""
    keys, values = table(spec, 1)
    vector = {int(k): v for k, v in zip(keys, values, strict=True)}
    dim, sparse_dim = spec["embedding_dim"], spec["sparse_dim"]
    pooled = np.zeros((len(instances), len(CROSSED_SLOTS) + len(CROSSES), dim))
    for row, instance in enumerate(instances):
        sent = [instance.get(str(slot), []) for slot in CROSSED_SLOTS]
        inputs = [[f % sparse_dim for f in feasigns] for feasigns in sent]
        for a, b in CROSSES if crossed else []:
            xs, ys = instance.get(str(a), []), instance.get(str(b), [])
            inputs.append(crossed_keys(pair_seed(a, b), xs, ys, sparse_dim))
        for i, input_keys in enumerate(inputs):
            for key in input_keys:
                pooled[row, i] += vector.get(key, 0)  # key 0, the padding key: none
    return pooled.reshape(len(instances), -1)


def test_a_model_with_crosses_is_served_to_requests_of_its_slots(crossed_model):
    root, spec = crossed_model
    model = load_model(open_store(f"file://{root}"), 1, workers=1, slots=CROSSED_SLOTS,
                       sparse_dim=spec["sparse_dim"])  # fmt: skip
    assert model.space.cross_slots == CROSSES and model.space.inputs == 5
    assert model.fused_input is not None  # the concat of the 5 sparse inputs: one input
    rng = np.random.default_rng(23)
    instances = [
        {str(slot): rng.integers(0, 2**64, int(rng.integers(0, 7)), np.uint64).tolist()
         for slot in CROSSED_SLOTS}
        for _ in range(40)
    ]  # fmt: skip
    instances = [{**i, "103": [*i["103"], 7]} for i in instances]  # none empty
    cube = TableCube(*table(spec, 1))
    want = expected_probabilities(root, 1, pooled_with_crosses(spec, instances))
    one = next(row for row, i in enumerate(instances) if i["101"])  # with crossed ids
    for rows in (slice(None), slice(one, one + 1)):  # batch 1: its own predictor
        body = json.dumps({"instances": instances[rows]}).encode()
        parsed = parse_request(body, model.space, 100, plain=True)
        assert parsed.crossed > 0
        got = predicted(model, cube, parsed).probabilities[:, 1]
        np.testing.assert_allclose(got, want[rows], rtol=0, atol=1e-5)
    # The crosses count: without their inputs, the answers differ.
    uncrossed = expected_probabilities(root, 1, pooled_with_crosses(spec, instances, False))
    assert np.abs(uncrossed - want).max() > 1e-3
