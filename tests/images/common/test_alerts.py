"""The alert rules (elasticctr_common.alerts): PromQL Prometheus parses, reading only
metrics the parts expose, as a rule file and as a PrometheusRule object."""

from __future__ import annotations

import re

import promql_parser
from elasticctr_common.alerts import RULES, metric_names, prometheus_rule, rule_file
from elasticctr_common.metrics import queryable_series

DURATION = re.compile(r"^[0-9]+[smhd]$")


def test_every_rule_parses_as_promql_and_reads_only_exposed_metrics() -> None:
    exposed = queryable_series()
    for rule in RULES:
        promql_parser.parse(rule.expr)
    assert metric_names() <= exposed, sorted(metric_names() - exposed)


def test_rules_are_complete_and_distinct() -> None:
    assert len({r.alert for r in RULES}) == len(RULES)
    for rule in RULES:
        assert rule.alert.startswith("Elasticctr") and DURATION.match(rule.duration)
        assert rule.severity in ("critical", "warning")
        assert rule.summary and "{{ $labels.namespace }}" in rule.description
        # Per stack: every rule keeps the namespace label of the series it alerts on.
        assert "by (namespace" in rule.expr or "on (namespace" in rule.expr


def test_the_operator_object_holds_the_same_rules() -> None:
    operator = prometheus_rule("elasticctr-prod")
    assert operator["kind"] == "PrometheusRule"
    assert operator["metadata"]["namespace"] == "elasticctr-prod"
    assert operator["spec"] == rule_file()
