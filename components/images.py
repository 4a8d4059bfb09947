"""The project's images built from images/<name>/Dockerfile (context images/) with
pulumi-docker-build and pushed to the stack's registry (ECR, SWR, CCR, or any registry).

Pods then run the pushed digest (`<registry>/<name>:<tag>@sha256:...`): a rebuild that
changes the image rolls them, a rebuild that does not changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_docker_build as docker_build

from components.cluster import RegistryLogin


@dataclass(frozen=True)
class ProjectImagesArgs:
    registry: pulumi.Input[str]  # e.g. 1234.dkr.ecr.us-west-2.amazonaws.com/elasticctr
    tags: Mapping[str, str]  # image name -> pinned tag
    context_dir: Path  # images/: every Dockerfile builds with this context
    login: RegistryLogin | None = None  # None: the local `docker login`
    platform: str = "linux/amd64"  # what the cloud nodes run


class ProjectImages(pulumi.ComponentResource):
    refs: dict[str, pulumi.Output[str]]  # image name -> pushed reference with digest

    def __init__(
        self, name: str, args: ProjectImagesArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        missing = [
            image for image in args.tags if not (args.context_dir / image / "Dockerfile").is_file()
        ]
        if missing:
            raise ValueError(
                f"{name}: no Dockerfile for {', '.join(missing)} under {args.context_dir}"
            )
        super().__init__("elasticctr:images:ProjectImages", name, None, opts)
        registries: list[docker_build.RegistryArgsDict] = []
        if args.login is not None:
            registries.append(
                {
                    "address": args.login.address,
                    "username": args.login.username,
                    "password": pulumi.Output.secret(args.login.password),
                }
            )
        self.refs = {}
        for image, tag in args.tags.items():
            built = docker_build.Image(
                f"{name}-{image}",
                context={"location": str(args.context_dir)},
                dockerfile={"location": str(args.context_dir / image / "Dockerfile")},
                tags=[pulumi.Output.concat(args.registry, f"/{image}:{tag}")],
                platforms=[docker_build.Platform(args.platform)],
                push=True,
                registries=registries,
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.refs[image] = built.ref
        self.register_outputs({"refs": self.refs})
