"""Nothing privileged: no privileged containers, no host namespaces, nothing runs as root."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import UNKNOWN, containers, get, items, number, object_label, pod_specs

# The only capability the restricted Pod Security Standard lets a container add.
ALLOWED_CAPABILITIES = {"NET_BIND_SERVICE"}
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")


def validate_no_privileged(args: ResourceValidationArgs, report: ReportViolation) -> None:
    label = object_label(args.resource_type, args.props, args.name)
    for container in containers(args.resource_type, args.props):
        problems = []
        if get(container.spec, "securityContext", "privileged") is True:
            problems.append("securityContext.privileged is true")
        if get(container.spec, "securityContext", "allowPrivilegeEscalation") is True:
            problems.append("securityContext.allowPrivilegeEscalation is true")
        added = [
            c
            for c in items(get(container.spec, "securityContext", "capabilities", "add"))
            if isinstance(c, str) and c.upper().removeprefix("CAP_") not in ALLOWED_CAPABILITIES
        ]
        if added:
            problems.append(f"securityContext.capabilities.add has {', '.join(added)}")
        if problems:
            what = "this setting" if len(problems) == 1 else "these settings"
            report(
                f"{label}: {container.label}: {'; '.join(problems)}. Remove {what}: a "
                "privileged container can take over its node.",
                None,
            )


def validate_no_host_namespaces(args: ResourceValidationArgs, report: ReportViolation) -> None:
    label = object_label(args.resource_type, args.props, args.name)
    for pod in pod_specs(args.resource_type, args.props):
        shared = [f"{pod.where}.{key}" for key in HOST_NAMESPACES if get(pod.spec, key) is True]
        if shared:
            verb = "is" if len(shared) == 1 else "are"
            report(
                f"{label}: {', '.join(shared)} {verb} true. Pods must not share the node's "
                "network, PID or IPC namespace; remove the setting.",
                None,
            )


def validate_run_as_non_root(args: ResourceValidationArgs, report: ReportViolation) -> None:
    label = object_label(args.resource_type, args.props, args.name)
    for container in containers(args.resource_type, args.props):
        pod = container.pod.spec
        # A container's securityContext overrides its pod's.
        non_root = get(container.spec, "securityContext", "runAsNonRoot")
        if non_root is None:
            non_root = get(pod, "securityContext", "runAsNonRoot")
        user = get(container.spec, "securityContext", "runAsUser")
        if user is None:
            user = get(pod, "securityContext", "runAsUser")
        problems = []
        if non_root is not UNKNOWN and non_root is not True:
            problems.append(
                "runAsNonRoot is not true (set it in the pod's or the container's securityContext)"
            )
        if number(user) == 0:
            problems.append("runAsUser is 0 (root)")
        if problems:
            report(f"{label}: {container.label}: {'; '.join(problems)}.", None)


no_privileged_containers = ResourceValidationPolicy(
    name="no-privileged-containers",
    description=(
        "No container is privileged, may escalate privileges, or adds capabilities beyond "
        "NET_BIND_SERVICE."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_no_privileged,
)

no_host_namespaces = ResourceValidationPolicy(
    name="no-host-namespaces",
    description="No pod uses the host's network, PID or IPC namespace.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_no_host_namespaces,
)

run_as_non_root = ResourceValidationPolicy(
    name="run-as-non-root",
    description="Every container runs as a non-root user (runAsNonRoot: true, runAsUser not 0).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_run_as_non_root,
)
