"""The canary with real processes: 3 cube shards, their agents, cube-transfer and serving
under continuous load, the decisions recorded in a real MLflow. The joiner's figures come
from a stand-in that answers its `/status` as the joiner writes it (Quality.as_json): the
joiner itself needs Kafka, and its figures are tested on their own.

A new version serves its share of requests (by request id) beside the committed one, each
answer exactly what the version it names computes; a version the figures call worse is
rolled back (dropped from every server once serving has left it) and one that is not
worse is promoted; no request fails throughout."""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest
from elasticctr_common.online_eval import Quality
from elasticctr_common.registry import ModelRegistry

from tests.support.cube import wait_until
from tests.support.lifecycle import run_module
from tests.support.make_model import default_spec, make_versions
from tests.support.serving import (
    JoinerStandIn,
    Load,
    announce,
    expected,
    http,
    metric_sample,
    probe_instances,
    start_stack,
)

pytestmark = pytest.mark.slow
FRACTION = 0.3
# Enough joined impressions for a decision at margin 0.02 and confidence 0.99 (se 0.0067).
GOOD = Quality(examples=100_000, clicks=5000, auc=0.76, calibration=1.0, log_loss=0.19)
SHUFFLED = Quality(examples=6000, clicks=300, auc=0.50, calibration=1.0, log_loss=0.22)
LIKE_GOOD = Quality(examples=60_000, clicks=3000, auc=0.762, calibration=1.0, log_loss=0.19)


def _canary_entries(stack) -> list[dict]:
    return [h for h in stack.cluster.history() if h["kind"] == "canary"]


def test_a_worse_canary_is_rolled_back_a_good_one_promoted_no_request_fails(
    procs, tmp_path, cube_server_bin, mlflow_server, monkeypatch
):
    from mlflow.tracking import MlflowClient

    model = f"ctr-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.tracking_uri)
    monkeypatch.setenv("ELASTICCTR_REGISTERED_MODEL", model)
    client = MlflowClient(mlflow_server.tracking_uri)
    experiment = client.create_experiment(model)
    registry = ModelRegistry(mlflow_server.tracking_uri, model)
    runs = {}
    for version in (1, 2, 3):
        runs[version] = client.create_run(experiment).info.run_id
        registry.register(version, f"s3://bucket/models/{version}", run_id=runs[version])
    joiner = JoinerStandIn()
    try:
        canary_args = ("--canary-fraction", str(FRACTION), "--canary-joiner-url", joiner.url,
                       "--canary-min-clicks", "100", "--canary-margin", "0.02",
                       "--poll-seconds", "0.2")  # fmt: skip
        stack = start_stack(procs, tmp_path, transfer_args=canary_args, timeout_ms=5000)
        spec = default_spec(stack.cluster.model_dir, [2, 3], publish=False)
        make_versions(spec)
        instances = probe_instances(spec, 200, seed=21)
        want = {v: expected(spec, v, instances) for v in (1, 2, 3)}
        load = Load(stack.serving.url, instances, want)
        try:
            _rolled_back(stack, joiner, load)
            _promoted(stack, joiner, load)
        finally:
            load.finish()
        assert not load.errors, load.errors[:5]
    finally:
        joiner.close()
    # Both decisions in MLflow: the candidate's run has the numbers, its version the verdict.
    for version, promoted in ((2, 0.0), (3, 1.0)):
        history = client.get_metric_history(runs[version], "canary_promoted")
        assert [(m.step, m.value) for m in history] == [(version, promoted)]
        difference = client.get_metric_history(runs[version], "canary_auc_difference")[0].value
        assert difference == pytest.approx((SHUFFLED if version == 2 else LIKE_GOOD).auc - 0.76)
        tags = client.get_model_version(model, str(registry.find(version))).tags
        verdict = "promoted: online AUC" if promoted else "rolled back: online AUC"
        assert tags["elasticctr.canary"].startswith(verdict), tags


def _status(stack) -> tuple[dict, str]:
    """`elasticctr status` of the transfer: --json, and the text."""
    flags = ("status", "--transfer-url", stack.cluster.transfer_url(""))
    report = json.loads(run_module("elasticctr_client", *flags, "--json").stdout)
    return report["cube"], run_module("elasticctr_client", *flags).stdout


def _share_of(load: Load, version: int, since: list[int]) -> tuple[int, int]:
    seen = [v for s, start in zip(load.seen, since, strict=True) for v in s[start:]]
    return seen.count(version), len(seen)


def _rolled_back(stack, joiner: JoinerStandIn, load: Load) -> None:
    joiner.online = {1: GOOD}
    announce(stack.cluster, 2)
    wait_until(lambda: (stack.cluster.transfer_status()["canary"] or {}).get("version") == 2,
               60, "the canary of version 2")  # fmt: skip
    wait_until(lambda: (stack.serving.status()["canary"] or {}).get("version") == 2,
               60, "serving to score the canary")  # fmt: skip
    since = [len(s) for s in load.seen]
    load.wait_answers(600, 120)
    canary, total = _share_of(load, 2, since)
    assert abs(canary / total - FRACTION) < 0.1, (canary, total)  # by request, not instance
    status = stack.cluster.transfer_status()
    assert status["phase"] == "canary" and status["committed"] == 1
    assert status["canary"]["last"]["decision"] == "wait"  # no figures of version 2 yet
    for s in range(3):  # every server holds the candidate beside the committed version
        server = stack.cluster.server_status(s)
        assert (server["cur_version"], server["bg_version"]) == (1, 2), server
    cube, text = _status(stack)
    assert cube["canary"]["version"] == 2 and cube["last_canary"] is None
    assert "  canary: version 2 on 30% of requests beside 1 (serving); waiting for" in text

    joiner.online = {1: GOOD, 2: SHUFFLED}
    wait_until(lambda: _canary_entries(stack), 60, "the decision on version 2")
    (entry,) = _canary_entries(stack)
    assert entry["version"] == 2 and entry["result"] == "rolled_back", entry
    decision = entry["canary"]["decision"]
    assert decision["decision"] == "rollback" and decision["z"] < -decision["critical_z"]
    assert decision["candidate"]["auc"] == 0.5 and entry["canary"]["baseline"] == 1
    # The entry is written before the rollback's lock is let go: idle a moment after.
    wait_until(lambda: stack.cluster.transfer_status()["phase"] == "idle", 30, "idle")
    status = stack.cluster.transfer_status()
    assert (status["committed"], status["canary"]) == (1, None)
    assert stack.serving.status()["canary"] is None
    for s in range(3):
        assert stack.cluster.server_status(s)["bg_version"] != 2
    since = [len(s) for s in load.seen]
    load.wait_answers(100, 60)
    assert _share_of(load, 2, since)[0] == 0
    cube, text = _status(stack)
    assert cube["canary"] is None and cube["last_canary"]["result"] == "rolled_back"
    assert cube["last_canary"]["decision"]["candidate"]["clicks"] == SHUFFLED.clicks
    assert "  last canary: version 2 rolled back after " in text
    assert "worse by more than 0.02 at confidence 0.99" in text
    metrics = http("GET", stack.cluster.transfer_url("/metrics"))[1]
    name = "elasticctr_cube_transfer_rollouts_total"
    assert metric_sample(metrics, name, kind="canary", result="rolled_back") == 1.0


def _promoted(stack, joiner: JoinerStandIn, load: Load) -> None:
    joiner.online = {1: GOOD}
    announce(stack.cluster, 3)
    wait_until(lambda: (stack.serving.status()["canary"] or {}).get("version") == 3,
               60, "serving to score the canary of version 3")  # fmt: skip
    load.wait_answers(200, 60)
    joiner.online = {1: GOOD, 3: LIKE_GOOD}
    stack.serving.wait_version(3, 60)
    entry = _canary_entries(stack)[-1]
    assert (entry["version"], entry["result"]) == (3, "committed"), entry
    assert entry["canary"]["decision"]["decision"] == "promote"
    cube, text = _status(stack)
    assert (cube["committed"], cube["last_canary"]["version"]) == (3, 3)
    assert "  last canary: version 3 promoted after " in text
    status = stack.cluster.transfer_status()
    assert (status["committed"], status["previous"], status["canary"]) == (3, 1, None)
    since = [len(s) for s in load.seen]
    load.wait_answers(100, 60)
    canary, total = _share_of(load, 3, since)
    assert canary == total  # every request on the promoted version
    served = http("GET", stack.serving.url + "/metrics")[1]
    assert (metric_sample(served, "elasticctr_serving_canary_examples_total") or 0) > 0
    assert metric_sample(served, "elasticctr_serving_canary_version") == -1.0
    # The switch is recorded; nothing further is on trial.
    wait_until(lambda: stack.cluster.transfer_status()["phase"] == "idle", 30, "idle")
    assert np.isfinite(entry["canary"]["seconds"])
