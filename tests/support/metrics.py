"""Scrape a live process's /metrics and check it against the metrics contract
(elasticctr_common.metrics), read with prometheus_client's own parsers."""

from __future__ import annotations

import urllib.request
from typing import Any

from elasticctr_common.metrics import Endpoint
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families


def parse(text: str, content_type: str) -> list[Any]:
    """The families of an exposition, by the parser its Content-Type asks for."""
    if content_type.startswith("application/openmetrics-text"):
        return list(openmetrics_families(text))
    assert content_type.startswith("text/plain"), content_type
    return list(text_string_to_metric_families(text))


def check(endpoint: Endpoint, families: list[Any], complete: bool = True) -> dict[str, Any]:
    """Assert `families` keep the contract (and, with `complete`, hold every family of
    it); the families by name."""
    problems = endpoint.problems(families)
    assert problems == [], problems
    missing = endpoint.missing(families) if complete else []
    assert missing == [], f"{endpoint.process} does not expose {missing}"
    return {f.name: f for f in families}


def scrape(url: str, endpoint: Endpoint, complete: bool = True) -> dict[str, Any]:
    """GET `url` (a /metrics), parse and check it; the families by name."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
        content_type = answer.headers["Content-Type"]
    return check(endpoint, parse(text, content_type), complete)


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    """The value of sample `name` with exactly `labels` (AssertionError naming it if none)."""
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"no sample {name}{labels}")
