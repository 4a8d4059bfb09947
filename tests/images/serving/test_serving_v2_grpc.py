"""The Open Inference Protocol over gRPC on a real serving process with a bearer token:
Triton's own gRPC client (tritonclient[grpc] from PyPI, in its virtualenv) gets /predict's
scores; typed contents and raw contents alike; health and metadata; bad calls end with the
gRPC status of their HTTP one and the same message; calls are counted like HTTP's."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from elasticctr_serving.generated import grpc_predict_v2_pb2 as pb

from tests.images.serving.conftest import TOKEN
from tests.support import grpc_client
from tests.support.serving import (
    expected,
    http,
    metric_sample,
    predicted_by_predict,
    probe_instances,
    slot_arrays,
)
from tools.gen_grpc import main as gen_grpc

pytestmark = pytest.mark.slow
MODEL = "elasticctr"
SERVICE = "/inference.GRPCInferenceService/"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def served(guarded_stack):
    return guarded_stack


@pytest.fixture(scope="module")
def channel(served):
    with grpc.insecure_channel(served.serving.grpc) as c:
        yield c


def call(channel, method: str, request, answer, metadata=AUTH):
    stub = channel.unary_unary(
        SERVICE + method,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=answer.FromString,
    )
    return stub(request, metadata=metadata, timeout=30)


def refused(channel, method: str, request, answer, metadata=AUTH) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(channel, method, request, answer, metadata)
    return caught.value


def infer_call(spec: dict, instances: list[dict], **fields) -> dict:
    inputs = [
        {"name": n, "datatype": "UINT64", "shape": list(a.shape), "data": a.ravel().tolist()}
        for n, a in slot_arrays(spec, instances)
    ]
    return {"op": "infer", "model": MODEL, "inputs": inputs, **fields}


def test_the_generated_messages_are_the_protos():
    assert gen_grpc(["--check"]) == 0


def test_tritonclient_grpc_gets_the_scores_of_predict(served):
    instances = probe_instances(served.spec, 120, seed=31)
    want = predicted_by_predict(served.serving, instances)
    np.testing.assert_allclose(want, expected(served.spec, 1, instances), atol=1e-5)
    lines = [
        "1 0 " + " ".join(f"{f}:{e['slot_name']}" for e in i["slots"] for f in e["feasigns"])
        for i in instances[:30]
    ]
    calls = [
        infer_call(served.spec, instances),
        {"op": "infer", "model": MODEL, "version": "1",
         "inputs": [{"name": "lines", "datatype": "BYTES", "shape": [30], "data": lines}]},
        {"op": "live"}, {"op": "ready"},
        {"op": "model_ready", "model": MODEL}, {"op": "model_ready", "model": MODEL, "version": "2"},
        {"op": "server_metadata"}, {"op": "model_metadata", "model": MODEL},
    ]  # fmt: skip
    answers = grpc_client.run(served.serving.grpc, TOKEN, calls)
    scores, by_lines, live, ready, model_ready, other_version, server, model = answers
    assert scores["dtype"] == "float32" and scores["model_version"] == "1", scores
    np.testing.assert_allclose(scores["probability"], want, rtol=0, atol=1e-6)
    assert scores["parameters"]["request_id"]  # for /click, as the other forms
    np.testing.assert_allclose(by_lines["probability"], want[:30], rtol=0, atol=1e-6)
    assert live == {"live": True} and ready == {"ready": True}
    assert model_ready == {"ready": True} and other_version == {"error": other_version["error"]}
    assert other_version["error"]["status"] == "StatusCode.NOT_FOUND"
    assert "version '2' is not served: serving version 1" in other_version["error"]["message"]
    assert server["metadata"]["name"] == "elasticctr-serving"
    meta = model["metadata"]
    assert meta["name"] == MODEL and meta["versions"] == ["1"]
    assert meta["inputs"][0] == {
        "name": str(served.spec["slots"][0]), "datatype": "UINT64", "shape": ["-1", "-1"]
    }  # fmt: skip
    assert meta["outputs"] == [{"name": "probability", "datatype": "FP32", "shape": ["-1"]}]


def test_tritonclient_grpc_errors(served):
    instances = probe_instances(served.spec, 3, seed=32)
    calls = [
        infer_call(served.spec, instances, token=None),
        infer_call(served.spec, instances, model="ctr"),
        {"op": "infer", "model": MODEL,
         "inputs": [{"name": "101", "datatype": "FP32", "shape": [3, 1], "data": [1, 1, 1]}]},
        {"op": "infer", "model": MODEL,
         "inputs": [{"name": "999", "datatype": "UINT64", "shape": [1, 1], "data": [5]}]},
    ]  # fmt: skip
    no_token, other_model, as_float, unknown = grpc_client.run(served.serving.grpc, TOKEN, calls)
    assert no_token["error"]["status"] == "StatusCode.UNAUTHENTICATED"
    assert "bearer token" in no_token["error"]["message"]
    assert other_model["error"] == {
        "status": "StatusCode.NOT_FOUND",
        "message": "unknown model 'ctr': this serving serves 'elasticctr'",
    }
    assert as_float["error"] == {
        "status": "StatusCode.INVALID_ARGUMENT",
        "message": "input '101': datatype FP32, expected UINT64 or INT64",
    }
    assert unknown["error"]["status"] == "StatusCode.INVALID_ARGUMENT"
    assert unknown["error"]["message"].startswith("unknown input '999'")


def typed_request(spec: dict, instances: list[dict]) -> pb.ModelInferRequest:
    """Data in `contents` (uint64_contents), not raw: the protocol's other form."""
    tensor = pb.ModelInferRequest.InferInputTensor
    return pb.ModelInferRequest(
        model_name=MODEL,
        inputs=[
            tensor(name=n, datatype="UINT64", shape=list(a.shape),
                   contents=pb.InferTensorContents(uint64_contents=a.ravel().tolist()))
            for n, a in slot_arrays(spec, instances)
        ],
    )  # fmt: skip


def test_typed_contents_get_the_same_scores(served, channel):
    instances = probe_instances(served.spec, 50, seed=33)
    want = predicted_by_predict(served.serving, instances)
    request = typed_request(served.spec, instances)
    request.id = "mine-1"
    answer, call_ = stub_with_call(channel, request)
    assert answer.model_name == MODEL and answer.model_version == "1" and answer.id == "mine-1"
    (output,) = answer.outputs
    assert output.name == "probability" and output.datatype == "FP32" and list(output.shape) == [50]
    got = np.frombuffer(answer.raw_output_contents[0], dtype="<f4")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    request_id = answer.parameters["request_id"].string_param
    assert dict(call_.trailing_metadata())["x-request-id"] == request_id


def stub_with_call(channel, request):
    stub = channel.unary_unary(
        SERVICE + "ModelInfer",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ModelInferResponse.FromString,
    )
    return stub.with_call(request, metadata=AUTH, timeout=30)


def test_bad_calls_end_with_the_status_of_their_http_one(served, channel):
    instances = probe_instances(served.spec, 2, seed=34)
    good = typed_request(served.spec, instances)
    cases = []
    empty = pb.ModelInferRequest(model_name=MODEL)
    cases.append((empty, grpc.StatusCode.INVALID_ARGUMENT, '"inputs" is empty: nothing to predict'))
    raw_and_typed = pb.ModelInferRequest()
    raw_and_typed.CopyFrom(good)
    raw_and_typed.raw_input_contents.extend([b""] * len(good.inputs))
    cases.append((raw_and_typed, grpc.StatusCode.INVALID_ARGUMENT, "contents and raw_input_contents both given"))  # fmt: skip
    short_raw = pb.ModelInferRequest()
    short_raw.CopyFrom(good)
    for item in short_raw.inputs:
        item.ClearField("contents")
    short_raw.raw_input_contents.append(b"\0" * 8)
    cases.append((short_raw, grpc.StatusCode.INVALID_ARGUMENT, f"1 raw_input_contents for {len(good.inputs)} inputs"))  # fmt: skip
    wrong_field = pb.ModelInferRequest()
    wrong_field.CopyFrom(good)
    wrong_field.inputs[0].contents.ClearField("uint64_contents")
    wrong_field.inputs[0].contents.int64_contents.extend([1, 2])
    cases.append((wrong_field, grpc.StatusCode.INVALID_ARGUMENT, "takes its data in uint64_contents, got int64_contents"))  # fmt: skip
    other_version = pb.ModelInferRequest()
    other_version.CopyFrom(good)
    other_version.model_version = "7"
    cases.append((other_version, grpc.StatusCode.NOT_FOUND, "version '7' is not served"))
    other_output = pb.ModelInferRequest()
    other_output.CopyFrom(good)
    other_output.outputs.add(name="logit")
    cases.append((other_output, grpc.StatusCode.INVALID_ARGUMENT, "unknown output 'logit'"))
    too_many = pb.ModelInferRequest(
        model_name=MODEL,
        inputs=[pb.ModelInferRequest.InferInputTensor(
            name=str(served.spec["slots"][0]), datatype="UINT64", shape=[1001, 1],
            contents=pb.InferTensorContents(uint64_contents=[5] * 1001))],
    )  # fmt: skip
    cases.append((too_many, grpc.StatusCode.RESOURCE_EXHAUSTED, "1001 instances in one request"))
    for request, status, message in cases:
        err = refused(channel, "ModelInfer", request, pb.ModelInferResponse)
        assert err.code() == status and message in err.details(), (request, err.details())
    err = refused(channel, "ServerLive", pb.ServerLiveRequest(), pb.ServerLiveResponse, ())
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    err = refused(
        channel, "ModelMetadata", pb.ModelMetadataRequest(name="ctr"), pb.ModelMetadataResponse
    )
    assert err.code() == grpc.StatusCode.NOT_FOUND
    # The server went on: a good call still answers.
    assert call(channel, "ModelInfer", good, pb.ModelInferResponse).model_version == "1"


def test_calls_are_counted_like_http_requests(served, channel):
    metrics = lambda: http("GET", served.serving.url + "/metrics",  # noqa: E731
                           headers={"Authorization": f"Bearer {TOKEN}"})[1]  # fmt: skip
    path = SERVICE + "ModelInfer"

    def counted(code: str) -> float:
        value = metric_sample(metrics(), "elasticctr_serving_requests_total", path=path, code=code)
        return value or 0.0

    before_ok, before_bad = counted("200"), counted("404")
    good = typed_request(served.spec, probe_instances(served.spec, 2, seed=35))
    call(channel, "ModelInfer", good, pb.ModelInferResponse)
    good.model_name = "ctr"
    refused(channel, "ModelInfer", good, pb.ModelInferResponse)
    assert counted("200") == before_ok + 1 and counted("404") == before_bad + 1
    status = http("GET", served.serving.url + "/status",
                  headers={"Authorization": f"Bearer {TOKEN}"})[1]  # fmt: skip
    assert status["requests"]["requests"] >= 2
