"""KServe's Open Inference Protocol (v2 REST) on a real serving process with a bearer token,
called with Triton's own HTTP client (tritonclient, from PyPI): the same scores as /predict
on the same instances, health and metadata, and bad requests answered in the v2 error form
with their status."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests.images.serving.conftest import TOKEN
from tests.support.serving import (
    expected,
    http,
    predicted_by_predict,
    probe_instances,
    slot_arrays,
)

pytestmark = pytest.mark.slow
MODEL = "elasticctr"


def auth() -> dict[str, str]:
    """A new dict each call: tritonclient adds its own headers to the one it is given."""
    return {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def served(guarded_stack):
    return guarded_stack


@pytest.fixture(scope="module")
def client(served):
    c = triton.InferenceServerClient(served.serving.url.removeprefix("http://"))
    yield c
    c.close()


def slot_tensors(spec: dict, instances: list[dict], binary: bool) -> list[triton.InferInput]:
    """One UINT64 [n, k] tensor per slot the instances use, rows padded with feasign 0."""
    inputs = []
    for name, array in slot_arrays(spec, instances):
        tensor = triton.InferInput(name, list(array.shape), "UINT64")
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    return inputs


def lines_tensor(instances: list[dict]) -> triton.InferInput:
    """The instances as ElasticCTR lines (`<show> <click> <feasign>:<slot> ...`)."""
    lines = [
        "1 0 " + " ".join(f"{f}:{e['slot_name']}" for e in i["slots"] for f in e["feasigns"])
        for i in instances
    ]
    tensor = triton.InferInput("lines", [len(lines)], "BYTES")
    tensor.set_data_from_numpy(np.array([line.encode() for line in lines], dtype=object))
    return tensor


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_gets_the_scores_of_predict(served, client, binary):
    instances = probe_instances(served.spec, 120, seed=21)
    want = predicted_by_predict(served.serving, instances)
    np.testing.assert_allclose(want, expected(served.spec, 1, instances), atol=1e-5)
    outputs = [triton.InferRequestedOutput("probability", binary_data=binary)]
    result = client.infer(
        MODEL, slot_tensors(served.spec, instances, binary), outputs=outputs, headers=auth()
    )
    got = result.as_numpy("probability")
    assert got.dtype == np.float32 and got.shape == (120,)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    response = result.get_response()
    assert response["model_name"] == MODEL and response["model_version"] == "1"
    assert response["parameters"]["request_id"]  # for /click, as the other forms


def test_lines_and_a_pinned_version_give_the_same_scores(served, client):
    instances = probe_instances(served.spec, 40, seed=22)
    want = predicted_by_predict(served.serving, instances)
    result = client.infer(MODEL, [lines_tensor(instances)], model_version="1", headers=auth())
    np.testing.assert_allclose(result.as_numpy("probability"), want, rtol=0, atol=1e-6)


def test_health_and_metadata(served, client):
    assert client.is_server_live(headers=auth()) and client.is_server_ready(headers=auth())
    assert client.is_model_ready(MODEL, headers=auth())
    assert client.is_model_ready(MODEL, "1", headers=auth())
    assert not client.is_model_ready(MODEL, "2", headers=auth())
    server = client.get_server_metadata(headers=auth())
    assert server["name"] == "elasticctr-serving" and "binary_tensor_data" in server["extensions"]
    meta = client.get_model_metadata(MODEL, headers=auth())
    assert meta["name"] == MODEL and meta["versions"] == ["1"]
    assert meta["inputs"] == [
        {"name": str(s), "datatype": "UINT64", "shape": [-1, -1]} for s in served.spec["slots"]
    ]
    assert meta["outputs"] == [{"name": "probability", "datatype": "FP32", "shape": [-1]}]
    assert client.get_model_metadata(MODEL, "1", headers=auth()) == meta


def refused(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def test_bad_requests_get_v2_errors(served, client):
    instances = probe_instances(served.spec, 3, seed=23)
    tensors = slot_tensors(served.spec, instances, True)
    as_float = triton.InferInput("101", [3, 1], "FP32")
    as_float.set_data_from_numpy(np.ones((3, 1), dtype=np.float32))
    err = refused(lambda: client.infer(MODEL, [as_float], headers=auth()))
    assert err.status() == "400"
    assert err.message() == "input '101': datatype FP32, expected UINT64 or INT64"
    flat = triton.InferInput("101", [3], "UINT64")
    flat.set_data_from_numpy(np.array([1, 2, 3], dtype=np.uint64))
    err = refused(lambda: client.infer(MODEL, [flat], headers=auth()))
    assert err.status() == "400"
    assert err.message() == "input '101': shape [3], expected [n, k] (n instances)"
    err = refused(lambda: client.infer("ctr", tensors, headers=auth()))
    assert err.status() == "404"
    assert err.message() == "unknown model 'ctr': this serving serves 'elasticctr'"
    err = refused(lambda: client.infer(MODEL, tensors, model_version="7", headers=auth()))
    assert err.status() == "404" and "version '7' is not served: serving version 1" in str(err)
    err = refused(lambda: client.infer(MODEL, tensors))
    assert err.status() == "401" and "bearer token" in err.message()
    err = refused(lambda: client.get_model_metadata("ctr", headers=auth()))
    assert err.status() == "404"
    # The raw answers: the v2 error form, {"error": message}, and nothing else.
    url = served.serving.url
    cases: list[tuple[str, str, bytes | dict | None, int]] = [
        ("POST", "/v2/models/elasticctr/infer", b'{"inputs": [', 400),
        ("POST", "/v2/models/elasticctr/infer", {"inputs": []}, 400),
        ("POST", "/v2/models/elasticctr/infer",
         {"inputs": [{"name": "999", "datatype": "UINT64", "shape": [1, 1], "data": [5]}]}, 400),
        ("POST", "/v2/models/elasticctr/infer",
         {"inputs": [{"name": "101", "datatype": "UINT64", "shape": [1, 2], "data": [5]}]}, 400),
        ("POST", "/v2/models/elasticctr/infer",
         {"inputs": [{"name": "101", "datatype": "UINT64", "shape": [1, 1], "data": [-5]}]}, 400),
        ("POST", "/v2/models/nope/infer", {"inputs": []}, 404),
        ("GET", "/v2/models/elasticctr/infer", None, 405),
        ("GET", "/v2/nope", None, 404),
    ]  # fmt: skip
    for method, path, body, status in cases:
        code, answer, _ = http(method, url + path, body, headers=auth())
        assert code == status and list(answer) == ["error"], (path, body, answer)
        assert isinstance(answer["error"], str) and answer["error"]
    for path in ("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/elasticctr"):
        code, answer, headers = http("GET", url + path)
        assert code == 401 and list(answer) == ["error"], (path, answer)
        assert headers["WWW-Authenticate"] == 'Bearer realm="elasticctr-serving"'
    assert client.infer(MODEL, tensors, headers=auth()).as_numpy("probability").shape == (3,)
