"""buildah, the builder (no Docker daemon here): build, inspect, archive, restore."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

from .run import CommandFailed, run

# pip, cargo and apt inside builds go through an intercepting proxy: its CA must be trusted.
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def image_id(reference: str) -> str | None:
    """The id of the local image `reference` names, or None when there is none."""
    try:
        out = run(
            ["buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", reference],
            capture=True,
        )
    except CommandFailed:
        return None
    return out.strip() or None


def config(reference: str) -> dict[str, object]:
    """The OCI image config (User, Entrypoint, Cmd, Env, WorkingDir)."""
    out = run(["buildah", "inspect", "--type", "image", reference], capture=True)
    raw = json.loads(out)
    oci = raw.get("OCIv1", {})
    return dict(oci.get("config", {}))


def bud(
    *,
    containerfile: Path,
    context: Path,
    reference: str,
    build_args: Mapping[str, str],
    ignorefile: Path | None,
    no_cache: bool = False,
) -> None:
    """`buildah bud` that never pulls, with the host's network and CA bundle, caching
    layers so that a change near the end of a Dockerfile reuses the pip layers
    (`no_cache`: none reused, for measuring cold builds)."""
    command: list[str | Path] = [
        "buildah", "bud", "--pull=never", "--network=host", "--layers",
        "-v", f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
        "-f", containerfile, "-t", reference,
    ]  # fmt: skip
    if no_cache:
        command.append("--no-cache")
    if ignorefile is not None:
        # What BuildKit reads for <Dockerfile>.dockerignore, said explicitly to buildah.
        command += ["--ignorefile", ignorefile]
    for name, value in sorted(build_args.items()):
        command += ["--build-arg", f"{name}={value}"]
    run([*command, context], nice=True)


def remove_quietly(image_id: str) -> None:
    """Remove an image a rebuild replaced; kept when something still uses it."""
    with contextlib.suppress(CommandFailed):
        run(["buildah", "rmi", image_id], capture=True)


def archive(reference: str, path: Path) -> None:
    """The image as a docker-archive tar (tagged `reference`), written atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    run(["buildah", "push", "--quiet", reference, f"docker-archive:{tmp}:{reference}"], nice=True)
    tmp.replace(path)


def restore(path: Path, reference: str) -> None:
    """Load an archive back into buildah's storage (its id is kept)."""
    run(["buildah", "pull", "--quiet", f"docker-archive:{path}"], capture=True)
    if image_id(reference) is None:
        raise CommandFailed(f"{path} did not restore {reference}")
