"""Cost (advisory): training pods and training jobs above a CPU/memory budget.

The budget is policy config (`--policy-pack-config`, docs/review.md); a training pod is a pod
of a Volcano Job task (pservers and trainers). A pod's size is the sum of its containers'
limits (requests where a container has no limit).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import (
    GIB,
    UNKNOWN,
    VOLCANO_JOB,
    PodSpec,
    get,
    items,
    number,
    object_label,
    pod_specs,
    quantity,
    show,
)

# The defaults of the config schema (the engine fills them in; direct calls use these too).
DEFAULTS: dict[str, float] = {
    "maxPodCpu": 8,
    "maxPodMemoryGiB": 32,
    "maxJobCpu": 64,
    "maxJobMemoryGiB": 256,
}
_DESCRIPTIONS = {
    "maxPodCpu": "CPU cores one training pod may ask for",
    "maxPodMemoryGiB": "memory in GiB one training pod may ask for",
    "maxJobCpu": "CPU cores all pods of one training job may ask for together",
    "maxJobMemoryGiB": "memory in GiB all pods of one training job may ask for together",
}


def _pod_size(pod: PodSpec, resource: str) -> float | None:
    """The sum of a pod's container limits (or requests) of `resource`; None if unknown."""
    total = 0.0
    for container in items(get(pod.spec, "containers")):
        amount = get(container, "resources", "limits", resource)
        if amount is None:
            amount = get(container, "resources", "requests", resource)
        if amount is UNKNOWN or quantity(amount) is None:
            return None
        total += quantity(amount) or 0.0
    return total


def _limits(config: Mapping[str, Any]) -> dict[str, float]:
    limits = dict(DEFAULTS)
    for key, value in config.items():
        if key in limits and number(value) is not None:
            limits[key] = number(value) or 0.0
    return limits


def validate_training_budget(args: ResourceValidationArgs, report: ReportViolation) -> None:
    if args.resource_type.removesuffix("Patch") != VOLCANO_JOB:
        return
    limits = _limits(args.get_config())
    label = object_label(args.resource_type, args.props, args.name)
    job = {"cpu": 0.0, "memory": 0.0}
    pods = 0.0
    totals_known = True
    for pod in pod_specs(args.resource_type, args.props):
        replicas = number(pod.replicas) if pod.replicas is not UNKNOWN else None
        cpu, memory = _pod_size(pod, "cpu"), _pod_size(pod, "memory")
        if cpu is not None and cpu > limits["maxPodCpu"]:
            report(
                f"{label}: task {pod.task} pods ask for {show(cpu)} CPU cores each, above the "
                f"budget of {show(limits['maxPodCpu'])} (policy config maxPodCpu).",
                None,
            )
        if memory is not None and memory / GIB > limits["maxPodMemoryGiB"]:
            report(
                f"{label}: task {pod.task} pods ask for {show(round(memory / GIB, 2))} GiB of "
                f"memory each, above the budget of {show(limits['maxPodMemoryGiB'])} GiB "
                "(policy config maxPodMemoryGiB).",
                None,
            )
        if replicas is None or cpu is None or memory is None:
            totals_known = False  # not known yet (preview), or the resources rule reports it
            continue
        pods += replicas
        job["cpu"] += replicas * cpu
        job["memory"] += replicas * memory
    if not totals_known:
        return
    if job["cpu"] > limits["maxJobCpu"]:
        report(
            f"{label}: its {show(pods)} pods ask for {show(job['cpu'])} CPU cores together, "
            f"above the budget of {show(limits['maxJobCpu'])} (policy config maxJobCpu).",
            None,
        )
    if job["memory"] / GIB > limits["maxJobMemoryGiB"]:
        report(
            f"{label}: its {show(pods)} pods ask for {show(round(job['memory'] / GIB, 2))} GiB "
            f"of memory together, above the budget of {show(limits['maxJobMemoryGiB'])} GiB "
            "(policy config maxJobMemoryGiB).",
            None,
        )


training_budget = ResourceValidationPolicy(
    name="training-budget",
    description="Training pods and jobs stay within the CPU/memory budget (policy config).",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=validate_training_budget,
    config_schema=PolicyConfigSchema(
        properties={
            key: {
                "type": "number",
                "minimum": 0,
                "default": value,
                "description": _DESCRIPTIONS[key],
            }
            for key, value in DEFAULTS.items()
        }
    ),
)
