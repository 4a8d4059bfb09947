"""A public load balancer is guarded: by the address blocks it lets in, or by a credential
its pods check (a stack rule: a Service and the workloads behind it).

A Service of type LoadBalancer gets an address on the internet (unless an annotation makes it
internal). It passes when it has `loadBalancerSourceRanges`, or when every workload its
selector picks reads a token from a Secret (a variable named like a token, through
`valueFrom.secretKeyRef` or as a file of a mounted Secret named by `<NAME>_FILE`: serving's
`SERVING_AUTH_TOKEN_FILE` with `serving.auth token`).
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
# The secrets-as-files convention (elasticctr_common.secrets, Docker's): NAME_FILE.
FILE_SUFFIX = "_FILE"


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


def _secret_mount_paths(pod_spec: Any, container: Any) -> list[str]:
    """Where the container mounts Secret volumes (whole, or projected from Secrets)."""
    secret_volumes = set()
    for volume in items(get(pod_spec, "volumes")):
        sources = items(get(volume, "projected", "sources"))
        if get(volume, "secret") is not None or any(get(s, "secret") is not None for s in sources):
            secret_volumes.add(get(volume, "name"))
    return [
        path
        for mount in items(get(container, "volumeMounts"))
        if get(mount, "name") in secret_volumes and isinstance(path := get(mount, "mountPath"), str)
    ]


def reads_a_token(resource: PolicyResource) -> bool:
    """Some container reads a variable named like a token from a Secret: through
    `valueFrom.secretKeyRef`, or as a file (`<NAME>_FILE` naming a file of a Secret volume
    the container mounts)."""
    for container in containers(resource.resource_type, resource.props):
        mounted = _secret_mount_paths(container.pod.spec, container.spec)
        for var in items(get(container.spec, "env")):
            name = get(var, "name")
            if not isinstance(name, str):
                continue
            secret = get(var, "valueFrom", "secretKeyRef", "name")
            if "token" in words(name) and secret is not None:
                return True
            path = get(var, "value")
            if (
                name.endswith(FILE_SUFFIX)
                and "token" in words(name.removesuffix(FILE_SUFFIX))
                and isinstance(path, str)
                and any(path.startswith(directory.rstrip("/") + "/") for directory in mounted)
            ):
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
