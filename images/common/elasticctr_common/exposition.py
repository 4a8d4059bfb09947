"""A prometheus_client registry holding exactly the families of one endpoint of the metrics
contract (metrics.py), for the Python parts; the images that use it bring prometheus_client.

One registry per `Exposition` (tests run several in one process); no `_created` series.
"""

from __future__ import annotations

from collections.abc import Callable
from http.server import HTTPServer
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from .metrics import COUNTER, GAUGE, Endpoint, Family

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

CONTENT_TYPE = CONTENT_TYPE_LATEST


def _make(family: Family, registry: CollectorRegistry) -> Any:
    if family.type == COUNTER:
        return prometheus_client.Counter(family.name, family.help, family.labels, registry=registry)
    if family.type == GAUGE:
        return prometheus_client.Gauge(family.name, family.help, family.labels, registry=registry)
    return prometheus_client.Histogram(
        family.name, family.help, family.labels, registry=registry, buckets=family.buckets
    )


class Exposition:
    """`self[short]` is the prometheus_client metric of the endpoint's family
    `prefix + short` (KeyError naming it when the contract has no such family)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.registry = CollectorRegistry()
        self._metrics = {short: _make(f, self.registry) for short, f in endpoint.by_name.items()}

    def __getitem__(self, short: str) -> Any:
        if short not in self._metrics:
            self.endpoint[short]  # raises the KeyError that names the family
        return self._metrics[short]

    def gauge_function(self, name: str, function: Callable[[], float]) -> None:
        """Gauge `name` (unlabelled) reads `function()` at each scrape."""
        self[name].set_function(function)

    def set_enum(self, name: str, value: str, values: tuple[str, ...]) -> None:
        """Gauge `name` with one label: 1 for `value`, 0 for the others of `values`."""
        gauge = self[name]
        for v in values:
            gauge.labels(v).set(1.0 if v == value else 0.0)

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = "0.0.0.0") -> HTTPServer:
        """`/metrics` (any path) on `port`, threaded, in a daemon thread (port 0: any free
        one, see `server_address`); OSError if the port is taken."""
        server, _ = prometheus_client.start_http_server(port, addr=host, registry=self.registry)
        assert isinstance(server, HTTPServer)
        return server
