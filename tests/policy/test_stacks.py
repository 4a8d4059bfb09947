"""All four stacks, as the program declares them, pass every mandatory rule of the pack."""

from __future__ import annotations

import pytest
from pulumi_policy import EnforcementLevel, ResourceValidationPolicy, StackValidationPolicy

from tests.policy.support import PACK, POLICIES, policy_resources, stack_violations, violations
from tests.support.stacks import STACKS, graph

LEVELS = {
    "container-resources": "mandatory",
    "no-privileged-containers": "mandatory",
    "no-host-namespaces": "mandatory",
    "run-as-non-root": "mandatory",
    "image-tag-pinned": "mandatory",
    "no-plaintext-credentials": "mandatory",
    "volcano-min-available": "mandatory",
    "volcano-restart-policy": "mandatory",
    "cube-shards-match": "mandatory",
    "storage-bucket-not-public": "mandatory",
    "s3-public-access-block": "mandatory",
    "load-balancer-guarded": "mandatory",
    "training-budget": "advisory",
}


def test_the_pack_holds_every_rule_at_its_level() -> None:
    assert PACK.NAME == "elasticctr-guardrails"
    assert {
        name: policy.enforcement_level.value if policy.enforcement_level else None
        for name, policy in POLICIES.items()
    } == LEVELS


def _all_violations(stack: str, level: EnforcementLevel) -> list[str]:
    stack_graph = graph(stack)
    found = []
    rules = [p for p in POLICIES.values() if p.enforcement_level == level]
    for resource in stack_graph.resources:
        if not resource.custom:
            continue
        for rule in rules:
            if isinstance(rule, ResourceValidationPolicy):
                found += [
                    f"[{rule.name}] {resource.type} {resource.name}: {message}"
                    for message in violations(
                        rule.name, resource.type, resource.inputs, resource.name
                    )
                ]
    resources = policy_resources(stack_graph.resources)
    for rule in rules:
        if isinstance(rule, StackValidationPolicy):
            found += [
                f"[{rule.name}] {urn}: {message}"
                for message, urn in stack_violations(rule.name, resources)
            ]
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_passes_the_mandatory_rules(stack: str) -> None:
    assert _all_violations(stack, EnforcementLevel.MANDATORY) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_fits_the_default_training_budget(stack: str) -> None:
    assert _all_violations(stack, EnforcementLevel.ADVISORY) == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_rules_see_the_programs_workloads(stack: str) -> None:
    """Guards against passing vacuously: the stack's pods are what the rules read."""
    stack_graph = graph(stack)
    jobs = stack_graph.of_type("kubernetes:batch.volcano.sh/v1alpha1:Job")
    assert len(jobs) == 1
    stripped = {**jobs[0].inputs, "spec": {**jobs[0].inputs["spec"], "minAvailable": 1}}
    assert violations("volcano-min-available", jobs[0].type, stripped)
    for deployment in stack_graph.of_type("kubernetes:apps/v1:Deployment"):
        template = deployment.inputs["spec"]["template"]
        broken = {
            **deployment.inputs,
            "spec": {
                **deployment.inputs["spec"],
                "template": {**template, "spec": {**template["spec"], "hostNetwork": True}},
            },
        }
        assert violations("no-host-namespaces", deployment.type, broken), deployment.name
