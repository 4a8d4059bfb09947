"""Serving with a bearer token (serving.auth token), as a real process reading it from a
file as in its pod: without the token nothing but the kubelet's probes answers, and those
say no more than ready or not."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

from tests.support.serving import expected, http, metric_sample, probe_instances, start_stack

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"
TOKEN = secrets.token_urlsafe(30)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, cube_server_bin):
    from tests.support.serving import Processes

    procs = Processes(tmp_path_factory.mktemp("auth"))
    # As in its pod: the token in a Secret's file, named by SERVING_AUTH_TOKEN_FILE.
    token_file = tmp_path_factory.mktemp("secret") / "SERVING_AUTH_TOKEN"
    token_file.write_text(TOKEN + "\n")
    try:
        yield start_stack(
            procs,
            tmp_path_factory.mktemp("auth-stack"),
            serving_env={"SERVING_AUTH_TOKEN_FILE": str(token_file)},
        )
    finally:
        procs.stop_all()


def call(guarded, method: str, path: str, authorization: str | None, body=None):
    headers = {"Authorization": authorization} if authorization is not None else {}
    return http(method, guarded.serving.url + path, body, headers=headers)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        TOKEN,  # without the scheme
        f"Bearer {TOKEN[:-1]}",
        f"Bearer {TOKEN[:-1]}{'A' if TOKEN[-1] != 'A' else 'B'}",  # same length, one char off
        f"Basic {TOKEN}",
        f"Bearer {TOKEN}{TOKEN}",
    ],
)
def test_requests_without_the_token_are_refused(guarded, authorization):
    instances = probe_instances(guarded.spec, 3)
    code, body, headers = call(guarded, "POST", INFERENCE, authorization, {"instances": instances})
    assert code == 401 and headers["WWW-Authenticate"] == 'Bearer realm="elasticctr-serving"'
    # ElasticCTR's answer form, no prediction
    assert body["err_code"] == 401 and body["predictions"] == [] and "token" in body["err_msg"]
    for method, path in (("POST", "/predict"), ("GET", "/status"), ("GET", "/metrics")):
        code, body, _ = call(guarded, method, path, authorization, {"instances": []})
        assert code == 401 and "token" in body["error"], (path, body)


def test_the_token_opens_every_endpoint(guarded):
    bearer = f"Bearer {TOKEN}"
    instances = probe_instances(guarded.spec, 20)
    code, body, _ = call(guarded, "POST", INFERENCE, bearer, {"instances": instances})
    assert code == 200 and body["version"] == 1, body
    got = np.array([p["prob1"] for p in body["predictions"]])
    assert np.max(np.abs(got - expected(guarded.spec, 1, instances))) <= 1e-5
    assert call(guarded, "GET", "/status", bearer)[1]["version"] == 1
    metrics = call(guarded, "GET", "/metrics", bearer)[1]
    refused = metric_sample(
        metrics, "elasticctr_serving_requests_total", path="/predict", code="401"
    )
    assert refused is not None and refused >= 7, metrics  # refusals are counted


def test_probes_answer_without_the_token_and_say_only_ready_or_not(guarded):
    assert call(guarded, "GET", "/healthz", None)[:2] == (200, {"status": "ok"})
    assert call(guarded, "GET", "/readyz", None)[:2] == (200, {"ready": True})
    code, body, _ = call(guarded, "GET", "/readyz", f"Bearer {TOKEN}")
    assert code == 200 and body == {"ready": True, "version": 1}
