"""Prometheus text-format metrics (exposition format 0.0.4), without a client library.

Counters, gauges and histograms with fixed label names; everything under one lock, since
a few increments per request are cheap next to the rest of a request.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Metric:
    kind = ""

    def __init__(
        self, registry: Registry, name: str, help_text: str, labels: Iterable[str]
    ) -> None:
        self.name, self.help, self.label_names = name, help_text, tuple(labels)
        self._lock = registry.lock
        registry.metrics.append(self)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(
        self, registry: Registry, name: str, help_text: str, labels: Iterable[str]
    ) -> None:
        super().__init__(registry, name, help_text, labels)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        with self._lock:
            self.values[labels] = self.values.get(labels, 0.0) + amount

    def get(self, *labels: str) -> float:
        with self._lock:
            return self.values.get(labels, 0.0)

    def render(self) -> list[str]:
        lines = self.header()
        for labels, value in sorted(self.values.items()):
            lines.append(f"{self.name}{_labels(self.label_names, labels)} {_number(value)}")
        return lines


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, *labels: str) -> None:
        with self._lock:
            self.values[labels] = float(value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        registry: Registry,
        name: str,
        help_text: str,
        labels: Iterable[str] = (),
        buckets: Iterable[float] = LATENCY_BUCKETS,
    ) -> None:
        super().__init__(registry, name, help_text, labels)
        self.buckets = tuple(buckets)
        self.series: dict[tuple[str, ...], list[float]] = {}  # counts per bucket, +Inf, sum

    def observe(self, value: float, *labels: str) -> None:
        with self._lock:
            series = self.series.get(labels)
            if series is None:
                series = self.series[labels] = [0.0] * (len(self.buckets) + 2)
            series[bisect.bisect_left(self.buckets, value)] += 1
            series[-1] += value

    def render(self) -> list[str]:
        lines = self.header()
        for labels, series in sorted(self.series.items()):
            cumulative = 0.0
            for bound, count in zip([*self.buckets, math.inf], series[:-1], strict=True):
                cumulative += count
                le = _labels(self.label_names, labels, f'le="{_number(bound)}"')
                lines.append(f"{self.name}_bucket{le} {_number(cumulative)}")
            plain = _labels(self.label_names, labels)
            lines.append(f"{self.name}_sum{plain} {_number(series[-1])}")
            lines.append(f"{self.name}_count{plain} {_number(cumulative)}")
        return lines


class Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.metrics: list[_Metric] = []

    def render(self) -> str:
        with self.lock:
            lines = [line for metric in self.metrics for line in metric.render()]
        return "\n".join(lines) + "\n"


class ServingMetrics:
    """Every metric serving exports; names start with elasticctr_serving_."""

    def __init__(self) -> None:
        r = self.registry = Registry()
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
        self.isolated = Counter(
            r, p + "isolated_requests_total", "requests rerun alone after their batch failed", ()
        )
        self.rejections = Counter(
            r, p + "model_rejections_total", "model versions that failed to load or validate", ()
        )
        self.model_version.set(-1)
        self.cube_version.set(-1)

    def render(self) -> str:
        return self.registry.render()
