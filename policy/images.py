"""Images pinned: a tag other than `latest`, or a digest; Helm charts pinned to a version."""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
)

from policy.kube import UNKNOWN, containers, get, object_label, parse_type

HELM_RELEASE_KINDS = {("kubernetes", "Release"), ("kubernetes", "Chart")}


def image_problem(image: str) -> str | None:
    """Why `image` is not pinned, or None when it is."""
    if "@" in image:
        digest = image.split("@", 1)[1]
        return None if digest.startswith("sha256:") and len(digest) > 7 else "has a bad digest"
    last = image.rsplit("/", 1)[-1]  # a registry host may carry a port: host:5000/name
    if ":" not in last:
        return "has no tag (which means latest)"
    if last.split(":", 1)[1].lower() == "latest":
        return "uses the tag latest"
    return None


def validate_image_tag_pinned(args: ResourceValidationArgs, report: ReportViolation) -> None:
    label = object_label(args.resource_type, args.props, args.name)
    for container in containers(args.resource_type, args.props):
        image = get(container.spec, "image")
        if image is UNKNOWN:
            continue
        if isinstance(image, str) and image:
            problem = image_problem(image)
            text = f'image "{image}" {problem}' if problem else None
        else:
            text = "no image is set"
        if text:
            report(
                f"{label}: {container.label}: {text}. Pin a tag (not latest) or a digest, so "
                "that a redeploy runs exactly what was reviewed.",
                None,
            )
    token = parse_type(args.resource_type)
    if token and (token.package, token.kind) in HELM_RELEASE_KINDS and "helm" in token.module:
        version = get(args.props, "version")
        if version is not UNKNOWN and not version:
            report(
                f'Helm {token.kind.lower()} "{args.name}" has no chart version: the newest chart '
                "(and its images) would be installed. Pin `version`.",
                None,
            )


image_tag_pinned = ResourceValidationPolicy(
    name="image-tag-pinned",
    description=(
        "Container images are pinned to a tag other than latest, or to a digest; Helm charts "
        "to a version."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_image_tag_pinned,
)
