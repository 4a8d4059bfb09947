"""Serving's half of the feedback loop (docs/feedback.md): one impression record per
predicted instance, and the clicks applications send to `POST /click`, to Kafka.

Nothing here may slow or fail a prediction. The event loop only decides sampling and
queues the request's arrays (one append); a writer thread formats the records and hands
them to librdkafka (confluent-kafka), whose own threads batch and send them. Both
buffers are bounded: the writer's queue (MAX_PENDING_REQUESTS) and librdkafka's
(`buffer_records`); a record that finds either full is dropped and counted, never waited
for. A record is delivered whole or not at all (Kafka appends a message atomically; the
producer is idempotent, so its retries after a broker restart add no duplicates).

Counted (metrics `elasticctr_serving_impressions_total{outcome}` and
`elasticctr_serving_clicks_total{outcome}`, and `/status`): queued, sampled_out,
dropped_queue_full, dropped_buffer_full, delivered, failed (librdkafka gave up: the
broker was unreachable for longer than `message.timeout.ms`).
"""

from __future__ import annotations

import logging
import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np
from elasticctr_common.feedback import (
    FeedbackEnv,
    impression_bytes,
    kafka_client_config,
    topics,
)
from numpy.typing import NDArray

from .instances import Parsed
from .metrics import ServingMetrics

log = logging.getLogger("elasticctr_serving.feedback")

DEFAULT_BUFFER_RECORDS = 100_000
MAX_PENDING_REQUESTS = 10_000  # requests queued for the writer thread
OUTCOMES = (
    "queued",
    "sampled_out",
    "dropped_queue_full",
    "dropped_buffer_full",
    "delivered",
    "failed",
)


class RequestIds:
    """Unique request ids: a random prefix per process and a counter (no two replicas,
    and no restart, repeat one)."""

    def __init__(self) -> None:
        self.prefix = uuid.uuid4().hex[:12]
        self.counter = count(1)

    def next(self) -> str:
        return f"{self.prefix}-{next(self.counter)}"


@dataclass
class _Logged:
    request_id: str
    time: float
    version: int
    raw: NDArray[np.uint64]
    slots: NDArray[np.int32]
    rows: NDArray[np.int32]
    count: int
    scores: list[float | None]
    suffixes: list[str]


def features_of(
    raw: NDArray[np.uint64],
    slots: NDArray[np.int32],
    rows: NDArray[np.int32],
    count: int,
    suffixes: list[str],
) -> list[str]:
    """Each instance's `<feasign>:<slot> ...` in the order sent (instance order first)."""
    if rows.size > 1 and not bool((rows[1:] >= rows[:-1]).all()):
        order = np.argsort(rows, kind="stable")
        raw, slots, rows = raw[order], slots[order], rows[order]
    tokens = list(
        map(str.__add__, map(str, raw.tolist()), map(suffixes.__getitem__, slots.tolist()))
    )
    bounds = np.searchsorted(rows, np.arange(count + 1)).tolist()
    return [" ".join(tokens[bounds[i] : bounds[i + 1]]) for i in range(count)]


class FeedbackLog:
    """Impressions and clicks to Kafka, off the request's path."""

    def __init__(
        self,
        producer_config: Mapping[str, str],
        impressions_topic: str,
        clicks_topic: str,
        metrics: ServingMetrics,
        *,
        sample_rate: float = 1.0,
        buffer_records: int = DEFAULT_BUFFER_RECORDS,
        producer_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        if not 0 <= sample_rate <= 1:
            raise ValueError(f"sample rate must be within [0, 1], got {sample_rate}")
        if buffer_records < 1:
            raise ValueError(f"buffer records must be >= 1, got {buffer_records}")
        self.impressions_topic, self.clicks_topic = impressions_topic, clicks_topic
        self.sample_rate = sample_rate
        self.buffer_records = buffer_records
        self.max_pending = MAX_PENDING_REQUESTS
        self.metrics = metrics
        self.ids = RequestIds()
        self._pending: queue.SimpleQueue[_Logged | None] = queue.SimpleQueue()
        self.config: dict[str, Any] = {
            **producer_config,
            "enable.idempotence": True,  # acks=all, and retries add no duplicates
            "linger.ms": 20,
            "queue.buffering.max.messages": buffer_records,
            "message.timeout.ms": 300_000,
            "error_cb": self._on_error,
            "logger": logging.getLogger("elasticctr_serving.kafka"),
        }
        if producer_factory is None:
            from confluent_kafka import Producer

            producer_factory = Producer
        self._factory = producer_factory
        self.producer = producer_factory(self.config)
        self._fatal = False
        self.last_error = ""
        self._stopping = threading.Event()
        self._writer = threading.Thread(target=self._write, name="feedback-writer", daemon=True)
        self._writer.start()
        for outcome in OUTCOMES:
            metrics.impressions.inc(0, outcome)
            metrics.clicks.inc(0, outcome)
        metrics.clicks.inc(0, "rejected")

    @classmethod
    def from_env(cls, env: Mapping[str, str], metrics: ServingMetrics) -> FeedbackLog | None:
        """The log the environment asks for (FeedbackEnv), or None without a stream."""
        if not env.get(FeedbackEnv.BOOTSTRAP):
            return None
        impressions, clicks = topics(env)
        return cls(
            kafka_client_config(env),
            impressions,
            clicks,
            metrics,
            sample_rate=float(env.get(FeedbackEnv.SAMPLE_RATE) or 1.0),
            buffer_records=int(env.get(FeedbackEnv.BUFFER_RECORDS) or DEFAULT_BUFFER_RECORDS),
        )

    # the event loop's side ---------------------------------------------------------------

    def log_request(
        self,
        request_id: str,
        parsed: Parsed,
        suffixes: list[str],
        version: int,
        scores: list[float | None],
    ) -> None:
        """Queue one request's impressions (sampled per request); never blocks or raises."""
        n = parsed.count
        if self.sample_rate < 1 and random.random() >= self.sample_rate:
            self.metrics.impressions.inc(n, "sampled_out")
            return
        if self._pending.qsize() >= self.max_pending or parsed.raw is None:
            self.metrics.impressions.inc(n, "dropped_queue_full")
            return
        assert parsed.raw_slots is not None and parsed.raw_rows is not None
        self._pending.put(
            _Logged(
                request_id,
                time.time(),
                version,
                parsed.raw,
                parsed.raw_slots,
                parsed.raw_rows,
                n,
                scores,
                suffixes,
            )
        )

    def click(self, request_id: str, index: int, at: float | None = None) -> bool:
        """Send one click; False (and counted) when librdkafka's buffer is full."""
        from elasticctr_common.feedback import Click

        record = Click(request_id, index, time.time() if at is None else at)
        try:
            self.producer.produce(
                self.clicks_topic, value=record.to_bytes(), key=request_id,
                on_delivery=self._click_delivered,
            )  # fmt: skip
        except BufferError:
            self.metrics.clicks.inc(1, "dropped_buffer_full")
            return False
        self.metrics.clicks.inc(1, "queued")
        return True

    # the writer thread -------------------------------------------------------------------

    def _write(self) -> None:
        while True:
            try:
                item = self._pending.get(timeout=0.1)
            except queue.Empty:
                item = None
                if self._stopping.is_set():
                    return
            if self._fatal:
                self._renew()
            if item is not None:
                try:
                    self._produce(item)
                except Exception:  # a bug here must not stop the writer
                    log.exception("impressions of request %s not written", item.request_id)
                    self.metrics.impressions.inc(item.count, "failed")
            self.producer.poll(0)  # delivery reports

    def _produce(self, item: _Logged) -> None:
        features = features_of(item.raw, item.slots, item.rows, item.count, item.suffixes)
        queued = 0
        for i in range(item.count):
            value = impression_bytes(
                item.request_id, i, item.time, item.version, item.scores[i], features[i]
            )
            try:
                self.producer.produce(
                    self.impressions_topic, value=value, key=item.request_id,
                    on_delivery=self._impression_delivered,
                )  # fmt: skip
            except BufferError:
                self.metrics.impressions.inc(item.count - i, "dropped_buffer_full")
                break
            queued += 1
        self.metrics.impressions.inc(queued, "queued")

    def _impression_delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.metrics.impressions.inc(1, "delivered")
        else:
            self.metrics.impressions.inc(1, "failed")
            self.last_error = str(err)

    def _click_delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.metrics.clicks.inc(1, "delivered")
        else:
            self.metrics.clicks.inc(1, "failed")
            self.last_error = str(err)

    def _on_error(self, err: Any) -> None:
        self.last_error = str(err)
        if err.fatal():  # the idempotent producer's state is lost: a new producer
            log.error("kafka producer: fatal error %s: starting a new producer", err)
            self._fatal = True

    def _renew(self) -> None:
        self._fatal = False
        old = self.producer
        self.producer = self._factory(self.config)
        old.flush(0)

    # life cycle ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        impressions = {o: int(self.metrics.impressions.get(o)) for o in OUTCOMES}
        clicks = {o: int(self.metrics.clicks.get(o)) for o in (*OUTCOMES, "rejected")}
        return {
            "enabled": True,
            "impressions_topic": self.impressions_topic,
            "clicks_topic": self.clicks_topic,
            "sample_rate": self.sample_rate,
            "buffer_records": self.buffer_records,
            "impressions": impressions,
            "clicks": clicks,
            "waiting": len(self.producer),  # in librdkafka's buffer, not yet acknowledged
            "last_error": self.last_error,
        }

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued and wait up to `timeout` for its delivery."""
        self._stopping.set()
        self._writer.join(timeout)
        left = self.producer.flush(timeout)
        if left:
            log.warning("%d feedback records not delivered at shutdown", left)


def from_environ(metrics: ServingMetrics) -> FeedbackLog | None:
    return FeedbackLog.from_env(os.environ, metrics)
