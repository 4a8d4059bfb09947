"""Feed the policy pack's validators what the engine would, without the Pulumi CLI.

The engine sends a resource's properties as a protobuf Struct; pulumi_policy turns them back
into Python (every number a float, secrets unwrapped) and wraps them in proxies that raise on
values unknown during a preview. `resource_args` does the same, so a validator here sees
exactly the shape it gets from `pulumi preview --policy-pack policy`. Stack rules get the
program's resource graph captured under mocks (tests/support/stacks.py).
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from google.protobuf import json_format, struct_pb2
from pulumi_policy import (
    Policy,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.deserialize import deserialize_properties
from pulumi_policy.proxy import UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE, unknown_checking_proxy

from tests.support import pulumi_harness as harness

PACK = importlib.import_module("policy.__main__")
POLICIES: dict[str, Policy] = {p.name: p for p in PACK.POLICIES}
UNKNOWN_STRING = UNKNOWN_STRING_VALUE  # what the engine sends for a string not known yet
UNKNOWN_NUMBER = UNKNOWN_NUMBER_VALUE


def engine_props(props: Mapping[str, Any]) -> Any:
    """Properties after the engine -> Struct -> pulumi_policy round trip."""
    struct = struct_pb2.Struct()
    struct.update(copy.deepcopy(dict(props)))
    return unknown_checking_proxy(deserialize_properties(json_format.MessageToDict(struct)))


def _options(parent: str | None = None) -> PolicyResourceOptions:
    return PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], parent)


def urn(resource_type: str, name: str) -> str:
    return f"urn:pulumi:test::elasticctr::{resource_type}::{name}"


def resource_args(
    resource_type: str,
    props: Mapping[str, Any],
    name: str = "test",
    config: Mapping[str, Any] | None = None,
) -> ResourceValidationArgs:
    return ResourceValidationArgs(
        resource_type,
        engine_props(props),
        urn(resource_type, name),
        name,
        _options(),
        None,
        dict(config) if config is not None else None,
    )


def violations(
    policy: str,
    resource_type: str,
    props: Mapping[str, Any],
    name: str = "test",
    config: Mapping[str, Any] | None = None,
) -> list[str]:
    """The messages one resource policy of the pack reports for one resource."""
    rule = POLICIES[policy]
    assert isinstance(rule, ResourceValidationPolicy)
    messages: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        messages.append(message)

    rule.validate(resource_args(resource_type, props, name, config), report)
    return messages


def policy_resources(resources: Iterable[harness.Registered]) -> list[PolicyResource]:
    """Registered custom resources as the PolicyResources of a StackValidationArgs."""
    custom = [r for r in resources if r.custom]
    result = {
        r.urn: PolicyResource(
            r.type, engine_props(r.inputs), r.urn, r.name, _options(r.parent), None, None, [], {}
        )
        for r in custom
    }
    for r in custom:
        resource = result[r.urn]
        resource.parent = result.get(r.parent)
        resource.dependencies = [result[d] for d in r.dependencies if d in result]
    return list(result.values())


def stack_violations(
    policy: str,
    resources: list[PolicyResource],
    config: Mapping[str, Any] | None = None,
) -> list[tuple[str, str | None]]:
    """(message, urn) of what one stack policy of the pack reports."""
    rule = POLICIES[policy]
    assert isinstance(rule, StackValidationPolicy)
    found: list[tuple[str, str | None]] = []

    def report(message: str, urn: str | None = None) -> None:
        found.append((message, urn))

    rule.validate(
        StackValidationArgs(resources, dict(config) if config is not None else None), report
    )
    return found


def synthetic(resource_type: str, name: str, props: Mapping[str, Any]) -> PolicyResource:
    return PolicyResource(
        resource_type, engine_props(props), urn(resource_type, name), name, _options(), None, None,
        [], {},
    )  # fmt: skip


def graph_inputs(graph: harness.Graph, resource_type: str, name: str) -> dict[str, Any]:
    """A deep copy of one registered resource's inputs (to mutate in a failing case)."""
    return copy.deepcopy(graph.one(resource_type, name).inputs)


def replace_inputs(
    graph: harness.Graph, changes: Mapping[tuple[str, str], Callable[[dict[str, Any]], None]]
) -> list[harness.Registered]:
    """The graph's resources with some inputs changed by `changes[(type, name)](inputs)`."""
    result = []
    for r in graph.resources:
        change = changes.get((r.type, r.name))
        if change is not None:
            inputs = copy.deepcopy(r.inputs)
            change(inputs)
            r = copy.copy(r)
            r.inputs = inputs
        result.append(r)
    return result


def pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A Deployment's props around a pod spec."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {"replicas": 1, "template": {"spec": {**spec, "containers": containers}}},
    }


GOOD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
GOOD_RESOURCES = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}


def container(name: str = "app", **fields: Any) -> dict[str, Any]:
    """A container that passes every rule, with `fields` replaced."""
    return {
        "name": name,
        "image": "registry.example/app:1.2.3",
        "resources": copy.deepcopy(GOOD_RESOURCES),
        "securityContext": copy.deepcopy(GOOD_SECURITY),
        **fields,
    }
