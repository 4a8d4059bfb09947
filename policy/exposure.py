"""A public load balancer is guarded: by the address blocks it lets in, or by a credential
its pods check (a stack rule: a Service and the workloads behind it).

A Service of type LoadBalancer gets an address on the internet (unless an annotation makes it
internal). It passes when it has `loadBalancerSourceRanges`, or when every workload its
selector picks reads a token from a Secret (an env var named like a token, through
`valueFrom.secretKeyRef`: serving's `SERVING_AUTH_TOKEN` with `serving.auth token`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy.credentials import words
from policy.kube import UNKNOWN, containers, entries, get, items, pod_specs

SERVICE = "kubernetes:core/v1:Service"


def _internal(annotations: Any) -> bool:
    """An annotation of the clouds' kind that keeps the load balancer inside the network
    (`...-internal: "true"`, `...load-balancer-type: internal`, `...address-type: intranet`)."""
    for key, value in entries(annotations):
        text = str(value).lower() if isinstance(value, str) else ""
        if (key.endswith("-internal") and text == "true") or text in ("internal", "intranet"):
            return True
    return False


def _pod_labels(resource: PolicyResource) -> Any:
    return get(resource.props, "spec", "template", "metadata", "labels")


def _selected(service: PolicyResource, resources: list[PolicyResource]) -> list[PolicyResource]:
    """The workloads of the Service's namespace whose pods its selector picks."""
    selector = get(service.props, "spec", "selector")
    namespace = get(service.props, "metadata", "namespace")
    wanted = entries(selector)
    found = []
    for resource in resources:
        labels = _pod_labels(resource)
        if not pod_specs(resource.resource_type, resource.props) or not isinstance(labels, Mapping):
            continue
        if get(resource.props, "metadata", "namespace") == namespace and all(
            get(labels, key) == value for key, value in wanted
        ):
            found.append(resource)
    return found


def reads_a_token(resource: PolicyResource) -> bool:
    """Some container reads a variable named like a token from a Secret."""
    for container in containers(resource.resource_type, resource.props):
        for var in items(get(container.spec, "env")):
            name = get(var, "name")
            secret = get(var, "valueFrom", "secretKeyRef", "name")
            if isinstance(name, str) and "token" in words(name) and secret is not None:
                return True
    return False


def validate_load_balancer_guarded(args: StackValidationArgs, report: ReportViolation) -> None:
    for service in args.resources:
        props = service.props
        if service.resource_type.removesuffix("Patch") != SERVICE:
            continue
        if get(props, "spec", "type") != "LoadBalancer":
            continue
        ranges = get(props, "spec", "loadBalancerSourceRanges")
        selector = get(props, "spec", "selector")
        unknown = ranges is UNKNOWN or selector is UNKNOWN
        if unknown or items(ranges) or _internal(get(props, "metadata", "annotations")):
            continue
        if any(value is UNKNOWN for _, value in entries(selector)):
            continue
        backing = _selected(service, args.resources) if entries(selector) else []
        if backing and all(reads_a_token(w) for w in backing):
            continue
        name = get(props, "metadata", "name")
        report(
            f'Service "{name if isinstance(name, str) else service.name}" is a LoadBalancer '
            "open to any address, and its pods check no token: set "
            "spec.loadBalancerSourceRanges to the clients' address blocks, or have its pods "
            "require a token they read from a Secret (elasticctr: serving.source_ranges, "
            "serving.auth token).",
            service.urn,
        )


load_balancer_guarded = StackValidationPolicy(
    name="load-balancer-guarded",
    description=(
        "A public LoadBalancer Service has loadBalancerSourceRanges, or its pods require a "
        "token from a Secret."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_load_balancer_guarded,
)
