"""training-budget (advisory): training pods and jobs within a configured CPU/memory budget."""

from __future__ import annotations

from typing import Any

import pytest

from policy import budget
from tests.policy.support import POLICIES, UNKNOWN_NUMBER, graph_inputs, violations
from tests.support.stacks import graph

JOB = "kubernetes:batch.volcano.sh/v1alpha1:Job"
RULE = "training-budget"


@pytest.fixture
def job() -> dict[str, Any]:
    """dev: 1 pserver + 2 trainers of 1 core and 2 GiB each."""
    return graph_inputs(graph("dev"), JOB, "training-job")


def test_the_rule_is_advisory_with_its_defaults_in_the_config_schema() -> None:
    rule = POLICIES[RULE]
    assert rule.enforcement_level is not None and rule.enforcement_level.value == "advisory"
    assert rule.config_schema is not None
    schema = rule.config_schema.properties
    assert {key: schema[key]["default"] for key in schema} == budget.DEFAULTS


def test_a_job_within_the_default_budget_passes(job: dict[str, Any]) -> None:
    assert violations(RULE, JOB, job) == []


def test_pods_above_the_pod_budget_are_reported(job: dict[str, Any]) -> None:
    config = {"maxPodCpu": 0.5, "maxPodMemoryGiB": 1.5}
    messages = violations(RULE, JOB, job, config=config)
    assert messages == [
        'Job "elasticctr-train": task pserver pods ask for 1 CPU cores each, above the budget of '
        "0.5 (policy config maxPodCpu).",
        'Job "elasticctr-train": task pserver pods ask for 2 GiB of memory each, above the budget '
        "of 1.5 GiB (policy config maxPodMemoryGiB).",
        'Job "elasticctr-train": task trainer pods ask for 1 CPU cores each, above the budget of '
        "0.5 (policy config maxPodCpu).",
        'Job "elasticctr-train": task trainer pods ask for 2 GiB of memory each, above the budget '
        "of 1.5 GiB (policy config maxPodMemoryGiB).",
    ]


def test_a_job_above_the_job_budget_is_reported(job: dict[str, Any]) -> None:
    job["spec"]["tasks"][1]["replicas"] = 40
    assert violations(RULE, JOB, job) == []  # 41 cores, 82 GiB: within 64 and 256
    assert violations(RULE, JOB, job, config={"maxJobCpu": 40, "maxJobMemoryGiB": 80}) == [
        'Job "elasticctr-train": its 41 pods ask for 41 CPU cores together, above the budget of '
        "40 (policy config maxJobCpu).",
        'Job "elasticctr-train": its 41 pods ask for 82 GiB of memory together, above the budget '
        "of 80 GiB (policy config maxJobMemoryGiB).",
    ]


def test_requests_count_where_there_is_no_limit(job: dict[str, Any]) -> None:
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            container["resources"] = {"requests": {"cpu": "12", "memory": "8Gi"}}
    [message] = [m for m in violations(RULE, JOB, job) if "pserver" in m]
    assert "task pserver pods ask for 12 CPU cores each" in message


def test_unknown_replicas_still_check_the_pods(job: dict[str, Any]) -> None:
    job["spec"]["tasks"][1]["replicas"] = UNKNOWN_NUMBER
    assert violations(RULE, JOB, job, config={"maxJobCpu": 1}) == []
    assert len(violations(RULE, JOB, job, config={"maxPodCpu": 0.5})) == 2
