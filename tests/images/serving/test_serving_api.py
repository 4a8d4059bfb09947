"""The serving API as a real process over 3 cube shards: exact predictions, both request
forms, bad input answered 4xx with the problem named while the server keeps serving,
health, readiness, status, metrics and dynamic batching."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from tests.support.serving import (
    Serving,
    expected,
    http,
    metric_sample,
    probe_instances,
)

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


def infer(stack, body, path=INFERENCE):
    return http("POST", stack.serving.url + path, body)


def test_predictions_equal_the_models_own_in_instance_order(stack):
    instances = probe_instances(stack.spec, 200)
    code, body, headers = infer(stack, {"instances": instances})
    assert code == 200, body
    assert body["err_code"] == 0 and body["err_msg"] == "" and body["version"] == 1
    assert headers["X-Model-Version"] == "1"
    prob1 = np.array([p["prob1"] for p in body["predictions"]])
    prob0 = np.array([p["prob0"] for p in body["predictions"]])
    assert len(prob1) == 200
    np.testing.assert_allclose(prob0 + prob1, 1.0, atol=1e-6)
    assert np.max(np.abs(prob1 - expected(stack.spec, 1, instances))) <= 1e-5
    single = infer(stack, {"instances": instances[7:8]})[1]["predictions"][0]["prob1"]
    assert single == pytest.approx(prob1[7], abs=1e-6)  # alone or batched: the same


def test_plain_predict_and_elasticctr_client_padding_agree(stack):
    instances = probe_instances(stack.spec, 20, seed=9)
    plain = [{e["slot_name"]: e["feasigns"] for e in i["slots"]} for i in instances]
    code, body, _ = infer(stack, {"instances": plain}, "/predict")
    assert code == 200 and body["version"] == 1
    np.testing.assert_allclose(body["predictions"], expected(stack.spec, 1, instances), atol=1e-5)
    # ElasticCTR's client sends a slot the line lacks as feasigns [0]: the padding key.
    padded = []
    for instance in instances:
        given = {e["slot_name"] for e in instance["slots"]}
        extra = [{"slot_name": str(s), "feasigns": [0]} for s in stack.spec["slots"]
                 if str(s) not in given]  # fmt: skip
        padded.append({"slots": instance["slots"] + extra})
    got = [p["prob1"] for p in infer(stack, {"instances": padded})[1]["predictions"]]
    np.testing.assert_allclose(got, body["predictions"], atol=1e-6)


def test_feasigns_as_decimal_strings_and_slot_names_as_numbers(stack):
    instance = {"slots": [{"slot_name": 101, "feasigns": ["18446744073709551615", 5]}]}
    same = {"slots": [{"slot_name": "101", "feasigns": [18446744073709551615, 5]}]}
    a, b = infer(stack, {"instances": [instance]}), infer(stack, {"instances": [same]})
    assert a[0] == b[0] == 200
    assert a[1]["predictions"] == b[1]["predictions"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"instances": [', 400, "malformed JSON"),
        (b"[1, 2]", 400, 'a JSON object with an "instances" list'),
        ({"instances": []}, 400, '"instances" is empty'),
        ({"instances": {"slots": []}}, 400, '"instances" must be a list'),
        ({"instances": [{"slots": []}]}, 400, "instance 0 is empty"),
        ({"instances": [{"slots": [{"slot_name": "101", "feasigns": []}]}]}, 400,
         "instance 0 is empty"),
        ({"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}, {}]}, 400,
         'instance 1: expected an object with a "slots" list'),
        ({"instances": [{"slots": [{"slot_name": "999", "feasigns": [1]}]}]}, 400,
         "instance 0: unknown slot '999' (the model's slots: 101, 102"),
        ({"instances": [{"slots": [{"slot_name": "101", "feasigns": ["abc"]}]}]}, 400,
         "instance 0, slot 101: feasign 'abc' is not an unsigned 64-bit integer"),
        ({"instances": [{"slots": [{"slot_name": "102", "feasigns": [1.5]}]}]}, 400,
         "slot 102: feasign 1.5 is not an unsigned 64-bit integer"),
        ({"instances": [{"slots": [{"slot_name": "102", "feasigns": [-1]}]}]}, 400,
         "feasign -1 is not an unsigned 64-bit integer"),
        ({"instances": [{"slots": [{"slot_name": "102", "feasigns": [2**64]}]}]}, 400,
         "slot 102: feasign 1.8446744073709552e+19 is not an unsigned 64-bit integer"),
        ({"instances": [{"slots": [{"slot_name": "102", "feasigns": [True]}]}]}, 400,
         "feasign True is not"),
        ({"instances": [{"slots": [{"slot_name": "102", "feasigns": 7}]}]}, 400,
         "slot 102: feasigns must be a list"),
        ({"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}] * 1001}, 413,
         "1001 instances in one request, more than the limit 1000"),
        (b'{"instances": [' + b" " * 200_000 + b"]}", 413,
         "200017 bytes is over the request body limit of 200000 bytes"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_problem(stack, body, status, message):
    code, answer, _ = infer(stack, body)
    assert code == status, answer
    assert answer["err_code"] == status and answer["predictions"] == []
    assert message in answer["err_msg"]
    code, answer, _ = infer(stack, body, "/predict")
    assert code == status and "error" in answer
    ok = infer(stack, {"instances": probe_instances(stack.spec, 3)})
    assert ok[0] == 200  # and the server keeps serving


def test_methods_and_unknown_paths_answer_json(stack):
    code, body, _ = http("GET", stack.serving.url + INFERENCE)
    assert code == 405 and "GET" in body["error"]
    code, body, _ = http("GET", stack.serving.url + "/nope")
    assert code == 404 and "error" in body


def test_health_readiness_and_status(stack):
    assert http("GET", stack.serving.url + "/healthz")[:2] == (200, {"status": "ok"})
    assert http("GET", stack.serving.url + "/readyz")[:2] == (200, {"ready": True, "version": 1})
    status = stack.serving.status()
    assert status["version"] == 1 and status["cube_committed"] == 1
    assert status["cube_source"] == "transfer" and status["slots"] == stack.spec["slots"]
    assert status["rejected"] == {} and status["cube"]["shards"] == 3


def metric(text: str, name: str, **labels: str) -> float:
    value = metric_sample(text, name, **labels)
    assert value is not None, f"{name}{labels} not in metrics"
    return value


def test_metrics_count_requests_latency_version_and_missing_keys(stack):
    before = http("GET", stack.serving.url + "/metrics")[1]
    unknown = stack.spec["keys"] + 100  # no version has this key
    body = {"instances": [{"slots": [{"slot_name": "101", "feasigns": [unknown, 5]}]}]}
    assert infer(stack, body)[0] == 200
    text = http("GET", stack.serving.url + "/metrics")[1]
    name = "elasticctr_serving_cube_missing_keys_total"
    assert metric(text, name) == metric(before, name) + 1
    assert metric(text, "elasticctr_serving_model_version") == 1
    assert metric(text, "elasticctr_serving_cube_committed_version") == 1
    assert metric(text, "elasticctr_serving_requests_total", path=INFERENCE, code="200") >= 1
    count = metric(text, "elasticctr_serving_request_seconds_count", path=INFERENCE)
    inf = metric(text, "elasticctr_serving_request_seconds_bucket", path=INFERENCE, le="+Inf")
    assert count == inf >= 1
    assert "# TYPE elasticctr_serving_request_seconds histogram" in text


def test_concurrent_requests_are_batched(stack):
    text = http("GET", stack.serving.url + "/metrics")[1]
    batches_before = metric(text, "elasticctr_serving_batches_total")
    requests, errors = 0, []
    instances = probe_instances(stack.spec, 40, seed=4)
    want = expected(stack.spec, 1, instances)
    lock = threading.Lock()

    def client(i: int) -> None:
        nonlocal requests
        for j in range(15):
            k = (i * 15 + j) % 40
            code, body, _ = infer(stack, {"instances": instances[k : k + 1]})
            with lock:
                requests += 1
                if code != 200 or abs(body["predictions"][0]["prob1"] - want[k]) > 1e-5:
                    errors.append((code, body))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    batches = metric(http("GET", stack.serving.url + "/metrics")[1],
                     "elasticctr_serving_batches_total") - batches_before  # fmt: skip
    assert batches < requests, f"{requests} requests ran as {batches} batches"
    print(f"{requests} concurrent requests ran as {batches:.0f} batches")


def test_status_is_json_with_history(stack):
    status = stack.serving.status()
    assert json.dumps(status)
    assert status["history"][0]["version"] == 1


def test_without_the_native_parser_the_answers_are_the_same(stack):
    """A serving process that cannot load the parser parses in Python, to the same end."""
    native = stack.serving.status()
    assert native["parser"] == "native"
    python = Serving(stack.procs, "serving-python", stack.cluster, "--max-instances", "1000",
                     env={"ELASTICCTR_SERVING_PARSER_LIB": "/nonexistent/libelasticctr_parser.so"})  # fmt: skip
    python.wait_version(1)
    assert python.status()["parser"] == "python"
    assert "parsing in Python" in python.log()
    instances = probe_instances(stack.spec, 50, seed=11)
    bodies = [
        {"instances": instances},
        {"instances": [{"slots": [{"slot_name": "101", "feasigns": ["18446744073709551615"]}]}]},
        {"instances": [{"slots": [{"slot_name": "999", "feasigns": [1]}]}]},
        {"instances": [{"slots": [{"slot_name": "101", "feasigns": [1]}]}] * 1001},
    ]

    def same(url_a: str, url_b: str, body: dict) -> int:
        """Both answers equal but for their request ids (each answer has its own)."""
        (code_a, a, _), (code_b, b, _) = http("POST", url_a, body), http("POST", url_b, body)
        ids = a.pop("request_id", None), b.pop("request_id", None)
        assert (code_a, a) == (code_b, b)
        assert code_a != 200 or (ids[0] and ids[1] and ids[0] != ids[1]), ids
        return code_a

    for body in bodies:
        same(stack.serving.url + INFERENCE, python.url + INFERENCE, body)
    plain = [{e["slot_name"]: e["feasigns"] for e in i["slots"]} for i in instances]
    assert (
        same(stack.serving.url + "/predict", python.url + "/predict", {"instances": plain}) == 200
    )
