"""The joiner's /metrics as a live process against a real Kafka broker, read with
prometheus_client's parser and checked against the metrics contract; its online
evaluation per served version equals the AUC (pairwise count), calibration and log loss of
exactly what was joined; bad records counted by reason; no consumer lag once read up."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
import urllib.request

import pytest
from elasticctr_common.feedback import CLICKS_TOPIC, IMPRESSIONS_TOPIC, Click, pack_impressions
from elasticctr_common.metrics import JOINER
from elasticctr_common.ports import free_port

from tests.support.cube import wait_until
from tests.support.kafka import create_topics
from tests.support.metrics import scrape, value
from tests.support.services import KafkaBroker
from tests.support.serving import Processes

pytestmark = pytest.mark.slow


def pairwise_auc(examples) -> float:
    pos = [s for s, y in examples if y]
    neg = [s for s, y in examples if not y]
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (
        len(pos) * len(neg)
    )


def test_joiner_metrics_and_online_evaluation_per_version(tmp_path):
    missing = KafkaBroker.missing_prerequisite()
    if missing:
        pytest.fail(missing)
    rng = random.Random(5)
    # Two versions served a minute well in the past: its partition is due at once.
    start = (int(time.time()) // 60 - 10) * 60
    sent: dict[int, list[tuple[float, int]]] = {1: [], 2: []}
    procs = Processes(tmp_path)
    with KafkaBroker() as kafka:
        try:
            check_joiner(kafka, procs, tmp_path, start, rng, sent)
        finally:
            procs.stop_all()


def check_joiner(kafka, procs, tmp_path, start, rng, sent) -> None:
    from confluent_kafka import Producer

    create_topics(kafka.bootstrap, {IMPRESSIONS_TOPIC: 3, CLICKS_TOPIC: 3})
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for r in range(200):
        version = 1 + r % 2
        scores = [round(rng.random(), 2) for _ in range(3)]  # ties among them
        rid, at = f"r{r}", start + 50 * r / 200
        record = pack_impressions(
            rid, at, version, [1], scores, [[(r * 3 + i, 1)] for i in range(3)]
        )
        producer.produce(IMPRESSIONS_TOPIC, record, key=rid)
        for i, score in enumerate(scores):
            # version 1's scores tell clicks apart; version 2's do not
            p = score if version == 1 else 0.3
            clicked = int(rng.random() < p)
            sent[version].append((score, clicked))
            if clicked:
                producer.produce(CLICKS_TOPIC, Click(rid, i, at + 1).to_bytes(), key=rid)
    producer.produce(IMPRESSIONS_TOPIC, b"not json", key="bad")
    producer.flush(30)
    port = free_port()
    procs.start(
        "joiner",
        [
            sys.executable, "-m", "elasticctr_joiner", "--dataset-uri",
            (tmp_path / "dataset").as_uri(), "--partition-minutes", "1",
            "--join-window-seconds", "1", "--port", str(port),
        ],
        env=kafka.env(),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/metrics"
    try:

        def joined():
            try:
                families = scrape(url, JOINER, complete=False)
            except OSError:
                return None
            done = value(families, "elasticctr_joiner_examples_total") == 600
            return families if done else None

        families = wait_until(joined, 120, "the joiner to write 600 examples", 0.5)
    except AssertionError:
        raise AssertionError(procs.log("joiner")[-3000:]) from None
    scrape(url, JOINER)  # every family of the contract, and only those
    j = "elasticctr_joiner_"
    clicks = sum(y for v in sent.values() for _, y in v)
    assert value(families, j + "impressions_total") == 600
    assert value(families, j + "clicks_total") == clicks
    assert value(families, j + "clicked_examples_total") == clicks
    # the minute served, then the empty minutes after it up to the clock
    assert value(families, j + "partitions_total") >= 1
    assert value(families, j + "newest_partition_end_timestamp_seconds") >= start + 60
    assert value(families, j + "bad_records_total", kind="impression", reason="not_json") == 1
    assert value(families, j + "dropped_clicks_total", reason="unknown") == 0
    for version, examples in sent.items():
        v = str(version)
        scores, labels = [s for s, _ in examples], [y for _, y in examples]
        assert value(families, j + "online_window_examples", version=v) == 300
        assert value(families, j + "online_window_clicks", version=v) == sum(labels)
        auc = value(families, j + "online_auc", version=v)
        assert auc == pytest.approx(pairwise_auc(examples), abs=1e-12)
        calibration = (sum(scores) / 300) / (sum(labels) / 300)
        assert value(families, j + "online_calibration", version=v) == pytest.approx(calibration)
        loss = -sum(math.log(s) if y else math.log(1 - s) for s, y in examples if 0 < s < 1)
        clipped = [(s, y) for s, y in examples if not 0 < s < 1]
        if not clipped:
            assert value(families, j + "online_log_loss", version=v) == pytest.approx(loss / 300)
    assert value(families, j + "online_auc", version="1") > 0.7  # v1 tells clicks apart
    lags = [s.value for s in families["elasticctr_joiner_consumer_lag_records"].samples]
    assert lags and all(lag == 0 for lag in lags), lags
    # /status gives the same figures per version (what `elasticctr status` shows).
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as answer:
        online = json.load(answer)["online"]
    assert set(online) == {"1", "2"}
    for v, figures in online.items():
        assert figures["examples"] == value(families, j + "online_window_examples", version=v)
        assert figures["clicks"] == value(families, j + "online_window_clicks", version=v)
        assert figures["auc"] == pytest.approx(value(families, j + "online_auc", version=v))
        calibration = value(families, j + "online_calibration", version=v)
        assert figures["calibration"] == pytest.approx(calibration)
    # `elasticctr status` shows them, in text and in --json.
    client = [sys.executable, "-m", "elasticctr_client", "status"]
    joiner = ["--joiner-url", f"http://127.0.0.1:{port}"]
    text = subprocess.run([*client, *joiner], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    auc_1 = online["1"]["auc"]
    assert f"  version 1 online: AUC {auc_1:.4f}, calibration" in text.stdout, text.stdout
    assert "on 300 examples" in text.stdout
    assert "feedback: joiner running, last partition closed 2" in text.stdout
    assert (
        f"  since its start: 600 impressions, {clicks:,} clicks; skipped: 0 late clicks,"
        " 0 unknown, 0 duplicate, 1 bad records"
    ) in text.stdout, text.stdout
    as_json = subprocess.run([*client, *joiner, "--json"], capture_output=True, text=True)
    shown = json.loads(as_json.stdout)["feedback"]
    assert shown["online"] == online
    assert (shown["counts"]["impressions"], shown["counts"]["bad"]) == (
        600,
        {"impression:not_json": 1},
    )
    assert procs.terminate("joiner") == 0  # SIGTERM: a clean stop
