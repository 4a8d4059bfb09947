"""Serving's impression log and click endpoint against a real Kafka broker (KRaft, from
Maven's jars): one record per answered instance under the answer's request id, with the
features as the trainer reads them and the score answered; clicks to their topic; bad
clicks answered 400 and counted; the broker killed under load: predictions go on, the
records that found the buffer full are counted, the rest arrive whole and once."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from elasticctr_common.feedback import (
    CLICKS_TOPIC,
    IMPRESSIONS_TOPIC,
    impression_records,
    impressions,
    parse_click,
)

from tests.support.kafka import create_topics, read_topic
from tests.support.services import KafkaBroker
from tests.support.serving import (
    PYTHONPATH,
    Processes,
    Stack,
    http,
    metric_sample,
    probe_instances,
    start_stack,
)

pytestmark = pytest.mark.slow
INFERENCE = "/ElasticCTRPredictionService/inference"


@pytest.fixture(scope="module")
def broker() -> Iterator[KafkaBroker]:
    missing = KafkaBroker.missing_prerequisite()
    if missing:
        pytest.fail(missing)
    with KafkaBroker() as kafka:
        create_topics(kafka.bootstrap, {IMPRESSIONS_TOPIC: 2, CLICKS_TOPIC: 2})
        yield kafka


def feedback_stack(procs: Processes, root, kafka: KafkaBroker, **env: str) -> Stack:
    serving_env = {"KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap, **env}
    return start_stack(procs, root, serving_env=serving_env)


def features(instance: dict) -> str:
    return " ".join(f"{f}:{s['slot_name']}" for s in instance["slots"] for f in s["feasigns"])


def test_every_answered_instance_is_one_impression_with_its_features_and_score(
    broker, tmp_path, cube_server_bin
):
    procs = Processes(tmp_path)
    try:
        # Compressed by the producer, as a stack with feedback.compression sends them.
        stack = feedback_stack(procs, tmp_path, broker, FEEDBACK_COMPRESSION="zstd")
        url = stack.serving.url
        instances = probe_instances(stack.spec, 60, seed=5)
        sent: dict[tuple[str, int], tuple[str, float]] = {}
        for start in range(0, 60, 6):  # 10 requests of 1..6 instances
            batch = instances[start : start + 1 + start % 6]
            code, body, headers = http("POST", url + INFERENCE, {"instances": batch})
            assert code == 200, body
            rid = body["request_id"]
            assert headers["X-Request-Id"] == rid
            for i, (instance, p) in enumerate(zip(batch, body["predictions"], strict=True)):
                sent[(rid, i)] = (features(instance), p["prob1"])
        plain = {"instances": [{"101": [5, 6], "102": [7]}]}
        code, body, _ = http("POST", url + "/predict", plain)
        assert code == 200 and body["request_id"] not in {k[0] for k in sent}
        sent[(body["request_id"], 0)] = ("5:101 6:101 7:102", body["predictions"][0])

        wait_delivered(stack, len(sent))
        records = logged_records(read_topic(broker.bootstrap, IMPRESSIONS_TOPIC, 1))
        logged = [m for r in records for m in impressions(r)]
        got = {(m.request_id, m.index): m for m in logged}
        assert len(records) == 11 and len(got) == len(logged) == len(sent)  # one per request
        for key, (feats, score) in sent.items():
            assert got[key].features == feats
            assert got[key].score == pytest.approx(score, abs=1e-7)
            assert got[key].version == 1
            assert abs(got[key].time - time.time()) < 600
        status = stack.serving.status()["feedback"]
        assert status["impressions"]["queued"] == len(sent)
        assert status["waiting"] == 0, status
    finally:
        procs.stop_all()


def logged_records(messages: list[bytes]) -> list[bytes | None]:
    """The impression records of the topic's messages (serving sends several in one)."""
    return [record for value in messages for record in impression_records(value)]


def wait_delivered(stack: Stack, n: int, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = stack.serving.status()["feedback"]
        if status["impressions"]["delivered"] + status["impressions"]["failed"] >= n:
            return status
        assert time.monotonic() < deadline, f"{n} not delivered: {status}"
        time.sleep(0.2)


def test_clicks_go_to_their_topic_and_bad_ones_are_refused_and_counted(
    broker, tmp_path, cube_server_bin
):
    procs = Processes(tmp_path)
    try:
        stack = feedback_stack(procs, tmp_path, broker)
        url = stack.serving.url
        code, body, _ = http("POST", url + "/click", {"request_id": "abc-1", "instance": 2})
        assert (code, body) == (202, {"accepted": 1})
        many = {"clicks": [{"request_id": "abc-2", "instance": i} for i in range(3)]}
        assert http("POST", url + "/click", many)[:2] == (202, {"accepted": 3})
        cases: list[tuple[bytes | dict[str, Any], str]] = [
            (b"{", "malformed JSON"),
            ({"request_id": "a b", "instance": 0}, "request_id must be"),
            ({"request_id": "x", "instance": -1}, "instance must be an integer >= 0"),
            ({"request_id": "x", "instance": True}, "instance must be an integer >= 0"),
            ({"clicks": []}, '"clicks" must be a non-empty list'),
            ({"clicks": [{"request_id": "x", "instance": 0}, 5]}, "click 1: expected an object"),
        ]
        for bad, message in cases:
            code, body, _ = http("POST", url + "/click", bad)
            assert code == 400 and message in body["error"], (bad, body)
        # the client's `click`: REQUEST_ID:INSTANCE (ids may hold a colon)
        client = [sys.executable, "-m", "elasticctr_client", "click", "--serving-url", url]
        env = {**os.environ, "PYTHONPATH": PYTHONPATH}
        done = subprocess.run([*client, "cli:7:0", "cli-8:3"], env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
        assert done.returncode == 0 and "2 clicks accepted" in done.stdout, done.stderr
        refused = subprocess.run([*client, "no-index"], env=env, capture_output=True,
                                 text=True, timeout=120)  # fmt: skip
        assert refused.returncode == 2 and "is not REQUEST_ID:INSTANCE" in refused.stderr
        clicks = [parse_click(r) for r in read_topic(broker.bootstrap, CLICKS_TOPIC, 6)]
        assert sorted((c.request_id, c.index) for c in clicks) == [
            ("abc-1", 2), ("abc-2", 0), ("abc-2", 1), ("abc-2", 2), ("cli-8", 3), ("cli:7", 0),
        ]  # fmt: skip
        assert stack.serving.status()["feedback"]["clicks"]["rejected"] == 6
        text = http("GET", url + "/metrics")[1]
        assert metric_sample(text, "elasticctr_serving_clicks_total", outcome="rejected") == 6
        # serving keeps answering predictions after all of that
        one = probe_instances(stack.spec, 1)
        assert http("POST", url + INFERENCE, {"instances": one})[0] == 200
    finally:
        procs.stop_all()


def test_click_without_feedback_is_404(stack_without_feedback):
    code, body, _ = http("POST", stack_without_feedback.serving.url + "/click",
                         {"request_id": "a", "instance": 0})  # fmt: skip
    assert code == 404 and "feedback loop is off" in body["error"]
    status = stack_without_feedback.serving.status()
    assert status["feedback"] == {"enabled": False}


@pytest.fixture
def stack_without_feedback(tmp_path, cube_server_bin):
    procs = Processes(tmp_path)
    try:
        yield start_stack(procs, tmp_path)
    finally:
        procs.stop_all()


def test_broker_down_predictions_go_on_overflow_is_counted_and_nothing_is_half_written(
    tmp_path, cube_server_bin
):
    procs = Processes(tmp_path)
    with KafkaBroker() as kafka:
        topic = "impressions-outage"
        create_topics(kafka.bootstrap, {topic: 1, CLICKS_TOPIC: 1})
        try:
            stack = feedback_stack(
                procs, tmp_path, kafka,
                FEEDBACK_IMPRESSIONS_TOPIC=topic, FEEDBACK_BUFFER_RECORDS="10",
            )  # fmt: skip
            url = stack.serving.url
            instances = probe_instances(stack.spec, 10, seed=2)
            before = ask(url, instances, 5)
            wait_delivered(stack, len(before))
            kafka.kill()
            during = ask(url, instances, 30)  # 30 requests' records into a buffer of 10
            status = stack.serving.status()["feedback"]
            dropped = status["impressions"]["dropped_buffer_full"]
            assert dropped >= (30 - 10) * 10 and dropped % 10 == 0, status  # whole requests
            assert metric_sample(
                http("GET", url + "/metrics")[1],
                "elasticctr_serving_impressions_total", outcome="dropped_buffer_full",
            ) == dropped  # fmt: skip
            kafka.restart()
            wait_delivered(stack, len(before) + len(during) - dropped, timeout=120)
            after = ask(url, instances, 5)
            queued = len(before) + len(during) + len(after) - dropped
            status = wait_delivered(stack, queued, timeout=120)
            assert status["impressions"]["failed"] == 0, status
            records = logged_records(read_topic(kafka.bootstrap, topic, 1))
            keys = [(m.request_id, m.index) for r in records for m in impressions(r)]
            assert len(keys) == len(set(keys)) == queued  # whole, once
            assert set(before) | set(after) <= set(keys)  # buffered while down, sent later
            assert set(keys) <= set(before) | set(during) | set(after)
        finally:
            procs.stop_all()


def ask(url: str, instances: list[dict], requests: int) -> list[tuple[str, int]]:
    """`requests` predictions of all `instances`, each answered 200; their impression keys."""
    keys = []
    for _ in range(requests):
        code, body, _ = http("POST", url + INFERENCE, {"instances": instances}, timeout=30)
        assert code == 200, body
        keys += [(body["request_id"], i) for i in range(len(instances))]
    return keys
