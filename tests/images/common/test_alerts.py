"""The alert rules (elasticctr_common.alerts): PromQL Prometheus parses, reading only
metrics the parts expose, as a rule file and as a PrometheusRule object."""

from __future__ import annotations

import re
from pathlib import Path

import promql_parser
import pytest
import yaml
from elasticctr_common.alerts import (
    RULES,
    is_duration,
    metric_names,
    prometheus_rule,
    rule_file,
    with_durations,
)
from elasticctr_common.metrics import ENDPOINTS, queryable_series

from tests.support.prometheus import run_promtool

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


# -- the rules evaluated by Prometheus's own rule engine (promtool test rules) ---------------
NS = 'namespace="ns"'
# Each rule's fault as input series (one sample a minute), when it must be firing, and the
# labels it fires with; HEALTHY is the same parts running well, where none may fire.
FAULTS: dict[str, tuple[list[tuple[str, str]], str, dict[str, str]]] = {
    "ElasticctrServingErrors": (
        [
            (f'elasticctr_serving_requests_total{{{NS},pod="s",path="/predict",code="200"}}', "0+100x40"),
            (f'elasticctr_serving_failures_total{{{NS},pod="s",cause="cube"}}', "0+5x40"),
        ],
        "20m",
        {},
    ),
    "ElasticctrServingSlow": (
        [
            (f'elasticctr_serving_request_seconds_bucket{{{NS},pod="s",path="/predict",le="0.5"}}', "0+90x40"),
            (f'elasticctr_serving_request_seconds_bucket{{{NS},pod="s",path="/predict",le="1"}}', "0+100x40"),
            (f'elasticctr_serving_request_seconds_bucket{{{NS},pod="s",path="/predict",le="+Inf"}}', "0+100x40"),
        ],
        "25m",
        {},
    ),
    "ElasticctrTargetDown": (
        [(f'up{{{NS},job="elasticctr-joiner",process="joiner",pod="joiner-1"}}', "1x5 0x30")],
        "20m",
        {"process": "joiner", "pod": "joiner-1"},
    ),
    "ElasticctrCubeServerNotReady": (
        [(f'elasticctr_cube_server_ready{{{NS},pod="cube-0-0"}}', "1x5 0x30")],
        "20m",
        {"pod": "cube-0-0"},
    ),
    "ElasticctrCubeShardDown": (
        [
            (f'elasticctr_cube_transfer_shards{{{NS},pod="t"}}', "3x40"),
            (f'elasticctr_cube_transfer_ready_shards{{{NS},pod="t"}}', "3x5 2x35"),
        ],
        "20m",
        {},
    ),
    "ElasticctrRolloutStuck": (
        [(f'elasticctr_cube_transfer_rollout_phase{{{NS},pod="t",phase="preparing"}}', "1x90")],
        "80m",
        {},
    ),
    "ElasticctrRolloutFailures": (
        [(f'elasticctr_cube_transfer_failures_total{{{NS},pod="t",cause="rollout"}}', "0+1x40")],
        "30m",
        {},
    ),
    "ElasticctrCanaryRolledBack": (
        [(f'elasticctr_cube_transfer_rollouts_total{{{NS},pod="t",kind="canary",result="rolled_back"}}', "0x10 1x30")],
        "15m",
        {},
    ),
    "ElasticctrDataLag": (
        [(f'elasticctr_trainer_data_lag_seconds{{{NS},pod="trainer-0"}}', "10000x40")],
        "20m",
        {},
    ),
    "ElasticctrJoinerLag": (
        [(f'elasticctr_joiner_consumer_lag_records{{{NS},pod="j",topic="impressions",partition="0"}}', "200000x40")],
        "20m",
        {},
    ),
    "ElasticctrJoinerDown": (
        [
            (f'elasticctr_serving_impressions_total{{{NS},pod="s",outcome="delivered"}}', "0+60x40"),
            (f'up{{{NS},job="elasticctr-joiner",process="joiner",pod="joiner-1"}}', "1x5"),
        ],
        "25m",
        {},
    ),
    "ElasticctrOnlineAucDrop": (
        [
            (f'elasticctr_joiner_online_auc{{{NS},pod="j",version="5"}}', "0.6x40"),
            (f'elasticctr_joiner_online_window_clicks{{{NS},pod="j",version="5"}}', "200x40"),
            (f'elasticctr_trainer_eval_auc{{{NS},pod="trainer-0"}}', "0.78x40"),
        ],
        "20m",
        {"version": "5"},
    ),
    "ElasticctrOnlineMiscalibrated": (
        [
            (f'elasticctr_joiner_online_calibration{{{NS},pod="j",version="5"}}', "1.5x40"),
            (f'elasticctr_joiner_online_window_clicks{{{NS},pod="j",version="5"}}', "200x40"),
        ],
        "20m",
        {"version": "5"},
    ),
}  # fmt: skip
HEALTHY: list[tuple[str, str]] = [
    (f'elasticctr_serving_requests_total{{{NS},pod="s",path="/predict",code="200"}}', "0+100x100"),
    (f'elasticctr_serving_failures_total{{{NS},pod="s",cause="cube"}}', "0x100"),
    (f'elasticctr_serving_impressions_total{{{NS},pod="s",outcome="delivered"}}', "0+60x100"),
    (f'elasticctr_serving_request_seconds_bucket{{{NS},pod="s",path="/predict",le="0.05"}}', "0+100x100"),
    (f'elasticctr_serving_request_seconds_bucket{{{NS},pod="s",path="/predict",le="+Inf"}}', "0+100x100"),
    *((f'up{{{NS},job="elasticctr-{p}",process="{p}",pod="{p}-0"}}', "1x100") for p in ENDPOINTS),
    (f'elasticctr_cube_server_ready{{{NS},pod="cube-0-0"}}', "1x100"),
    (f'elasticctr_cube_transfer_shards{{{NS},pod="t"}}', "3x100"),
    (f'elasticctr_cube_transfer_ready_shards{{{NS},pod="t"}}', "3x100"),
    (f'elasticctr_cube_transfer_rollout_phase{{{NS},pod="t",phase="idle"}}', "1x100"),
    (f'elasticctr_cube_transfer_rollout_phase{{{NS},pod="t",phase="preparing"}}', "0x100"),
    (f'elasticctr_cube_transfer_failures_total{{{NS},pod="t",cause="rollout"}}', "0x100"),
    # Canaries promoted and rolled back now and then, one on trial for over an hour: the
    # system doing its work, no rollout failing or stuck.
    (f'elasticctr_cube_transfer_failures_total{{{NS},pod="t",cause="canary"}}', "0+1x100"),
    (f'elasticctr_cube_transfer_rollout_phase{{{NS},pod="t",phase="canary"}}', "1x100"),
    (f'elasticctr_cube_transfer_rollouts_total{{{NS},pod="t",kind="canary",result="committed"}}', "0+1x100"),
    (f'elasticctr_trainer_data_lag_seconds{{{NS},pod="trainer-0"}}', "600x100"),
    (f'elasticctr_joiner_consumer_lag_records{{{NS},pod="j",topic="impressions",partition="0"}}', "50x100"),
    (f'elasticctr_joiner_online_auc{{{NS},pod="j",version="5"}}', "0.77x100"),
    (f'elasticctr_joiner_online_calibration{{{NS},pod="j",version="5"}}', "1.05x100"),
    (f'elasticctr_joiner_online_window_clicks{{{NS},pod="j",version="5"}}', "200x100"),
    (f'elasticctr_trainer_eval_auc{{{NS},pod="trainer-0"}}', "0.78x100"),
]  # fmt: skip


def _firing_logic_file(tmp_path: Path) -> Path:
    """The rules without their annotations: promtool compares an alert's annotations too,
    and the templates are checked by `promtool check rules` on the real file."""
    rules = rule_file()
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


def _series(pairs: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"series": series, "values": values} for series, values in pairs]


def test_a_stack_sets_how_long_an_alert_holds_before_it_fires(tmp_path: Path) -> None:
    shorter = with_durations({"ElasticctrCubeShardDown": "20s", "ElasticctrJoinerDown": "1h30m"})
    durations = {rule.alert: rule.duration for rule in shorter}
    assert durations == {
        **{rule.alert: rule.duration for rule in RULES},
        "ElasticctrCubeShardDown": "20s",
        "ElasticctrJoinerDown": "1h30m",
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rule_file(shorter)))
    checked = run_promtool("check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    for bad in ({"ElasticctrShardDown": "1m"}, {"ElasticctrCubeShardDown": "5 minutes"}):
        with pytest.raises(ValueError, match="alert durations"):
            with_durations(bad)
    assert [is_duration(t) for t in ("30s", "1h30m", "250ms", "", "5", "m5", "1.5h")] == [
        True, True, True, False, False, False, False,
    ]  # fmt: skip


def test_every_rule_has_a_fault_scenario() -> None:
    assert set(FAULTS) == {rule.alert for rule in RULES}


def test_prometheus_accepts_the_rule_file_and_its_templates(tmp_path: Path) -> None:
    path = tmp_path / "elasticctr-rules.yml"
    path.write_text(yaml.safe_dump(rule_file(), sort_keys=False))
    result = run_promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in result.stdout


def test_each_rule_fires_on_its_fault_and_none_on_a_healthy_stack(tmp_path: Path) -> None:
    severity = {rule.alert: rule.severity for rule in RULES}
    tests = [
        {
            "interval": "1m",
            "name": alert,
            "input_series": _series(series),
            "alert_rule_test": [
                {
                    "eval_time": at,
                    "alertname": alert,
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "namespace": "ns",
                                "severity": severity[alert],
                                "part_of": "elasticctr",
                                **labels,
                            }
                        }
                    ],
                },
                # Not before its `for` has passed (or at once, for a `for` of 0m).
                {"eval_time": "2m", "alertname": alert, "exp_alerts": []},
            ],
        }
        for alert, (series, at, labels) in FAULTS.items()
    ]
    tests.append(
        {
            "interval": "1m",
            "name": "healthy",
            "input_series": _series(HEALTHY),
            "alert_rule_test": [
                {"eval_time": "95m", "alertname": rule.alert, "exp_alerts": []} for rule in RULES
            ],
        }
    )
    rules = _firing_logic_file(tmp_path)
    spec = tmp_path / "tests.yml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests})
    )
    result = run_promtool("test", "rules", spec)
    assert result.returncode == 0, result.stdout + result.stderr
