"""Serving never answers a non-finite score as a prediction: with a cube that holds a NaN
vector (and one whose values overflow float32 when summed), or a dense model whose output
overflows, the instance concerned gets its own error, the other instances of the request
their exact predictions, and failed_instances_total counts it by cause."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.cube import control_call
from tests.support.make_model import table
from tests.support.serving import (
    HUGE_KEY,
    NAN_KEY,
    clean_instances,
    expected,
    http,
    metric_sample,
    poisoned_stack,
    pooled_inputs,
    publish,
    serve_directly,
)

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory, cube_server_bin):
    yield from poisoned_stack(tmp_path_factory)


def mixed(spec: dict) -> tuple[list[dict], np.ndarray]:
    """5 instances: 1 uses NAN_KEY (as a raw feasign, beside clean ones), 3 HUGE_KEY twice
    in a slot (3e38 + 3e38 overflows float32); 0, 2 and 4 are clean. The expected click
    probabilities of the clean ones."""
    clean = clean_instances(spec, 3, seed=8)
    nan = {"slots": [{"slot_name": "103", "feasigns": [42, NAN_KEY + 3 * spec["sparse_dim"]]},
                     {"slot_name": "101", "feasigns": [9]}]}  # fmt: skip
    huge = {"slots": [{"slot_name": "102", "feasigns": [HUGE_KEY, HUGE_KEY]}]}
    return [clean[0], nan, clean[1], huge, clean[2]], expected(spec, 1, clean)


def failures(url: str) -> dict[str, float | None]:
    text = http("GET", url + "/metrics")[1]
    return {
        cause: metric_sample(text, "elasticctr_serving_failed_instances_total", cause=cause)
        for cause in ("nonfinite_embedding", "nonfinite_pooled", "nonfinite_score")
    }


def test_an_instance_without_a_finite_score_is_an_error_and_the_others_are_answered(poisoned):
    url, spec = poisoned.serving.url, poisoned.spec
    assert failures(url) == {"nonfinite_embedding": 0, "nonfinite_pooled": 0, "nonfinite_score": 0}
    instances, want = mixed(spec)
    code, body, headers = http("POST", url + INFERENCE, {"instances": instances})
    assert code == 207 and body["err_code"] == 207 and body["version"] == 1, body
    assert headers["X-Model-Version"] == "1"
    predictions = body["predictions"]
    got = np.array([predictions[i]["prob1"] for i in (0, 2, 4)])
    assert np.max(np.abs(got - want)) <= 1e-5, (got, want)
    for i in (0, 2, 4):
        assert predictions[i]["prob0"] + predictions[i]["prob1"] == pytest.approx(1, abs=1e-6)
    nan_error = (
        f"instance 1: the embedding of sparse key {NAN_KEY} (slot 103) in cube version 1 is "
        "not finite (NaN or infinite)"
    )
    assert predictions[1] == {"err_code": 500, "err_msg": nan_error, "cause": "nonfinite_embedding"}
    overflow = (
        "instance 3: the sum of the embeddings of slot 102 in cube version 1 overflows float32"
    )
    assert predictions[3] == {"err_code": 500, "err_msg": overflow, "cause": "nonfinite_pooled"}
    assert body["err_msg"] == (
        "2 of 5 instances failed, each answered with its err_code and err_msg; the first: "
        + nan_error
    )
    assert failures(url) == {"nonfinite_embedding": 1, "nonfinite_pooled": 1, "nonfinite_score": 0}

    # The plain form: null where an instance failed, and why beside it.
    plain = [{e["slot_name"]: e["feasigns"] for e in i["slots"]} for i in instances]
    code, body, _ = http("POST", url + "/predict", {"instances": plain})
    assert code == 207 and body["version"] == 1, body
    assert [p is None for p in body["predictions"]] == [False, True, False, True, False]
    got = np.array([body["predictions"][i] for i in (0, 2, 4)])
    assert np.max(np.abs(got - want)) <= 1e-5
    assert body["errors"] == [
        {"instance": 1, "cause": "nonfinite_embedding", "error": nan_error},
        {"instance": 3, "cause": "nonfinite_pooled", "error": overflow},
    ]
    assert failures(url) == {"nonfinite_embedding": 2, "nonfinite_pooled": 2, "nonfinite_score": 0}

    # Alone, each fails the same way; a request of clean instances is answered as before.
    code, body, _ = http("POST", url + INFERENCE, {"instances": instances[1:2]})
    assert code == 207 and body["predictions"][0]["err_msg"] == nan_error.replace(
        "instance 1", "instance 0"
    )
    clean = clean_instances(spec, 20, seed=9)
    code, body, _ = http("POST", url + INFERENCE, {"instances": clean})
    assert code == 200 and body["err_code"] == 0 and body["err_msg"] == "", body
    got = np.array([p["prob1"] for p in body["predictions"]])
    assert np.max(np.abs(got - expected(spec, 1, clean))) <= 1e-5
    assert failures(url) == {"nonfinite_embedding": 3, "nonfinite_pooled": 2, "nonfinite_score": 0}
    metrics = http("GET", url + "/metrics")[1]
    assert metric_sample(metrics, "elasticctr_serving_requests_total", path=INFERENCE,
                         code="207") == 2  # fmt: skip


def test_v2_answers_nan_for_an_instance_without_a_finite_score(poisoned):
    """The Open Inference Protocol: 200 (v2 clients take any other status for a failed
    request), the failed instances' probability NaN (null in JSON), the others exact."""
    import tritonclient.http as triton

    url, spec = poisoned.serving.url, poisoned.spec
    instances, want = mixed(spec)
    lines = [" ".join(["1", "0"] + [f"{f}:{e['slot_name']}" for e in i["slots"]
                                    for f in e["feasigns"]]) for i in instances]  # fmt: skip
    tensor = triton.InferInput("lines", [len(lines)], "BYTES")
    tensor.set_data_from_numpy(np.array([line.encode() for line in lines], dtype=object))
    client = triton.InferenceServerClient(url.removeprefix("http://"))
    try:
        result = client.infer("elasticctr", [tensor])
    finally:
        client.close()
    got = result.as_numpy("probability")
    assert np.isnan(got).tolist() == [False, True, False, True, False]
    assert np.max(np.abs(got[[0, 2, 4]] - want)) <= 1e-5
    parameters = result.get_response()["parameters"]
    assert parameters["failed_instances"] == 2
    assert parameters["error"].startswith(
        "2 of 5 instances failed, their probability is NaN (null in JSON); the first: instance "
        f"1: the embedding of sparse key {NAN_KEY} (slot 103)"
    )
    body = {"inputs": [{"name": "lines", "datatype": "BYTES", "shape": [5], "data": lines}]}
    code, answer, _ = http("POST", url + "/v2/models/elasticctr/infer", body)
    assert code == 200 and answer["outputs"][0]["data"][1::2] == [None, None], answer


def test_a_model_whose_output_overflows_fails_those_instances_only(poisoned):
    """Dense version 2 passes the load check (finite parameters; the probe's zero inputs
    leave hidden unit 0 of its first layer at 0), but its weights multiply that unit by
    3e38 twice on the way to the logits: an instance that activates it scores inf - inf,
    NaN. Those instances fail with cause nonfinite_score; the others are answered."""
    cluster, serving = poisoned.cluster, poisoned.serving
    big = [["w1", 0, 0, "3e38"], ["w2", 0, 0, "3e38"], ["w2", 0, 1, "-3e38"]]
    spec = publish(cluster, [2], publish=False, overrides={"2": big})
    serve_directly(cluster, 2, *table(spec, 2))
    serving.wait_version(2)
    instances = clean_instances(spec, 40, seed=10)
    weights = np.load(cluster.model_dir / "2" / "weights.npz")
    unit = (pooled_inputs(spec, 2, instances) @ weights["w0"] + weights["b0"])[:, 0]
    assert weights["b0"][0] < 0  # the probe's unit 0 is ReLU(b0[0]) = 0
    active, idle = np.flatnonzero(unit > 0.01), np.flatnonzero(unit < -0.01)
    assert len(active) >= 5 and len(idle) >= 5, unit
    chosen = [instances[i] for i in [*active[:5], *idle[:5]]]
    before = failures(serving.url)
    code, body, _ = http("POST", serving.url + INFERENCE, {"instances": chosen})
    assert code == 207 and body["version"] == 2, body
    for p in body["predictions"][:5]:
        assert p == {"err_code": 500, "cause": "nonfinite_score", "err_msg": p["err_msg"]}
        assert p["err_msg"].endswith(": the model's score is not finite (NaN or infinite) at "
                                     "version 2")  # fmt: skip
    got = np.array([p["prob1"] for p in body["predictions"][5:]])
    assert np.max(np.abs(got - expected(spec, 2, chosen[5:]))) <= 1e-5
    assert failures(serving.url) == {**before, "nonfinite_score": 5}
    for s in range(cluster.shards):  # the module's stack serves version 1 again
        assert (
            control_call(cluster.node(s).port, "POST", "/control/switch", {"version": 1})[0] == 200
        )
    serving.wait_version(1)
