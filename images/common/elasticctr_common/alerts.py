"""Prometheus alert rules for a stack, as code, on the metrics contract (metrics.py): the
failures a person must hear about. Each rule is per namespace (one stack), reads only
metric families the parts expose, and says what to look at.

`elasticctr alerts` prints them (YAML) as a Prometheus rule file, or (`--operator`) as a
PrometheusRule object for the Prometheus Operator. Stdlib only: the client and the program
both may use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .metrics import FEEDBACK_OUTCOMES, ROLLOUT_PHASES, series_in
from .scrape import JOB_PREFIX, OPERATOR_API, PART_OF, PART_OF_VALUE

GROUP: Final = "elasticctr"
# The label every rule's alerts carry, telling them from other alerts of a shared Prometheus.
PART_OF_LABEL: Final = "part_of"
# The transfer's phases a rollout rests in; any other for long is a stuck rollout. A canary
# has a deadline of its own (canary.max_minutes), past which it is rolled back.
RESTING_PHASES: Final = ("idle", "committed", "aborted", "canary")
WINDOW: Final = "5m"


@dataclass(frozen=True)
class Rule:
    alert: str
    expr: str
    duration: str  # Prometheus's `for`: how long it must hold
    severity: str  # critical: someone acts now; warning: in working hours
    summary: str
    description: str  # what to look at ({{ $labels.x }} and {{ $value }} are filled in)

    def as_dict(self) -> dict[str, Any]:
        return {
            "alert": self.alert,
            "expr": self.expr,
            "for": self.duration,
            "labels": {"severity": self.severity, PART_OF_LABEL: PART_OF_VALUE},
            "annotations": {"summary": self.summary, "description": self.description},
        }


def _rate(name: str, selector: str = "") -> str:
    return f"sum by (namespace) (rate({name}{selector}[{WINDOW}]))"


_MOVING = "|".join(p for p in ROLLOUT_PHASES if p not in RESTING_PHASES)
# Impressions serving handed to the stream (index(): fails at import if the contract's
# outcomes lose it).
_DELIVERED = FEEDBACK_OUTCOMES[FEEDBACK_OUTCOMES.index("delivered")]

RULES: Final = (
    Rule(
        "ElasticctrServingErrors",
        f"{_rate('elasticctr_serving_failures_total')} / "
        f"{_rate('elasticctr_serving_requests_total')} > 0.01",
        "5m",
        "critical",
        "serving answers more than 1% of requests with an error",
        "{{ $value | humanizePercentage }} of requests in {{ $labels.namespace }} failed; "
        "elasticctr_serving_failures_total says by cause, `elasticctr status` which version "
        "serves",
    ),
    Rule(
        "ElasticctrServingSlow",
        "histogram_quantile(0.99, sum by (namespace, le) "
        f"(rate(elasticctr_serving_request_seconds_bucket[{WINDOW}]))) > 0.5",
        "10m",
        "warning",
        "serving's 99th percentile latency is above 0.5 s",
        "p99 {{ $value | humanizeDuration }} in {{ $labels.namespace }}: look at batch sizes, "
        "cube seeks (elasticctr_cube_server_seek_seconds) and serving's CPU",
    ),
    Rule(
        "ElasticctrTargetDown",
        f'max by (namespace, process, pod) (up{{job=~"{JOB_PREFIX}.+"}}) == 0',
        "5m",
        "critical",
        "a part's running pod does not answer its metrics scrape",
        "{{ $labels.process }} in {{ $labels.pod }} ({{ $labels.namespace }}) has not answered "
        "/metrics for 5 minutes: the process hangs or is overloaded; its log and "
        "`kubectl describe pod` say more",
    ),
    Rule(
        "ElasticctrCubeServerNotReady",
        "max by (namespace, pod) (elasticctr_cube_server_ready) == 0",
        "10m",
        "critical",
        "a cube server holds no version it can serve",
        "{{ $labels.pod }} in {{ $labels.namespace }} has not been ready for 10 minutes: its "
        "shard has one replica less (none, with cube.replicas 1); its agent's log says why",
    ),
    Rule(
        "ElasticctrCubeShardDown",
        "max by (namespace) (elasticctr_cube_transfer_shards - "
        "elasticctr_cube_transfer_ready_shards) > 0",
        "5m",
        "critical",
        "a cube shard has no ready server serving the committed version",
        "{{ $value }} shard(s) in {{ $labels.namespace }} have no server that cube-transfer "
        "finds ready on the committed version: lookups of their keys fail (serving's "
        "errors); `elasticctr status` lists each server, `kubectl get pods` the shard's pods",
    ),
    Rule(
        "ElasticctrRolloutStuck",
        f'max by (namespace) (elasticctr_cube_transfer_rollout_phase{{phase=~"{_MOVING}"}}) == 1',
        "1h",
        "warning",
        "a cube rollout has been under way for an hour",
        "cube-transfer in {{ $labels.namespace }} is in one rollout for an hour: "
        "`elasticctr status` shows its phase, the agents' prepares and failures",
    ),
    Rule(
        "ElasticctrRolloutFailures",
        "sum by (namespace) "
        '(increase(elasticctr_cube_transfer_failures_total{cause!="canary"}[1h])) > 2',
        "0m",
        "warning",
        "cube rollouts keep failing",
        "{{ $value }} rollouts not committed in {{ $labels.namespace }} in an hour; serving "
        "goes on with the committed version (elasticctr_cube_transfer_failures_total: cause)",
    ),
    Rule(
        "ElasticctrCanaryRolledBack",
        "sum by (namespace) (increase(elasticctr_cube_transfer_rollouts_total"
        '{kind="canary",result="rolled_back"}[1h])) > 0',
        "0m",
        "warning",
        "a new model version did worse online than the one serving and was rolled back",
        "{{ $labels.namespace }}: a canary was rolled back in the last hour; the committed "
        "version serves everything. `elasticctr status` and the version's MLflow run have "
        "the online AUCs: look at the data it was trained on",
    ),
    Rule(
        "ElasticctrDataLag",
        "min by (namespace) (elasticctr_trainer_data_lag_seconds) > 7200",
        "15m",
        "warning",
        "online training is more than two hours behind its data",
        "the newest data trained in {{ $labels.namespace }} ended {{ $value | "
        "humanizeDuration }} ago: no new hour or partition is ready (its donefile), or "
        "training is slower than the data comes",
    ),
    Rule(
        "ElasticctrJoinerLag",
        "sum by (namespace) (elasticctr_joiner_consumer_lag_records) > 100000",
        "10m",
        "warning",
        "the feedback joiner is far behind the stream",
        "{{ $value }} records unread in {{ $labels.namespace }}: the joiner is down, slow, or "
        "its storage refuses partitions (its /status says)",
    ),
    Rule(
        "ElasticctrJoinerDown",
        "sum by (namespace) (rate(elasticctr_serving_impressions_total"
        f'{{outcome="{_DELIVERED}"}}[{WINDOW}])) > 0 '
        f'unless on (namespace) max by (namespace) (up{{job="{JOB_PREFIX}joiner"}}) == 1',
        "10m",
        "critical",
        "serving delivers impressions to the stream and no joiner takes them",
        "no joiner in {{ $labels.namespace }} has answered for 10 minutes while serving logs "
        "impressions: no partition closes, online training waits; the joiner Deployment's "
        "pod and its log say why (the stream keeps the records for its retention)",
    ),
    Rule(
        "ElasticctrOnlineAucDrop",
        "min by (namespace, version) (elasticctr_joiner_online_auc) < on (namespace) "
        "group_left max by (namespace) (elasticctr_trainer_eval_auc) - 0.05 "
        "and on (namespace, version) "
        "min by (namespace, version) (elasticctr_joiner_online_window_clicks) >= 100",
        "15m",
        "critical",
        "a served version's online AUC is far below its held-out AUC",
        "version {{ $labels.version }} in {{ $labels.namespace }} scores online AUC "
        "{{ $value }}, 0.05 below the held-out AUC of the newest version: a shifted feature "
        "or a broken upstream hour; roll back with the transfer (docs/cube.md)",
    ),
    Rule(
        "ElasticctrOnlineMiscalibrated",
        "abs(min by (namespace, version) (elasticctr_joiner_online_calibration) - 1) > 0.3 "
        "and on (namespace, version) "
        "min by (namespace, version) (elasticctr_joiner_online_window_clicks) >= 100",
        "15m",
        "warning",
        "a served version's mean score is 30% off the observed click rate",
        "version {{ $labels.version }} in {{ $labels.namespace }}: predicted / observed CTR "
        "is {{ $value }} off 1",
    ),
)


def rule_file(rules: tuple[Rule, ...] = RULES) -> dict[str, Any]:
    """Prometheus's rule file (`rule_files:` in its configuration)."""
    return {"groups": [{"name": GROUP, "rules": [rule.as_dict() for rule in rules]}]}


# A Prometheus duration: units from milliseconds to years, largest first (1h30m).
DURATION: Final = re.compile(
    r"([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?"
)


def is_duration(text: str) -> bool:
    return bool(text) and DURATION.fullmatch(text) is not None


def with_durations(
    durations: Mapping[str, str], rules: tuple[Rule, ...] = RULES
) -> tuple[Rule, ...]:
    """`rules` with the `for` of the alerts named in `durations` replaced (a stack's
    monitoring.alert_for): how long a condition must hold before it fires."""
    names = {rule.alert for rule in rules}
    unknown = sorted(set(durations) - names)
    bad = {k: v for k, v in durations.items() if not is_duration(v)}
    if unknown or bad:
        raise ValueError(
            f"alert durations: unknown alerts {unknown} (known: {', '.join(sorted(names))}); "
            f"not Prometheus durations (such as 30s, 5m, 1h30m): {bad}"
        )
    return tuple(replace(r, duration=durations.get(r.alert, r.duration)) for r in rules)


def prometheus_rule(namespace: str, rules: tuple[Rule, ...] = RULES) -> dict[str, Any]:
    """The same rules as the Prometheus Operator's PrometheusRule object."""
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PrometheusRule",
        "metadata": {
            "name": "elasticctr",
            "namespace": namespace,
            "labels": {PART_OF: PART_OF_VALUE},
        },
        "spec": rule_file(rules),
    }


def metric_names(rules: tuple[Rule, ...] = RULES) -> set[str]:
    return {name for rule in rules for name in series_in(rule.expr)}
