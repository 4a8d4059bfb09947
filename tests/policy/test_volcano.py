"""volcano-min-available and volcano-restart-policy, on the program's own training Job."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy.support import UNKNOWN_NUMBER, UNKNOWN_STRING, graph_inputs, violations
from tests.support.stacks import graph

JOB = "kubernetes:batch.volcano.sh/v1alpha1:Job"


@pytest.fixture
def job() -> dict[str, Any]:
    """The dev stack's training Job (1 pserver, 2 trainers), as the program declares it."""
    return graph_inputs(graph("dev"), JOB, "training-job")


def test_the_programs_job_passes(job: dict[str, Any]) -> None:
    assert job["spec"]["minAvailable"] == 3
    assert violations("volcano-min-available", JOB, job) == []
    assert violations("volcano-restart-policy", JOB, job) == []


def test_min_available_below_the_replicas_fails(job: dict[str, Any]) -> None:
    job["spec"]["minAvailable"] = 2
    assert violations("volcano-min-available", JOB, job, name="training-job") == [
        'Job "elasticctr-train": spec.minAvailable is 2, but the tasks have 3 replicas '
        "(1 pserver + 2 trainer). Set minAvailable to 3: the job needs every pserver and "
        "trainer at once."
    ]


def test_a_new_trainer_count_without_min_available_fails(job: dict[str, Any]) -> None:
    job["spec"]["tasks"][1]["replicas"] = 4
    [message] = violations("volcano-min-available", JOB, job)
    assert (
        "spec.minAvailable is 3, but the tasks have 5 replicas (1 pserver + 4 trainer)" in message
    )


def test_missing_min_available_fails(job: dict[str, Any]) -> None:
    del job["spec"]["minAvailable"]
    [message] = violations("volcano-min-available", JOB, job)
    assert message.endswith("spec.minAvailable is not set; set it to 3 (1 pserver + 2 trainer).")


def test_a_task_without_replicas_fails(job: dict[str, Any]) -> None:
    del job["spec"]["tasks"][0]["replicas"]
    [message] = violations("volcano-min-available", JOB, job)
    assert "spec.tasks[0] has no replicas" in message


def test_unknown_replicas_are_not_judged(job: dict[str, Any]) -> None:
    job["spec"]["tasks"][1]["replicas"] = UNKNOWN_NUMBER
    assert violations("volcano-min-available", JOB, job) == []


def test_a_job_without_failure_policies_fails(job: dict[str, Any]) -> None:
    job["spec"]["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert violations("volcano-restart-policy", JOB, job) == [
        'Job "elasticctr-train": no lifecycle policy restarts it when a pod fails (spec.policies, '
        "or the policies of task pserver, trainer); add {event: PodFailed, action: RestartJob} "
        "(and PodEvicted)."
    ]


def test_task_level_restart_policies_count(job: dict[str, Any]) -> None:
    del job["spec"]["policies"]
    for task in job["spec"]["tasks"]:
        task["policies"] = [{"events": ["PodEvicted", "PodFailed"], "action": "RestartTask"}]
    assert violations("volcano-restart-policy", JOB, job) == []


def test_an_exit_code_policy_counts(job: dict[str, Any]) -> None:
    job["spec"]["policies"] = [{"exitCode": 137, "action": "RestartJob"}]
    assert violations("volcano-restart-policy", JOB, job) == []


@pytest.mark.parametrize(
    ("policy", "shown"), [("Always", "is Always"), (None, "is not set (Always)")]
)
def test_pods_restarting_in_place_fail(job: dict[str, Any], policy: str | None, shown: str) -> None:
    spec = job["spec"]["tasks"][0]["template"]["spec"]
    if policy is None:
        del spec["restartPolicy"]
    else:
        spec["restartPolicy"] = policy
    assert violations("volcano-restart-policy", JOB, job) == [
        f'Job "elasticctr-train": spec.tasks[0] (pserver).template.spec.restartPolicy {shown}; '
        "set Never (or OnFailure)."
    ]


def test_other_resources_are_ignored() -> None:
    batch_job = {"spec": {"template": {"spec": {"restartPolicy": "Always", "containers": []}}}}
    for rule in ("volcano-min-available", "volcano-restart-policy"):
        assert violations(rule, "kubernetes:batch/v1:Job", batch_job) == []


def test_unknown_policies_are_not_judged(job: dict[str, Any]) -> None:
    job["spec"]["policies"] = UNKNOWN_STRING
    assert violations("volcano-restart-policy", JOB, job) == []
