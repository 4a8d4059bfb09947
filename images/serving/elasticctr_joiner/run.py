"""The joiner's process: Kafka in (confluent-kafka), the join (joiner.py), partitions out,
and `/status`, `/metrics`, `/healthz` on its port.

It assigns itself every partition of both topics (one joiner per stack: no consumer
group rebalancing, and the offsets it trusts are the ones in the donefiles, never a
group's). The topics are created when missing, with the partition count given.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from elasticctr_common.exposition import CONTENT_TYPE, Exposition
from elasticctr_common.metrics import JOINER, JOINER_DROPPED_CLICKS, JOINER_DROPPED_IMPRESSIONS
from elasticctr_common.online_eval import OnlineEvaluator, Quality
from elasticctr_common.storage import Store

from .joiner import Committed, Joiner, Positions, find_committed
from .report import OnlineReporter

log = logging.getLogger("elasticctr_joiner")
T = TypeVar("T")


class NotReady(RuntimeError):
    """The broker does not serve a topic yet (just created, a leader being elected)."""


class TopicError(RuntimeError):
    """A topic is missing and cannot be created; the message names it."""


def ensure_topics(admin: Any, names: Mapping[str, int], timeout: float = 60.0) -> dict[str, int]:
    """Each topic's partition count, creating the missing ones (replication: the broker's
    default)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    meta = admin.list_topics(timeout=timeout)
    missing = [n for n in names if n not in meta.topics]
    if missing:
        futures = admin.create_topics(
            [NewTopic(n, names[n]) for n in missing], request_timeout=timeout
        )
        for name, future in futures.items():
            try:
                future.result(timeout=timeout)
                log.info("created topic %s with %d partitions", name, names[name])
            except KafkaException as err:
                if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise TopicError(
                        f"topic {name} does not exist and could not be created: {err} (create "
                        f"it, or allow this client to)"
                    ) from None
        meta = admin.list_topics(timeout=timeout)
    for name in names:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            raise NotReady(f"topic {name} is not in the broker's metadata yet")
        if any(p.leader < 0 for p in topic.partitions.values()):
            raise NotReady(f"topic {name} has partitions without a leader")
    return {n: len(meta.topics[n].partitions) for n in names}


class JoinerMetrics:
    """The joiner's families of the metrics contract (elasticctr_common.metrics.JOINER)."""

    def __init__(self) -> None:
        self.exposition = m = Exposition(JOINER)
        for reason in JOINER_DROPPED_IMPRESSIONS:  # every series from the start, at 0
            m["dropped_impressions_total"].labels(reason)
        for reason in JOINER_DROPPED_CLICKS:
            m["dropped_clicks_total"].labels(reason)
        self._seen: dict[tuple[str, tuple[str, ...]], int] = {}
        self._versions: set[str] = set()

    def _count(self, short: str, n: int, *labels: str) -> None:
        """Counter `short` (with `labels`) up to the joiner's count `n`."""
        key = (short, labels)
        metric = self.exposition[short]
        (metric.labels(*labels) if labels else metric).inc(n - self._seen.get(key, 0))
        self._seen[key] = n

    def update(self, joiner: Joiner, lag: Mapping[tuple[str, int], int]) -> None:
        c = joiner.counts
        self._count("impressions_total", c.impressions)
        self._count("late_impressions_total", c.late_impressions)
        self._count("dropped_impressions_total", c.duplicate_impressions, "duplicate")
        self._count("dropped_impressions_total", c.future_impressions, "future")
        self._count("clicks_total", c.clicks)
        self._count("late_clicks_total", c.late_clicks)
        self._count("dropped_clicks_total", c.duplicate_clicks, "duplicate")
        self._count("dropped_clicks_total", c.unknown_clicks, "unknown")
        self._count("examples_total", c.examples)
        self._count("clicked_examples_total", c.clicked)
        self._count("partitions_total", c.partitions)
        for key, n in c.bad.items():
            kind, reason = key.split(":", 1)
            self._count("bad_records_total", n, kind, reason)
        gauge = self.exposition["consumer_lag_records"]
        for (topic, kp), behind in lag.items():
            gauge.labels(topic, str(kp)).set(behind)

    def closed(self, end: float, lag: float) -> None:
        self.exposition["newest_partition_end_timestamp_seconds"].set(end)
        self.exposition["close_lag_seconds"].set(lag)

    def quality(self, by_version: Mapping[int, Quality]) -> None:
        """The online figures of each version in the window; versions that left it go."""
        families: dict[str, Callable[[Quality], float]] = {
            "online_auc": lambda q: q.auc,
            "online_calibration": lambda q: q.calibration,
            "online_log_loss": lambda q: q.log_loss,
            "online_window_examples": lambda q: q.examples,
            "online_window_clicks": lambda q: q.clicks,
        }
        versions = {str(v): q for v, q in by_version.items()}
        for short, figure in families.items():
            gauge = self.exposition[short]
            for version, q in versions.items():
                gauge.labels(version).set(figure(q))
            for gone in self._versions - versions.keys():
                gauge.remove(gone)
        self._versions = set(versions)

    def render(self) -> bytes:
        return self.exposition.render()


def serve_status(port: int, status: Any, metrics: JoinerMetrics) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                body, kind = b'{"status":"ok"}', "application/json"
            elif self.path == "/status":
                body, kind = json.dumps(status()).encode(), "application/json"
            elif self.path == "/metrics":
                body, kind = metrics.render(), CONTENT_TYPE
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="status", daemon=True).start()
    return server


class Runner:
    def __init__(
        self,
        kafka: Mapping[str, str],
        dataset: Store,
        impressions_topic: str,
        clicks_topic: str,
        *,
        minutes: int,
        window: float,
        topic_partitions: int,
        port: int,
        evaluator: OnlineEvaluator | None = None,
        reporter: OnlineReporter | None = None,
    ) -> None:
        from confluent_kafka import Consumer
        from confluent_kafka.admin import AdminClient

        self.dataset = dataset
        self.topics = (impressions_topic, clicks_topic)
        self.minutes, self.window = minutes, window
        self.kafka: dict[str, Any] = {
            **kafka,
            "group.id": "elasticctr-joiner",  # required by librdkafka; offsets never committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": False,
            "logger": logging.getLogger("elasticctr_joiner.kafka"),
        }
        self.admin = AdminClient({**kafka, "logger": self.kafka["logger"]})
        self.consumer = Consumer(self.kafka)
        self.topic_partitions = topic_partitions
        self.metrics = JoinerMetrics()
        self.evaluator = evaluator or OnlineEvaluator()
        self.online: dict[int, Quality] = {}  # each version's, as of the last close
        self.reporter = reporter  # to MLflow, when the stack runs it
        self.stopping = threading.Event()
        self.marks: tuple[float, Positions] | None = None  # (taken at, high watermarks)
        self.unreachable = False
        self.port = port
        self.joiner: Joiner | None = None
        self.lock = threading.Lock()

    def status(self) -> dict[str, Any]:
        with self.lock:
            if self.joiner is None:
                return {"state": "starting"}
            return {
                "state": "running",
                **self.joiner.status(),
                # Each served version's online quality on its window (online_eval.py).
                "online": {str(v): q.as_json() for v, q in self.online.items()},
                "mlflow": self.reporter.status() if self.reporter is not None else None,
            }

    def start(self) -> Joiner:
        from confluent_kafka import TopicPartition

        counts = self.retry(
            "the topics",
            lambda: ensure_topics(self.admin, {t: self.topic_partitions for t in self.topics}),
        )
        committed: Committed | None = find_committed(self.dataset, self.minutes)
        first: Positions = {}
        for topic, n in counts.items():
            for kp in range(n):
                low, _ = self.retry(f"{topic}/{kp}'s offsets", self._marks(topic, kp))
                first[(topic, kp)] = low
        joiner = Joiner(
            self.dataset, *self.topics, minutes=self.minutes, window=self.window,
            committed=committed, evaluator=self.evaluator,
        )  # fmt: skip
        positions = joiner.start_positions(committed, first)
        self.consumer.assign([TopicPartition(t, kp, o) for (t, kp), o in positions.items()])
        log.info(
            "joining %s and %s into %s: %d-minute partitions, window %gs, after %s, from %s",
            *self.topics, self.dataset.uri(), self.minutes, self.window,
            committed.partition if committed else "(nothing yet)", positions,
        )  # fmt: skip
        with self.lock:
            self.joiner = joiner
        return joiner

    def _marks(self, topic: str, kp: int) -> Callable[[], tuple[int, int]]:
        from confluent_kafka import TopicPartition

        def marks() -> tuple[int, int]:
            low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, kp), timeout=10)
            return int(low), int(high)

        return marks

    def retry(self, what: str, call: Callable[[], T]) -> T:
        """`call` until it works: the broker may be starting, or a new topic's partitions
        have no leader yet. Stops only when asked to."""
        from confluent_kafka import KafkaException

        delay = 0.5
        while True:
            try:
                return call()
            except (KafkaException, NotReady) as err:
                if self.stopping.is_set():
                    raise
                log.info("%s: %s; trying again in %.1fs", what, err, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def high_marks(self, joiner: Joiner) -> Positions | None:
        """Each topic partition's high watermark as the broker reports it now; None when
        the broker does not answer."""
        from confluent_kafka import KafkaException, TopicPartition

        marks: Positions = {}
        try:
            for topic, kp in joiner.positions:
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, kp), timeout=5, cached=False
                )
                marks[(topic, kp)] = high
        except KafkaException as err:
            if not self.unreachable:
                log.warning("the broker does not answer (%s): no partition closes meanwhile", err)
            self.unreachable = True
            return None
        if self.unreachable:
            log.info("the broker answers again")
        self.unreachable = False
        return marks

    def consumer_lag(self, joiner: Joiner) -> dict[tuple[str, int], int]:
        """Records each topic partition is behind its high watermark, as of the consumer's
        last fetch (no request to the broker); partitions not fetched yet are left out."""
        from confluent_kafka import KafkaException, TopicPartition

        lag = {}
        for (topic, kp), position in list(joiner.positions.items()):
            try:
                _, high = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, kp), cached=True
                )
            except KafkaException:
                continue
            if high >= 0:
                lag[(topic, kp)] = max(0, high - position)
        return lag

    def read_up(self, joiner: Joiner, due_at: float) -> bool:
        """Every record the broker held at some moment after `due_at` has been read: the
        high watermarks are taken once after it (records keep arriving, so "at the
        watermark now" may never hold), then the positions must reach them."""
        if self.marks is None or self.marks[0] < due_at:
            taken = time.time()
            marks = self.high_marks(joiner)
            if marks is None:
                return False
            self.marks = (taken, marks)
        _, marks = self.marks
        return all(joiner.positions.get(key, 0) >= high for key, high in marks.items())

    def run(self) -> None:
        server = serve_status(self.port, self.status, self.metrics)
        try:
            joiner = self.start()
            while not self.stopping.is_set():
                messages = self.consumer.consume(1000, 0.5)
                with self.lock:
                    for message in messages:
                        if message.error():
                            log.warning("kafka: %s", message.error())
                            continue
                        joiner.add(message)  # type: ignore[arg-type]  # stub: None offsets
                    joiner.expire_clicks()
                self.close_due(joiner)
                self.metrics.update(joiner, self.consumer_lag(joiner))
        finally:
            self.consumer.close()
            server.shutdown()

    def close_due(self, joiner: Joiner) -> None:
        while (name := joiner.due()) is not None:
            if not self.read_up(joiner, _bounds(name, self.minutes)[1] + self.window):
                return
            with self.lock:
                joiner.close(name)
            _, end = _bounds(name, self.minutes)
            self.metrics.closed(end, time.time() - end)
            with self.lock:
                self.online = self.evaluator.evaluate()
                self.metrics.quality(self.online)
            if self.reporter is not None:
                self.reporter.submit(self.online)

    def stop_on_signal(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stopping.set())


def _bounds(name: str, minutes: int) -> tuple[float, float]:
    from elasticctr_common.feedback import partition_bounds

    return partition_bounds(name, minutes)
