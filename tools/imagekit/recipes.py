"""Every image the stack runs here, and how each is built.

Three kinds:
  base     stand-ins tagged with exactly the names the project's Dockerfiles use in FROM
           (python, rust, mlflow-base) and their common Debian base;
  project  images/<name>/Dockerfile, unchanged, as <registry>/<name>:<tag>;
  standin  third-party images the cluster runs (pause, MinIO, Hadoop, Kafka, Prometheus,
           Volcano), named under
           a local prefix, except pause, whose name containerd's config fixes.
Each stand-in's recipe is tools/standins/<name>/ (Containerfile + README saying how it
differs from the real image).
"""

from __future__ import annotations

import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from infra.config import DEFAULT_REGISTRY, ImagesConfig

from . import staging, toolbins, volcano
from .paths import IMAGES_DIR, REPO_ROOT, STANDINS_DIR
from .staging import Stager
from .store import cache_root

STANDIN_PREFIX = "localhost/elasticctr-standin"
DEBIAN = f"{STANDIN_PREFIX}/debian:bookworm-slim"
PYTHON = "docker.io/library/python:3.11.14-slim-bookworm"
RUST = "docker.io/library/rust:1.95.0-slim-bookworm"
RUST_VERSION = "1.95.0"
MLFLOW_VERSION = "3.17.2"
MLFLOW = f"ghcr.io/mlflow/mlflow:v{MLFLOW_VERSION}"
PAUSE = "registry.k8s.io/pause:3.10"
HADOOP_VERSION = "3.4.1"
HADOOP_UPSTREAM = f"apache/hadoop:{HADOOP_VERSION}"
KAFKA_VERSION = "4.1.1"  # tools/kafka-broker.sh's, the tests' broker
KAFKA_UPSTREAM = f"apache/kafka:{KAFKA_VERSION}"
# Images of images/ the stack deploys (their tags are config keys), and the client, which
# users run (tagged with the project's version).
PROJECT_IMAGES = ("trainer", "cube", "serving", "client", "mlflow")

Kind = Literal["base", "project", "standin"]


@dataclass(frozen=True)
class Recipe:
    name: str
    reference: str
    kind: Kind
    containerfile: Path
    # buildah's context: images/ for the project's images; for stand-ins, a directory the
    # build stages from recipe_dir + the stagers' files.
    context: Path | None
    recipe_dir: Path | None = None
    stagers: tuple[Stager, ...] = ()
    build_args: Mapping[str, str] = field(default_factory=dict)
    ignorefile: Path | None = None
    stands_in_for: str = ""
    unavailable: str = ""  # why it cannot be built on this machine now

    def from_references(self) -> list[str]:
        """The images its Containerfile starts from (normalised), build stages excluded."""
        stages: set[str] = set()
        bases: list[str] = []
        for line in self.containerfile.read_text().splitlines():
            match = re.match(r"\s*FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.IGNORECASE)
            if not match:
                continue
            image, stage = match.groups()
            if image not in stages and image != "scratch":
                bases.append(normalise(image))
            if stage:
                stages.add(stage)
        return list(dict.fromkeys(bases))


def normalise(reference: str) -> str:
    """Docker's short names in full (python:3 -> docker.io/library/python:3), as buildah
    and containerd store them."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." not in first and ":" not in first and first != "localhost":
        return f"docker.io/{reference}"
    return reference


@dataclass(frozen=True)
class Options:
    """What a caller may choose: the project images' registry and tags (defaults: the stack
    config's), and where the prebuilt tool binaries are."""

    registry: str = DEFAULT_REGISTRY
    tags: Mapping[str, str] = field(default_factory=dict)  # missing names: the defaults
    minio_bin_dir: Path | None = None
    prometheus_bin_dir: Path | None = None
    volcano_bin_dir: Path | None = None


def default_tags() -> dict[str, str]:
    """The config's pinned tags; the client (no config key: users run it, the stack does
    not) takes the project's version."""
    tags = ImagesConfig().tags.model_dump()
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    tags["client"] = project["version"]
    return tags


def project_reference(registry: str, name: str, tag: str) -> str:
    return f"{registry.rstrip('/')}/{name}:{tag}"


def catalog(options: Options | None = None) -> dict[str, Recipe]:
    """Every recipe by name, bases first (a valid build order)."""
    options = options or Options()
    recipes = [*_bases(), *_project(options), *_runtime_standins(options)]
    return {recipe.name: recipe for recipe in recipes}


def _standin(
    name: str,
    reference: str,
    kind: Kind,
    stands_in_for: str,
    *,
    stagers: tuple[Stager, ...] = (),
    build_args: Mapping[str, str] | None = None,
    unavailable: str = "",
) -> Recipe:
    folder = STANDINS_DIR / name
    return Recipe(
        name=name,
        reference=reference,
        kind=kind,
        containerfile=folder / "Containerfile",
        context=None,
        recipe_dir=folder,
        stagers=stagers,
        build_args=dict(build_args or {}),
        stands_in_for=stands_in_for,
        unavailable=unavailable,
    )


def _bases() -> list[Recipe]:
    # Where rustup keeps toolchains and its own binary, as rustup itself finds them.
    rustup_home = Path(os.environ.get("RUSTUP_HOME") or Path.home() / ".rustup")
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    rustup = shutil.which("rustup") or cargo_home / "bin" / "rustup"
    return [
        _standin(
            "debian", DEBIAN, "base", "docker.io/library/debian:bookworm-slim",
            stagers=(staging.DebianRootfs(),),
        ),
        _standin("python", PYTHON, "base", PYTHON),
        _standin(
            "rust", RUST, "base", RUST,
            stagers=(
                staging.RustToolchain(
                    rustup_home / "toolchains" / f"{RUST_VERSION}-x86_64-unknown-linux-gnu",
                    Path(rustup),
                ),
            ),
        ),
        _standin(
            "mlflow-base", MLFLOW, "base", MLFLOW, build_args={"MLFLOW_VERSION": MLFLOW_VERSION}
        ),
    ]  # fmt: skip


def _project(options: Options) -> list[Recipe]:
    tags = {**default_tags(), **options.tags}
    recipes = []
    for name in PROJECT_IMAGES:
        dockerfile = IMAGES_DIR / name / "Dockerfile"
        ignore = dockerfile.with_name("Dockerfile.dockerignore")
        recipes.append(
            Recipe(
                name=name,
                reference=project_reference(options.registry, name, tags[name]),
                kind="project",
                containerfile=dockerfile,
                context=IMAGES_DIR,
                ignorefile=ignore if ignore.is_file() else None,
            )
        )
    return recipes


def hadoop_jars() -> staging.MavenJars:
    """Hadoop's jars (hdfs, hdfs-client, common and their runtime dependencies) into lib/,
    and the web UIs' files into webapps/: the namenode and datanode refuse to start without
    them, and Maven has them only in hadoop-hdfs's tests jar (the distribution ships them
    in share/hadoop/hdfs/webapps)."""
    hadoop = f"org.apache.hadoop:%s:{HADOOP_VERSION}"
    return staging.MavenJars(
        "hadoop", HADOOP_VERSION, cache_root() / "downloads",
        artifacts=(
            hadoop % "hadoop-common", hadoop % "hadoop-hdfs", hadoop % "hadoop-hdfs-client",
            # Hadoop's logging binding: hadoop-project's management leaves it out of the
            # runtime closure, and without it slf4j drops every log line.
            "org.slf4j:slf4j-reload4j",
        ),
        # Hadoop's own dependency versions, as its distribution ships them: Maven's
        # nearest-wins alone picks an older jackson-core the namenode cannot start with.
        managed_by=hadoop % "hadoop-project",
        unpack=((f"{hadoop % 'hadoop-hdfs'}:jar:tests", "webapps"),),
    )  # fmt: skip


def kafka_jars() -> staging.MavenJars:
    """Kafka's broker jars (kafka_2.13 and its runtime dependencies, with the log4j 2
    binding the distribution ships) into libs/, as tools/kafka-broker.sh has the tests'
    broker's."""
    log4j = "org.apache.logging.log4j:%s:2.25.3"
    return staging.MavenJars(
        "kafka", KAFKA_VERSION, cache_root() / "downloads",
        artifacts=(
            f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", "org.slf4j:slf4j-api:2.0.17",
            log4j % "log4j-slf4j2-impl", log4j % "log4j-core",
        ),
        lib_dir="libs",
    )  # fmt: skip


def _runtime_standins(options: Options) -> list[Recipe]:
    recipes = [
        _standin("pause", PAUSE, "standin", PAUSE),
        _standin(
            "hadoop", f"{STANDIN_PREFIX}/hadoop:{HADOOP_VERSION}", "standin", HADOOP_UPSTREAM,
            stagers=(hadoop_jars(),),
        ),
        _standin(
            "kafka", f"{STANDIN_PREFIX}/kafka:{KAFKA_VERSION}", "standin", KAFKA_UPSTREAM,
            stagers=(kafka_jars(),),
        ),
    ]  # fmt: skip
    recipes.append(_binaries_standin("minio", ("minio", "mc"), options.minio_bin_dir))
    recipes.append(
        _binaries_standin(
            "prometheus", ("prometheus", "promtool"), options.prometheus_bin_dir, tag_prefix="v"
        )
    )
    recipes += _volcano(options)
    return recipes


def _binaries_standin(
    tool: str, binaries: tuple[str, ...], bin_dir: Path | None, tag_prefix: str = ""
) -> Recipe:
    """A stand-in of the Debian base and a tool's binaries, tagged with the tool's version
    as the upstream image the stack config names by default is (`images.<tool>`)."""
    bins = toolbins.find(tool, binaries, bin_dir)
    upstream = getattr(ImagesConfig(), tool).rpartition(":")[0]
    version = f"{tag_prefix}{bins.version}" if bins.version else None
    return _standin(
        tool,
        f"{STANDIN_PREFIX}/{tool}:{version or 'unknown'}",
        "standin",
        f"{upstream}:{version or '<version>'}",
        stagers=() if bins.missing else (staging.Binaries(tuple(bins.paths.values())),),
        unavailable=bins.missing_reason() if bins.missing else "",
    )


def _volcano(options: Options) -> list[Recipe]:
    bins = toolbins.find("volcano", tuple(volcano.COMPONENTS), options.volcano_bin_dir)
    try:
        images = volcano.chart_images()
        script: Path | None = volcano.admission_script()
        chart_problem = ""
    except volcano.ChartUnavailable as why:
        images, script, chart_problem = {}, None, f"Volcano's chart is unavailable: {why}"
    recipes = []
    tag = f"v{volcano.VERSION}"
    for name in volcano.COMPONENTS:
        # the chart's defaults when it cannot be read (the recipe is unavailable then)
        image = images.get(name) or volcano.ChartImage(f"volcanosh/{name}", tag, "docker.io")
        stagers: list[Stager] = []
        if name in bins.paths:
            stagers.append(staging.Binaries((bins.paths[name],)))
        if name == "vc-webhook-manager" and script is not None:
            stagers.append(staging.File(script, "gen-admission-secret.sh"))
        problem = chart_problem or (bins.missing_reason() if name in bins.missing else "")
        if not problem and bins.version not in (None, volcano.VERSION):
            problem = f"the binaries are Volcano {bins.version}, the chart {volcano.VERSION}"
        recipes.append(
            _standin(
                name, f"{STANDIN_PREFIX}/{image.name}:{image.tag}", "standin", image.upstream,
                stagers=tuple(stagers), unavailable=problem,
            )
        )  # fmt: skip
    return recipes


def _repository(reference: str) -> str:
    """A reference without its tag or digest."""
    name = normalise(reference).split("@")[0]
    head, _, tail = name.rpartition(":")
    return head if head and "/" not in tail else name


def recipe_for(recipes: Mapping[str, Recipe], reference: str) -> Recipe | None:
    """The recipe that builds `reference` (the same name), or else the one that builds
    or stands in for its repository at another tag (e.g. a stack naming the real MinIO
    image): what to build for an image a stack names."""
    wanted = normalise(reference)
    for recipe in recipes.values():
        if recipe.reference == wanted:
            return recipe
    repository = _repository(reference)
    for recipe in recipes.values():
        upstream = _repository(recipe.stands_in_for) if recipe.stands_in_for else ""
        if repository in (_repository(recipe.reference), upstream):
            return recipe
    return None


def volcano_chart_values() -> dict[str, dict[str, str]]:
    """Helm values that make the Volcano chart run the stand-ins: its image names and tags
    are kept, only the registry and the pull policy change."""
    return {"basic": {"image_registry": STANDIN_PREFIX, "image_pull_policy": "IfNotPresent"}}
