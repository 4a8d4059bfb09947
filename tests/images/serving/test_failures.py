"""What users see when serving cannot answer: each 5xx counted by cause in /status's recent
window and the metrics, and logged with its cause at most once per period, the answers not
logged counted in the next line (recent.py). Real processes: a cube shard's server dies."""

from __future__ import annotations

import logging

import pytest
from elasticctr_serving.recent import Failure, FailureLog, RecentRequests

from tests.support.cube import wait_until
from tests.support.serving import Serving, http, metric_sample, probe_instances, start_stack

INFERENCE = "/ElasticCTRPredictionService/inference"


def logged_failures(log: str) -> list[str]:
    return [line for line in log.splitlines() if "answered 503 to" in line]


@pytest.mark.slow
def test_a_dead_shard_fails_requests_and_serving_says_why(procs, tmp_path):
    stack = start_stack(procs, tmp_path, "--failure-log-seconds", "3600")
    body = {"instances": probe_instances(stack.spec, 4)}
    url = stack.serving.url + INFERENCE
    assert http("POST", url, body)[0] == 200

    procs.kill("server1")  # a shard of cube stops answering; the transfer still says 1
    answers = [http("POST", url, body)[:2] for _ in range(20)]
    assert {code for code, _ in answers} == {503}, answers[0]
    message = answers[-1][1]["err_msg"]
    assert message.startswith("cube lookup failed: "), message

    recent = stack.serving.status()["requests"]
    assert recent["window_seconds"] == 60
    assert (recent["requests"], recent["failed"], recent["client_errors"]) == (21, 20, 0)
    assert recent["failure_causes"] == {"cube_unavailable": 20}
    last = recent["last_failure"]
    assert (last["status"], last["cause"], last["message"]) == (503, "cube_unavailable", message)
    # A bad request is the client's error, not a failure of serving.
    assert http("POST", url, {"instances": []})[0] == 400
    assert stack.serving.status()["requests"]["client_errors"] == 1
    text = http("GET", stack.serving.url + "/metrics")[1]
    failures = "elasticctr_serving_failures_total"
    assert metric_sample(text, failures, cause="cube_unavailable") == 20
    # One log line for the 20 answers of one cause within the period.
    (line,) = logged_failures(stack.serving.log())
    assert f"answered 503 to POST {INFERENCE}: cube_unavailable: {message}" in line


@pytest.mark.slow
def test_failures_of_a_cause_are_logged_once_per_period_with_the_count_not_logged(procs, tmp_path):
    stack = start_stack(procs, tmp_path)
    procs.kill("server1")
    # A serving that starts now cannot check cube's version 1 on every shard: no model.
    serving = Serving(procs, "serving-b", stack.cluster, "--failure-log-seconds", "1")
    url = serving.url + "/predict"
    body = {"instances": [{"101": [1, 2]}]}
    logged, unlogged, lines = 0, 0, []

    def another_line_with_a_count() -> bool:
        nonlocal logged, unlogged, lines
        code, answer, _ = http("POST", url, body)
        assert (code, answer) == (503, {"error": "no model version is loaded yet"})
        lines = logged_failures(serving.log())
        if len(lines) == logged:
            unlogged += 1
            return False
        logged = len(lines)
        if logged > 1 and unlogged:
            return True
        unlogged = 0
        return False

    wait_until(another_line_with_a_count, 60, "a second log line of the cause", 0.01)
    assert "no_model: no model version is loaded yet" in lines[-1]
    assert f"({unlogged} more no_model answers in the last " in lines[-1], lines
    assert "not logged" not in lines[0]
    assert serving.status()["requests"]["failure_causes"] == {"no_model": logged + unlogged}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_window_keeps_the_last_minute_by_cause() -> None:
    clock = Clock()
    recent = RecentRequests(60, clock)
    recent.record(200)
    recent.record(503, Failure("cube_unavailable", "cube lookup failed: shard 1"))
    clock.now += 30
    recent.record(400)
    recent.record(503, Failure("no_model", "no model version is loaded yet"))
    recent.record(500)  # an answer without a known cause: serving's own error
    snapshot = recent.snapshot()
    assert (snapshot["requests"], snapshot["failed"], snapshot["client_errors"]) == (5, 3, 1)
    assert snapshot["failure_causes"] == {"cube_unavailable": 1, "no_model": 1, "internal": 1}
    clock.now += 31  # the first second is out of the window, the last failure stays known
    snapshot = recent.snapshot()
    assert (snapshot["requests"], snapshot["failed"]) == (3, 2)
    assert snapshot["failure_causes"] == {"no_model": 1, "internal": 1}
    assert snapshot["last_failure"]["cause"] == "internal"
    assert snapshot["last_failure"]["seconds_ago"] == 31
    clock.now += 60
    assert recent.snapshot()["requests"] == 0
    assert recent.snapshot()["last_failure"]["seconds_ago"] == 91


def test_the_log_says_each_cause_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("test-failure-log")
    log = FailureLog(logger, 10, clock)
    down = Failure("cube_unavailable", "cube lookup failed")
    with caplog.at_level(logging.WARNING, logger.name):
        for _ in range(5):
            log.failed(503, "POST /predict", down)
        log.failed(503, "POST /predict", Failure("no_model", "no model"))  # its own period
        clock.now += 9.9
        log.failed(503, "POST /predict", down)
        clock.now += 0.1
        log.failed(503, "POST /predict", down)
    assert [r.getMessage() for r in caplog.records] == [
        "answered 503 to POST /predict: cube_unavailable: cube lookup failed",
        "answered 503 to POST /predict: no_model: no model",
        "answered 503 to POST /predict: cube_unavailable: cube lookup failed "
        "(5 more cube_unavailable answers in the last 10 s not logged)",
    ]
