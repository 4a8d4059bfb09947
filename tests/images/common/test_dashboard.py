"""The Grafana dashboard generated from the metrics contract: it shows every family, reads
no metric the parts do not expose, and is a dashboard Grafana can import."""

from __future__ import annotations

import json

import promql_parser
import pytest
from elasticctr_common.dashboard import dashboard, metric_names, targets
from elasticctr_common.metrics import (
    COUNTER,
    ENDPOINTS,
    GAUGE,
    HISTOGRAM,
    Family,
    queryable_series,
)


def test_every_family_has_its_panel_under_its_process() -> None:
    board = dashboard()
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert len(rows) == len(ENDPOINTS)
    described = [p["description"] for p in board["panels"] if p["type"] != "row"]
    families = [f for e in ENDPOINTS.values() for f in e.families]
    assert len(described) == len(families)
    assert described == [f.help for f in families]


def test_it_reads_only_metrics_the_parts_expose() -> None:
    names = metric_names(dashboard())
    assert names <= queryable_series(), sorted(names - queryable_series())
    # ... and every one of them
    assert {n.removesuffix("_bucket") for n in names} >= {
        f.name for e in ENDPOINTS.values() for f in e.families
    }


def test_each_type_is_shown_as_its_kind_of_series() -> None:
    counter = Family("elasticctr_x_failures_total", COUNTER, "failures", ("cause",))
    assert [t["expr"] for t in targets(counter)] == [
        'sum by (cause) (rate(elasticctr_x_failures_total{namespace=~"$namespace"}'
        "[$__rate_interval]))"
    ]
    gauge = Family("elasticctr_x_model_version", GAUGE, "version")
    assert [t["expr"] for t in targets(gauge)] == [
        'max by (pod) (elasticctr_x_model_version{namespace=~"$namespace"})'
    ]
    histogram = Family("elasticctr_x_request_seconds", HISTOGRAM, "latency", ("path",), (0.1, 1))
    assert [t["expr"] for t in targets(histogram)] == [
        f"histogram_quantile({q}, sum by (le, path) (rate(elasticctr_x_request_seconds_bucket"
        '{namespace=~"$namespace"}[$__rate_interval])))'
        for q in (0.5, 0.99)
    ]
    assert [t["legendFormat"] for t in targets(histogram)] == ["{{path}} p50", "{{path}} p99"]


def test_it_is_importable_json_with_a_consistent_layout() -> None:
    board = json.loads(json.dumps(dashboard(title="prod")))
    assert board["title"] == "prod" and board["uid"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in board["panels"]:
        grid = p["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24
        for dx in range(grid["w"]):
            for dy in range(grid["h"]):
                cell = (grid["x"] + dx, grid["y"] + dy)
                assert cell not in cells, f"panel {p['id']} overlaps another at {cell}"
                cells.add(cell)
        for target in p.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}" and target["refId"]
    variables = {v["name"] for v in board["templating"]["list"]}
    assert variables == {"datasource", "namespace"}


def test_every_query_is_promql_prometheus_parses() -> None:
    """Each query, with Grafana's variables as Grafana fills them in, parses as PromQL (a
    port of Prometheus's own parser); a broken one is refused, so the check can fail."""
    filled = {"$__rate_interval": "1m", "$namespace": ".*"}
    queries = [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]
    assert queries
    for query in queries:
        for variable, value in filled.items():
            query = query.replace(variable, value)
        promql_parser.parse(query)
    with pytest.raises(ValueError):
        promql_parser.parse("sum by (path (rate(elasticctr_serving_requests_total[1m]))")
