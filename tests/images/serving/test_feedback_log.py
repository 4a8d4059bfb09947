"""Serving's FeedbackLog against a producer that records what it is handed (no broker):
messages stay within MESSAGE_BYTES and hold every record once, in order; a record too
large for one message goes alone; the held records are bounded and the overflow counted.
The real broker's side: test_serving_feedback.py."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from elasticctr_common.feedback import FRAMED_MESSAGE, impression_records, impressions
from elasticctr_serving.feedback import MESSAGE_BYTES, SEND_SECONDS, FeedbackLog
from elasticctr_serving.instances import Parsed
from elasticctr_serving.metrics import ServingMetrics

SLOTS = (101, 102)


class RecordingProducer:
    """Keeps each produced value; `deliver` decides whether poll() acknowledges them. Like
    librdkafka's, a poll returns as soon as it has run a report, and a message's report
    comes `ACK_SECONDS` after its produce."""

    ACK_SECONDS = 0.002

    def __init__(self, config: dict[str, Any], deliver: bool = True) -> None:
        self.config = config
        self.deliver = deliver
        self.values: list[bytes] = []
        self._pending: list[tuple[float, Any]] = []
        self._lock = threading.Lock()

    def produce(self, topic: str, value: bytes, on_delivery: Any, key: str | None = None) -> None:
        with self._lock:
            self.values.append(value)
            self._pending.append((time.monotonic() + self.ACK_SECONDS, on_delivery))

    def poll(self, timeout: float) -> int:
        until = time.monotonic() + timeout
        while True:
            now = time.monotonic()
            with self._lock:
                due = [r for at, r in self._pending if at <= now] if self.deliver else []
                self._pending = self._pending[len(due) :]
                first = self._pending[0][0] if self._pending and self.deliver else until
            for report in due:
                report(None, None)
            if due or now >= until:
                return len(due)
            time.sleep(max(0.0, min(first, until) - now))

    def flush(self, timeout: float = 0) -> int:
        until = time.monotonic() + timeout
        while self._pending and self.deliver and time.monotonic() < until:
            self.poll(until - time.monotonic())
        return len(self._pending)

    def purge(self) -> None:
        pass


def request(instances: int, feasigns: int, first: int) -> Parsed:
    raw = np.arange(first, first + instances * feasigns, dtype=np.uint64)
    kinds = np.tile(np.arange(feasigns, dtype=np.int32) % len(SLOTS), instances)
    rows = np.repeat(np.arange(instances, dtype=np.int32), feasigns)
    return Parsed(instances, raw, kinds, rows, 0, None, raw, kinds, rows)


def feedback_log(deliver: bool = True, **kwargs: Any) -> tuple[FeedbackLog, RecordingProducer]:
    made: list[RecordingProducer] = []

    def factory(config: dict[str, Any]) -> RecordingProducer:
        made.append(RecordingProducer(config, deliver))
        return made[-1]

    log = FeedbackLog(
        {"bootstrap.servers": "k:9092"}, "imp", "clk", ServingMetrics(),
        producer_factory=factory, **kwargs,
    )  # fmt: skip
    return log, made[0]


def test_messages_stay_within_their_bound_and_hold_every_record_once_in_order() -> None:
    log, producer = feedback_log(compression="zstd")
    assert producer.config["compression.type"] == "zstd"
    sent = []
    for i in range(120):  # ~10 KB records: several messages whatever the thread's timing
        log.log_request(f"r-{i}", request(64, 20, i * 10_000), SLOTS, 3, [0.5] * 64)
        sent.append(f"r-{i}")
    log.close()
    assert len(producer.values) >= 3
    assert all(v.startswith(FRAMED_MESSAGE) and len(v) <= MESSAGE_BYTES for v in producer.values)
    got = [impressions(r)[0].request_id for v in producer.values for r in impression_records(v)]
    assert got == sent
    first = impressions(impression_records(producer.values[0])[0])
    assert first[1].features.split()[:2] == ["20:101", "21:102"]  # instance 1's, as sent
    status = log.status()
    assert status["waiting"] == 0 and status["impressions"]["delivered"] == 120 * 64


def test_a_record_larger_than_a_message_goes_alone() -> None:
    log, producer = feedback_log()
    big = request(1, MESSAGE_BYTES // 8, 1)  # 8 bytes a feasign: over the bound by itself
    log.log_request("small-1", request(1, 2, 1), SLOTS, 3, [0.5])
    log.log_request("big", big, SLOTS, 3, [0.5])
    log.log_request("small-2", request(1, 2, 1), SLOTS, 3, [0.5])
    log.close()
    ids = [[impressions(r)[0].request_id for r in impression_records(v)] for v in producer.values]
    assert ["big"] in ids and [i for group in ids for i in group] == ["small-1", "big", "small-2"]


def test_records_past_the_bound_are_dropped_and_counted_while_nothing_is_acknowledged() -> None:
    log, producer = feedback_log(deliver=False, buffer_records=5)
    for i in range(8):
        log.log_request(f"r-{i}", request(3, 2, i), SLOTS, 3, [0.5] * 3)
    status = log.status()
    assert status["waiting"] == 5
    assert status["impressions"]["queued"] == 5 * 3
    assert status["impressions"]["dropped_buffer_full"] == 3 * 3
    producer.deliver = True
    log.close()
    assert log.status()["waiting"] == 0 and log.status()["impressions"]["delivered"] == 5 * 3


def test_messages_go_at_the_sending_period_not_at_each_acknowledgement() -> None:
    log, producer = feedback_log()
    started = time.monotonic()
    for i in range(300):  # a request every ~1 ms; a message's report comes ACK_SECONDS on
        log.log_request(f"r-{i}", request(1, 2, i), SLOTS, 3, [0.5])
        time.sleep(0.001)
    elapsed = time.monotonic() - started
    log.close()
    periods = elapsed / SEND_SECONDS
    assert 0 < len(producer.values) <= periods + 2, (len(producer.values), periods)
    got = [impressions(r)[0].request_id for v in producer.values for r in impression_records(v)]
    assert got == [f"r-{i}" for i in range(300)]
