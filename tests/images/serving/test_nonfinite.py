"""Serving never answers a non-finite score as a prediction: with a cube that holds a NaN
vector (and one whose values overflow float32 when summed), or a dense model whose output
overflows, the instance concerned gets its own error, the other instances of the request
their exact predictions, and failed_instances_total counts it by cause."""

from __future__ import annotations

import numpy as np
import pytest

from tests.images.serving.conftest import HUGE_KEY, NAN_KEY, start_poisoned_stack
from tests.images.serving.servingtest import expected, http, metric_sample, probe_instances

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


@pytest.fixture(scope="module")
def poisoned(tmp_path_factory, cube_server_bin):
    from tests.images.serving.servingtest import Processes

    root = tmp_path_factory.mktemp("poisoned")
    procs = Processes(root)
    try:
        yield start_poisoned_stack(procs, root)
    finally:
        procs.stop_all()


def clean_instances(spec: dict, count: int, seed: int) -> list[dict]:
    """Probe instances that use neither poisoned key."""
    poisoned = {NAN_KEY, HUGE_KEY}
    return [
        i
        for i in probe_instances(spec, count * 2, seed)
        if not any(f % spec["sparse_dim"] in poisoned for e in i["slots"] for f in e["feasigns"])
    ][:count]


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
