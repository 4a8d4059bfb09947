"""Volcano Jobs (a CustomResource, spec in camelCase) are gang-scheduled and restart whole.

A parameter-server job is useless unless every pserver and every trainer runs: `minAvailable`
must be the sum of the task replicas, or Volcano starts a partial job that waits forever for
the missing pods. A failed pod must restart the job (a lone restarted pserver has lost its
part of the model), so the job reacts to pod failures with a restart action and its pods do
not restart in place forever (`restartPolicy: Always`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import UNKNOWN, VOLCANO_JOB, get, items, number, object_label, pod_specs, show

FAILURE_EVENTS = {"PodFailed", "PodEvicted", "TaskFailed", "*"}
RESTART_ACTIONS = {"RestartJob", "RestartTask", "RestartPod", "RestartPartition"}
BATCH_RESTART_POLICIES = {"Never", "OnFailure"}


def _is_volcano_job(resource_type: str) -> bool:
    return resource_type.removesuffix("Patch") == VOLCANO_JOB


def validate_min_available(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_volcano_job(args.resource_type):
        return
    label = object_label(args.resource_type, args.props, args.name)
    tasks = items(get(args.props, "spec", "tasks"))
    replicas = [get(task, "replicas") for task in tasks]
    min_available = get(args.props, "spec", "minAvailable")
    if UNKNOWN in (min_available, *replicas) or get(args.props, "spec", "tasks") is UNKNOWN:
        return
    if not tasks:
        report(f"{label}: spec.tasks is empty.", None)
        return
    missing = [
        f"spec.tasks[{i}]" for i, r in enumerate(replicas) if (n := number(r)) is None or n < 0
    ]
    if missing:
        report(f"{label}: {', '.join(missing)} has no replicas; state every task's replicas.", None)
        return
    total = sum(number(r) or 0 for r in replicas)
    counts = " + ".join(
        f"{show(number(r) or 0)} {get(t, 'name') or f'task {i}'}"
        for i, (t, r) in enumerate(zip(tasks, replicas, strict=True))
    )
    if number(min_available) is None:
        report(f"{label}: spec.minAvailable is not set; set it to {show(total)} ({counts}).", None)
    elif number(min_available) != total:
        report(
            f"{label}: spec.minAvailable is {show(number(min_available) or 0)}, but the tasks "
            f"have {show(total)} replicas ({counts}). Set minAvailable to {show(total)}: the job "
            "needs every pserver and trainer at once.",
            None,
        )


def _restarts_on_failure(policies: Any) -> bool | None:
    """Whether one of the lifecycle policies restarts on a failure; None if not known."""
    if policies is UNKNOWN:
        return None
    for policy in items(policies):
        if policy is UNKNOWN:
            return None
        action = get(policy, "action")
        events = {get(policy, "event"), *items(get(policy, "events"))}
        on_failure = bool(events & FAILURE_EVENTS) or get(policy, "exitCode") is not None
        if action in RESTART_ACTIONS and on_failure:
            return True
    return False


def _restart_problems(props: Any, resource_type: str) -> Iterator[str]:
    job_level = _restarts_on_failure(get(props, "spec", "policies"))
    tasks = items(get(props, "spec", "tasks"))
    if job_level is False:
        uncovered = [
            get(task, "name") or f"#{i}"
            for i, task in enumerate(tasks)
            if _restarts_on_failure(get(task, "policies")) is False
        ]
        if uncovered:
            yield (
                "no lifecycle policy restarts it when a pod fails (spec.policies, or the "
                f"policies of task {', '.join(map(str, uncovered))}); add "
                "{event: PodFailed, action: RestartJob} (and PodEvicted)"
            )
    for pod in pod_specs(resource_type, props):
        policy = get(pod.spec, "restartPolicy")
        if policy is not UNKNOWN and policy not in BATCH_RESTART_POLICIES:
            shown = "is not set (Always)" if policy is None else f"is {policy}"
            yield f"{pod.where}.restartPolicy {shown}; set Never (or OnFailure)"


def validate_restart_policy(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if not _is_volcano_job(args.resource_type):
        return
    problems = list(_restart_problems(args.props, args.resource_type))
    if problems:
        label = object_label(args.resource_type, args.props, args.name)
        report(f"{label}: {'; '.join(problems)}.", None)


volcano_min_available = ResourceValidationPolicy(
    name="volcano-min-available",
    description="A Volcano Job's minAvailable equals the sum of its task replicas.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_min_available,
)

volcano_restart_policy = ResourceValidationPolicy(
    name="volcano-restart-policy",
    description=(
        "A Volcano Job restarts when a pod fails (a lifecycle policy with a restart action) and "
        "its pods set restartPolicy Never or OnFailure."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_restart_policy,
)
