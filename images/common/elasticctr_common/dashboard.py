"""A Grafana dashboard of every metric family of the metrics contract (metrics.py),
generated from it, so that it never names a metric no part exposes: one row per kind of
process, one panel per family. Counters are shown as per-second rates, gauges as they are,
histograms as their median and 99th percentile; each by the family's labels. Prometheus is
the data source (a dashboard variable), and `namespace` picks one stack's pods where the
scrape adds that label (kube-prometheus and the usual pod-annotation jobs do).

`elasticctr dashboard` prints it for Grafana's dashboard import (docs/architecture.md,
"The contract in code"). Stdlib only: the client and the program both may use it.
"""

from __future__ import annotations

from typing import Any, Final

from .metrics import COUNTER, ENDPOINTS, GAUGE, HISTOGRAM, Endpoint, Family, series_in

UID: Final = "elasticctr"
SCHEMA_VERSION: Final = 39  # Grafana 11's dashboard JSON
DATASOURCE: Final = {"type": "prometheus", "uid": "${datasource}"}
SELECTOR: Final = '{namespace=~"$namespace"}'
RATE: Final = "$__rate_interval"
QUANTILES: Final = (0.5, 0.99)
WIDTH: Final = 8  # of Grafana's 24 columns: three panels a row
HEIGHT: Final = 8
# Grafana's units by the name's unit suffix.
UNITS: Final = (("_seconds", "s"), ("_bytes", "bytes"))
ROW_TITLES: Final = {
    "serving": "Serving",
    "cube-server": "Cube servers",
    "cube-agent": "Cube agents",
    "cube-transfer": "Cube transfer",
    "trainer": "Training",
    "joiner": "Feedback joiner",
}


def _unit(family: Family, rate: bool) -> str:
    base = family.name.removesuffix("_total")
    for suffix, unit in UNITS:
        if base.endswith(suffix):
            return unit  # seconds a second: a share of one core's time for a _seconds_total
    return "ops" if rate else "short"


def _legend(labels: tuple[str, ...], extra: str = "") -> str:
    parts = [f"{{{{{label}}}}}" for label in labels]
    return " ".join([*parts, extra]).strip() or "{{pod}}"


def _by(labels: tuple[str, ...]) -> str:
    return f" by ({', '.join(labels)})" if labels else ""


def targets(family: Family) -> list[dict[str, Any]]:
    """The panel's queries (PromQL) of one family."""
    name, labels = family.name, family.labels
    if family.type == COUNTER:
        expr = f"sum{_by(labels)} (rate({name}{SELECTOR}[{RATE}]))"
        return [{"expr": expr, "legendFormat": _legend(labels, "" if labels else "all")}]
    if family.type == GAUGE:
        # One series a pod: a gauge (a version, a lag) is each process's own.
        by = ("pod", *labels)
        return [{"expr": f"max{_by(by)} ({name}{SELECTOR})", "legendFormat": _legend(by)}]
    buckets = f"sum{_by(('le', *labels))} (rate({name}_bucket{SELECTOR}[{RATE}]))"
    return [
        {
            "expr": f"histogram_quantile({q}, {buckets})",
            "legendFormat": _legend(labels, f"p{round(q * 100)}"),
        }
        for q in QUANTILES
    ]


def panel(family: Family, panel_id: int, x: int, y: int) -> dict[str, Any]:
    rate = family.type == COUNTER
    title = family.name.removeprefix("elasticctr_")
    suffix = {COUNTER: " /s", GAUGE: "", HISTOGRAM: " p50, p99"}[family.type]
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title + suffix,
        "description": family.help,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": WIDTH, "h": HEIGHT},
        "fieldConfig": {"defaults": {"unit": _unit(family, rate)}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {**target, "refId": chr(ord("A") + i), "datasource": DATASOURCE}
            for i, target in enumerate(targets(family))
        ],
    }


def dashboard(
    endpoints: dict[str, Endpoint] = ENDPOINTS, title: str = "elasticctr"
) -> dict[str, Any]:
    """The dashboard JSON (Grafana's model, for import)."""
    panels: list[dict[str, Any]] = []
    y = 0
    for process, endpoint in endpoints.items():
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": ROW_TITLES.get(process, process),
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        y += 1
        per_row = 24 // WIDTH
        for i, family in enumerate(endpoint.families):
            x, row = (i % per_row) * WIDTH, i // per_row
            panels.append(panel(family, len(panels) + 1, x, y + row * HEIGHT))
        y += -(-len(endpoint.families) // per_row) * HEIGHT
    return {
        "uid": UID,
        "title": title,
        "tags": ["elasticctr"],
        "timezone": "browser",
        "schemaVersion": SCHEMA_VERSION,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                },
                {
                    "name": "namespace",
                    "label": "namespace (stack)",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": "label_values(elasticctr_serving_requests_total, namespace)",
                    "includeAll": True,
                    "allValue": ".*",
                    "multi": False,
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def metric_names(board: dict[str, Any]) -> set[str]:
    """Every metric name the dashboard's queries and variables read."""
    queries = [t["expr"] for item in board["panels"] for t in item.get("targets", [])]
    queries += [str(v.get("query", "")) for v in board["templating"]["list"]]
    return {name for query in queries for name in series_in(query)}
