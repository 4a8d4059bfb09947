"""Serving's half of the feedback loop (docs/feedback.md): the impressions of each answered
request, and the clicks applications send to `POST /click`, to Kafka.

Nothing here may slow or fail a prediction. On the event loop, after the answer is
computed: the sampling decision, then the request's impressions packed as one record
(elasticctr_common.feedback: the request's feasign, slot and count arrays copied out
behind a small JSON head, ~15 µs at batch 64) and appended to a list. A thread of its own
hands that list to librdkafka (confluent-kafka) as one framed message every `SEND_SECONDS`
(at most `MESSAGE_BYTES` each) and serves the delivery reports: one
`produce` and one report per request cost the event loop more than the record itself
(docs/feedback.md). The records held (listed, or in librdkafka's buffer, until
acknowledged) are bounded (`buffer_records`): a record that finds the bound reached is
dropped and counted, never waited for. A record is delivered whole or not at all (Kafka
appends a message atomically; the producer is idempotent, so its retries after a broker
restart add no duplicates).

Counted per impression (metrics `elasticctr_serving_impressions_total{outcome}` and
`/status`): queued, sampled_out, dropped_buffer_full, delivered, failed (librdkafka gave
up: the broker unreachable for longer than `message.timeout.ms`); clicks likewise
(`elasticctr_serving_clicks_total{outcome}`, with rejected: malformed).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from functools import partial
from itertools import count
from typing import Any

import numpy as np
import orjson
from elasticctr_common.feedback import (
    FRAME_BYTES,
    FRAMED_MESSAGE,
    Click,
    FeedbackEnv,
    compression_type,
    impressions_head,
    impressions_message,
    kafka_client_config,
    packed_impressions_record,
    topics,
)
from elasticctr_common.metrics import FEEDBACK_OUTCOMES

from .instances import Parsed
from .metrics import ServingMetrics

log = logging.getLogger("elasticctr_serving.feedback")

DEFAULT_BUFFER_RECORDS = 100_000
# The sending thread's period: what the event loop logged since goes out as one message.
# The broker's cost is mostly per message (at 2,000 requests/s, 100 ms cost it a third of
# what 20 ms did); an impression waits at most this long, against a join window of minutes.
SEND_SECONDS = 0.1
# A message's records and frames stay within this (the broker's message.max.bytes
# is 1 MiB by default); a record larger on its own goes alone.
MESSAGE_BYTES = 512 * 1024
OUTCOMES = FEEDBACK_OUTCOMES


class RequestIds:
    """Unique request ids: a random prefix per process and a counter (no two replicas,
    and no restart, repeat one)."""

    def __init__(self) -> None:
        self.prefix = uuid.uuid4().hex[:12]
        self.counter = count(1)

    def next(self) -> str:
        return f"{self.prefix}-{next(self.counter)}"


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
        compression: str = "none",
        producer_factory: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        if not 0 <= sample_rate <= 1:
            raise ValueError(f"sample rate must be within [0, 1], got {sample_rate}")
        if buffer_records < 1:
            raise ValueError(f"buffer records must be >= 1, got {buffer_records}")
        self.impressions_topic, self.clicks_topic = impressions_topic, clicks_topic
        self.sample_rate = sample_rate
        self.buffer_records = buffer_records
        self.metrics = metrics
        self.ids = RequestIds()
        self.config: dict[str, Any] = {
            **producer_config,
            "enable.idempotence": True,  # acks=all, and retries add no duplicates
            # The sending thread batches already (one message per SEND_SECONDS): waiting
            # longer only makes the broker's work come in bursts (docs/feedback.md).
            "linger.ms": 5,
            "compression.type": compression,
            # A backstop: the records held are bounded before (a message has one or more).
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
        # Records logged and not yet produced: (record, impressions); the event loop appends,
        # the sending thread takes the list whole. `_held` counts impression records from
        # their listing, and clicks from their produce, to their delivery report or drop.
        self._lock = threading.Lock()
        self._listed: list[tuple[bytes, int]] = []
        self._held = 0
        self._stopping = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="feedback-sender", daemon=True)
        self._poller.start()
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
            compression=compression_type(env),
        )

    # the event loop's side ---------------------------------------------------------------

    def log_request(
        self,
        request_id: str,
        parsed: Parsed,
        slots: tuple[int, ...],
        version: int,
        scores: list[float | None],
    ) -> None:
        """Hand one request's impressions to the producer (sampled per request); never
        blocks or raises."""
        n = parsed.count
        if self.sample_rate < 1 and random.random() >= self.sample_rate:
            self.metrics.impressions.inc(n, "sampled_out")
            return
        raw, kinds, rows = parsed.raw, parsed.raw_slots, parsed.raw_rows
        if raw is None or kinds is None or rows is None:
            return  # a Parsed made without its raw arrays (tests): nothing to log
        if n == 1:  # batch 1, the latency-bound case: no ordering, one count
            counts = raw.size.to_bytes(4, "little")
        else:
            if not bool((rows[1:] >= rows[:-1]).all()):
                order = np.argsort(rows, kind="stable")  # instance order
                raw, kinds, rows = raw[order], kinds[order], rows[order]
            counts = np.bincount(rows, minlength=n).astype("<u4").tobytes()
        value = packed_impressions_record(
            orjson.dumps(impressions_head(request_id, time.time(), version, slots, scores)),
            raw.astype("<u8", copy=False).tobytes(), kinds.astype("<u2").tobytes(), counts,
        )  # fmt: skip
        with self._lock:
            full = self._held >= self.buffer_records
            if not full:
                self._held += 1
                self._listed.append((value, n))
        self.metrics.impressions.inc(n, "dropped_buffer_full" if full else "queued")

    def click(self, request_id: str, index: int, at: float | None = None) -> bool:
        """Send one click; False (and counted) when librdkafka's buffer is full."""
        record = Click(request_id, index, time.time() if at is None else at)
        with self._lock:  # before the produce: its report may come before this returns
            self._held += 1
        try:
            self.producer.produce(
                self.clicks_topic, value=record.to_bytes(), key=request_id,
                on_delivery=partial(self._acknowledged, self.metrics.clicks, 1, 1),
            )  # fmt: skip
        except BufferError:
            self._release(1)
            self.metrics.clicks.inc(1, "dropped_buffer_full")
            return False
        self.metrics.clicks.inc(1, "queued")
        return True

    # the sending thread -------------------------------------------------------------------

    def _poll(self) -> None:
        # A poll returns as soon as it has run a report, and a report comes a few
        # milliseconds after each message: sending after every poll would send as often as
        # the broker answers. The clock paces the messages instead.
        due = time.monotonic() + SEND_SECONDS
        while not self._stopping.is_set():
            if self._fatal:
                self._renew()
            left = due - time.monotonic()
            if left > 0:
                self.producer.poll(left)  # runs the delivery reports
                continue
            self._send()
            due = time.monotonic() + SEND_SECONDS
        self._send()

    def _send(self) -> None:
        """Produce the listed records, in as few messages as MESSAGE_BYTES allows."""
        with self._lock:
            listed, self._listed = self._listed, []
        start = 0
        while start < len(listed):
            end, size = start + 1, len(FRAMED_MESSAGE) + FRAME_BYTES + len(listed[start][0])
            while end < len(listed) and size + FRAME_BYTES + len(listed[end][0]) <= MESSAGE_BYTES:
                size += FRAME_BYTES + len(listed[end][0])
                end += 1
            self._produce(listed[start:end])
            start = end

    def _produce(self, records: list[tuple[bytes, int]]) -> None:
        n = sum(count for _, count in records)
        try:
            self.producer.produce(
                self.impressions_topic,
                value=impressions_message([value for value, _ in records]),
                on_delivery=partial(self._acknowledged, self.metrics.impressions, len(records), n),
            )  # fmt: skip
        except BufferError:  # librdkafka's own bound (queue.buffering.max.kbytes)
            self._release(len(records))
            self.metrics.impressions.inc(n, "dropped_buffer_full")

    def _release(self, records: int) -> None:
        with self._lock:
            self._held -= records

    def _acknowledged(self, counter: Any, records: int, n: int, err: Any, msg: Any) -> None:
        self._release(records)
        if err is None:
            counter.inc(n, "delivered")
        else:
            counter.inc(n, "failed")
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
        old.purge()  # what it still held is reported failed (and counted), not lost unseen
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
            "waiting": self._held,  # records and clicks logged, not yet acknowledged
            "last_error": self.last_error,
        }

    def close(self, timeout: float = 10.0) -> None:
        """Wait up to `timeout` for what is queued to be delivered."""
        self._stopping.set()
        self._poller.join(timeout)
        left = self.producer.flush(timeout)
        if left:
            log.warning("%d feedback records not delivered at shutdown", left)
