"""Serving's Prometheus metrics, on prometheus_client (text exposition format 0.0.4).

Each ServingMetrics has its own registry (tests run several in one process). The call
sites pass label values positionally (`requests.inc(1, path, code)`): the thin wrappers
below keep that form and cache each label set's child, which saves prometheus_client's
`labels()` lookup and validation on every increment. No `_created` series: nothing reads
them, and they would double the text.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# Why an instance has no prediction (the other instances of its request have theirs).
NONFINITE_EMBEDDING = "nonfinite_embedding"  # a vector cube returned holds NaN or inf
NONFINITE_POOLED = "nonfinite_pooled"  # finite vectors whose sum in a slot overflows float32
NONFINITE_SCORE = "nonfinite_score"  # finite inputs, but the model's output is not finite
FAILURE_CAUSES = (NONFINITE_EMBEDDING, NONFINITE_POOLED, NONFINITE_SCORE)

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class _Metric:
    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._labelled = bool(metric._labelnames)
        self._children: dict[tuple[str, ...], Any] = {}

    def _child(self, labels: tuple[str, ...]) -> Any:
        child = self._children.get(labels)
        if child is None:
            child = self._metric.labels(*labels) if self._labelled else self._metric
            self._children[labels] = child
        return child


class Counter(_Metric):
    def __init__(
        self, registry: CollectorRegistry, name: str, help_text: str, labels: Iterable[str]
    ) -> None:
        metric = prometheus_client.Counter(name, help_text, tuple(labels), registry=registry)
        super().__init__(metric)

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        self._child(labels).inc(amount)

    def get(self, *labels: str) -> float:
        return float(self._child(labels)._value.get())


class Gauge(_Metric):
    def __init__(
        self, registry: CollectorRegistry, name: str, help_text: str, labels: Iterable[str]
    ) -> None:
        metric = prometheus_client.Gauge(name, help_text, tuple(labels), registry=registry)
        super().__init__(metric)

    def set(self, value: float, *labels: str) -> None:
        self._child(labels).set(value)


class Histogram(_Metric):
    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        help_text: str,
        labels: Iterable[str] = (),
        buckets: Iterable[float] = LATENCY_BUCKETS,
    ) -> None:
        metric = prometheus_client.Histogram(
            name, help_text, tuple(labels), registry=registry, buckets=tuple(buckets)
        )
        super().__init__(metric)

    def observe(self, value: float, *labels: str) -> None:
        self._child(labels).observe(value)


class ServingMetrics:
    """Every metric serving exports; names start with elasticctr_serving_."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "elasticctr_serving_"
        self.requests = Counter(
            r, p + "requests_total", "HTTP requests by path and status code", ("path", "code")
        )
        self.latency = Histogram(r, p + "request_seconds", "request latency by path", ("path",))
        self.examples = Counter(r, p + "examples_total", "instances predicted", ())
        self.batches = Counter(r, p + "batches_total", "predictor batches run", ())
        self.batch_size = Histogram(
            r, p + "batch_examples", "instances per predictor batch", (), BATCH_BUCKETS
        )
        self.cube_keys = Counter(r, p + "cube_keys_total", "distinct sparse keys looked up", ())
        self.missing_keys = Counter(
            r, p + "cube_missing_keys_total", "looked-up keys cube does not hold (zero vectors)", ()
        )
        self.stage_seconds = Counter(
            r,
            p + "stage_seconds_total",
            "time spent per stage: parse (on the event loop), queue "
            "(waiting for a worker), cube, pool, predict",
            ("stage",),
        )
        self.model_version = Gauge(r, p + "model_version", "version being served (-1: none)", ())
        self.cube_version = Gauge(
            r, p + "cube_committed_version", "cube's committed version as last seen (-1: none)", ()
        )
        self.switches = Counter(r, p + "model_switches_total", "model versions switched to", ())
        self.canary_version = Gauge(
            r, p + "canary_version", "version on trial scoring the canary's share (-1: none)", ()
        )
        self.canary_examples = Counter(
            r, p + "canary_examples_total", "instances the canary version predicted", ()
        )
        self.failures = Counter(
            r,
            p + "failures_total",
            "prediction requests answered 5xx, by cause (no_model, cube_version, "
            "cube_unavailable, cube_width, internal)",
            ("cause",),
        )
        self.isolated = Counter(
            r, p + "isolated_requests_total", "requests rerun alone after their batch failed", ()
        )
        self.rejections = Counter(
            r, p + "model_rejections_total", "model versions that failed to load or validate", ()
        )
        self.failed_instances = Counter(
            r,
            p + "failed_instances_total",
            "instances answered with an error instead of a prediction, by cause",
            ("cause",),
        )
        self.impressions = Counter(
            r,
            p + "impressions_total",
            "impressions by outcome (feedback.py): queued, sampled_out, dropped_buffer_full, "
            "delivered, failed",
            ("outcome",),
        )
        self.clicks = Counter(
            r,
            p + "clicks_total",
            "clicks received by outcome (as impressions, and rejected)",
            ("outcome",),
        )
        for cause in FAILURE_CAUSES:  # every series exists from the start, at 0
            self.failed_instances.inc(0, cause)
        self.model_version.set(-1)
        self.cube_version.set(-1)
        self.canary_version.set(-1)

    def render(self) -> str:
        return generate_latest(self.registry).decode()
