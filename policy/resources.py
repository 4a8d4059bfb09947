"""Resources bounded: every container states CPU and memory requests and limits."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import UNKNOWN, containers, get, object_label

# Ephemeral (debug) containers cannot have resources.
FIELDS = ("containers", "initContainers")
REQUIRED = [(section, name) for section in ("requests", "limits") for name in ("cpu", "memory")]


def validate_container_resources(args: ResourceValidationArgs, report: ReportViolation) -> None:
    for container in containers(args.resource_type, args.props, FIELDS):
        missing = []
        for section, name in REQUIRED:
            value = get(container.spec, "resources", section, name)
            if value is not UNKNOWN and value in (None, ""):
                missing.append(f"resources.{section}.{name}")
        if missing:
            report(
                f"{object_label(args.resource_type, args.props, args.name)}: {container.label} "
                f"has no {', '.join(missing)}. Set CPU and memory requests and limits on "
                "every container (components/kube.py container() does).",
                None,
            )


container_resources = ResourceValidationPolicy(
    name="container-resources",
    description="Every container has CPU and memory requests and limits.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_container_resources,
)
