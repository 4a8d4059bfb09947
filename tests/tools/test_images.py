"""tools/images.py without building anything: references, recipes for every image a stack
names, build order, cache keys, and the build/import bookkeeping with buildah and ctr
replaced by fakes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from components.cluster import PROJECT_IMAGES as STACK_PROJECT_IMAGES
from infra.config import ImagesConfig
from tools.imagekit import build as build_module
from tools.imagekit import buildah, containerd, inputs, recipes, volcano
from tools.imagekit.fingerprint import FileHashes, Fingerprint, _compile, _ignored
from tools.imagekit.recipes import Options, Recipe, catalog, normalise
from tools.imagekit.store import Store

ROOT = Path(__file__).resolve().parents[2]


def load_cli() -> ModuleType:
    """tools/images.py (a script) as a module."""
    spec = importlib.util.spec_from_file_location("images_cli", ROOT / "tools" / "images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["images_cli"] = module
    spec.loader.exec_module(module)
    return module


def test_short_names_are_normalised_as_buildah_and_containerd_store_them() -> None:
    assert normalise("python:3.11.14-slim-bookworm") == (
        "docker.io/library/python:3.11.14-slim-bookworm"
    )
    assert normalise("apache/hadoop:3.4.1") == "docker.io/apache/hadoop:3.4.1"
    assert normalise("ghcr.io/mlflow/mlflow:v3.17.2") == "ghcr.io/mlflow/mlflow:v3.17.2"
    assert normalise("localhost/x/y:1") == "localhost/x/y:1"
    assert normalise("localhost:5000/y:1") == "localhost:5000/y:1"


def test_project_references_default_to_the_stack_config() -> None:
    config = ImagesConfig()
    refs = {r.name: r.reference for r in catalog().values() if r.kind == "project"}
    assert refs["trainer"] == f"{config.registry}/trainer:{config.tags.trainer}"
    assert refs["mlflow"] == f"{config.registry}/mlflow:{config.tags.mlflow}"
    assert refs["client"] == f"{config.registry}/client:0.1.0"  # the project's version


def test_registry_and_tags_are_the_callers() -> None:
    refs = catalog(Options(registry="localhost/elasticctr/", tags={"cube": "dev-1"}))
    assert refs["cube"].reference == "localhost/elasticctr/cube:dev-1"
    assert refs["serving"].reference == "localhost/elasticctr/serving:0.1.0"


def test_every_from_of_the_projects_dockerfiles_has_a_base_stand_in_of_that_exact_name() -> None:
    everything = catalog()
    built = {r.reference for r in everything.values()}
    for recipe in everything.values():
        for base in recipe.from_references():
            assert base in built, f"{recipe.name}: FROM {base} has no recipe"
    assert everything["cube"].from_references() == [recipes.RUST, recipes.PYTHON]
    assert everything["mlflow"].from_references() == [recipes.MLFLOW]


def stack_image_sections() -> list[dict[str, Any]]:
    sections: list[dict[str, Any]] = [{}]  # the defaults
    for stack in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(stack.read_text()).get("config", {})
        sections.append(config.get("elasticctr:images", {}))
    return sections


@pytest.mark.parametrize("section", stack_image_sections())
def test_every_image_a_stack_names_has_a_recipe(section: dict[str, Any]) -> None:
    """The default config and every stack file (a local stack naming the stand-ins
    included): each image is built here under that name, or has a stand-in for it."""
    config = ImagesConfig(**section)
    everything = catalog(Options(registry=config.registry, tags=config.tags.model_dump()))
    for name in STACK_PROJECT_IMAGES:
        reference = f"{config.registry}/{name}:{getattr(config.tags, name)}"
        recipe = recipes.recipe_for(everything, reference)
        assert recipe is not None and recipe.reference == reference
    for third_party in (config.minio, config.hadoop, config.kafka):
        assert recipes.recipe_for(everything, third_party) is not None, third_party
    assert everything["pause"].reference == "registry.k8s.io/pause:3.10"


def test_recipe_for_a_reference() -> None:
    everything = catalog()
    assert recipes.recipe_for(everything, "apache/kafka:4.1.1") == everything["kafka"]
    assert recipes.recipe_for(everything, "apache/hadoop:3.4.1") == everything["hadoop"]
    assert (
        recipes.recipe_for(everything, "localhost/elasticctr-standin/hadoop:3.4.1")
        == (everything["hadoop"])
    )
    assert recipes.recipe_for(everything, "quay.io/minio/minio:RELEASE.x") == everything["minio"]
    assert (
        recipes.recipe_for(everything, "localhost/elasticctr-standin/minio:v9")
        == (everything["minio"])
    )
    assert recipes.recipe_for(everything, "python:3.11.14-slim-bookworm") == everything["python"]
    assert (
        recipes.recipe_for(everything, "docker.io/volcanosh/vc-scheduler:v1.15.0")
        == (everything["vc-scheduler"])
    )
    assert recipes.recipe_for(everything, "docker.io/library/redis:7") is None


def test_each_stand_in_has_its_folder_with_a_containerfile_and_a_readme() -> None:
    folders = {p.name for p in (ROOT / "tools" / "standins").iterdir() if p.is_dir()}
    standins = {r.name for r in catalog().values() if r.recipe_dir is not None}
    assert folders == standins
    for name in folders:
        assert (ROOT / "tools" / "standins" / name / "Containerfile").is_file()
        readme = (ROOT / "tools" / "standins" / name / "README.md").read_text()
        assert "Differences" in readme or "differ" in readme, name


def test_runtime_stand_ins_are_named_under_the_local_prefix() -> None:
    for recipe in catalog().values():
        if recipe.kind == "standin" and recipe.name != "pause":
            assert recipe.reference.startswith(recipes.STANDIN_PREFIX + "/"), recipe.reference


def test_volcano_stand_ins_keep_the_charts_image_names_and_tags() -> None:
    try:
        images = volcano.chart_images()
    except volcano.ChartUnavailable as why:
        pytest.skip(str(why))
    everything = catalog()
    for name, image in images.items():
        assert image.tag == "v1.15.0"
        assert everything[name].reference == f"{recipes.STANDIN_PREFIX}/{image.name}:{image.tag}"
        assert everything[name].stands_in_for == f"docker.io/{image.name}:v1.15.0"
    values = recipes.volcano_chart_values()["basic"]
    assert values["image_registry"] == recipes.STANDIN_PREFIX
    assert values["image_pull_policy"] != "Always"


def test_build_order_puts_bases_first() -> None:
    order = [r.name for r in build_module.closure(catalog(), ["pause", "trainer"])]
    assert order == ["debian", "rust", "pause", "python", "trainer"]


def test_copy_sources_are_what_the_dockerfile_reads_from_its_context() -> None:
    sources = inputs.copy_sources(ROOT / "images" / "serving" / "Dockerfile")
    assert sources == [
        "serving/parser/Cargo.toml",
        "serving/parser/Cargo.lock",
        "serving/parser/src",
        "common",
        "serving/requirements.txt",
        "serving/elasticctr_serving",
        "serving/elasticctr_joiner",
    ]  # not the parser library: that comes --from the build stage
    assert inputs.copy_sources(ROOT / "images" / "mlflow" / "Dockerfile") == []


def test_dockerignore_patterns() -> None:
    patterns = [
        _compile(p) for p in ["**/__pycache__", "**/*.pyc", "trainer", "cube/server/target"]
    ]
    assert _ignored("common/x/__pycache__/a.py", patterns)
    assert _ignored("a.pyc", patterns) and _ignored("common/b.pyc", patterns)
    assert _ignored("trainer/Dockerfile", patterns) and not _ignored("trainers", patterns)
    assert _ignored("cube/server/target/release/x", patterns)
    assert not _ignored("cube/server/src/main.rs", patterns)


# ---- keys --------------------------------------------------------------------------


def project_recipe(tmp_path: Path) -> Recipe:
    """A small project image in a context of its own."""
    context = tmp_path / "images"
    (context / "app" / "pkg").mkdir(parents=True)
    (context / "app" / "pkg" / "code.py").write_text("print(1)\n")
    (context / "other").mkdir()
    (context / "other" / "unrelated.txt").write_text("x")
    dockerfile = context / "app" / "Dockerfile"
    dockerfile.write_text("FROM python:3.11.14-slim-bookworm\nCOPY app/pkg /opt/pkg\n")
    ignore = context / "app" / "Dockerfile.dockerignore"
    ignore.write_text("**/__pycache__\n")
    return Recipe(
        name="app",
        reference="localhost/test/app:1",
        kind="project",
        containerfile=dockerfile,
        context=context,
        ignorefile=ignore,
    )


def key_of(recipe: Recipe, tmp_path: Path, base_id: str = "base-1") -> str:
    hashes = FileHashes(tmp_path / "hashes.json")
    return inputs.key(recipe, {recipes.PYTHON: base_id}, Fingerprint(hashes))


def test_key_follows_what_the_image_is_built_from_and_nothing_else(tmp_path: Path) -> None:
    recipe = project_recipe(tmp_path)
    first = key_of(recipe, tmp_path)
    assert key_of(recipe, tmp_path) == first
    # outside the COPY sources, or ignored: same key
    (tmp_path / "images" / "other" / "unrelated.txt").write_text("changed")
    cache = tmp_path / "images" / "app" / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "code.cpython-311.pyc").write_bytes(b"\0")
    assert key_of(recipe, tmp_path) == first
    # a base rebuilt, a copied file changed, a build arg, another tag: new keys
    assert key_of(recipe, tmp_path, base_id="base-2") != first
    (tmp_path / "images" / "app" / "pkg" / "code.py").write_text("print(2)\n")
    changed = key_of(recipe, tmp_path)
    assert changed != first
    assert key_of(Recipe(**{**recipe.__dict__, "build_args": {"A": "1"}}), tmp_path) != changed
    assert (
        key_of(Recipe(**{**recipe.__dict__, "reference": "localhost/test/app:2"}), tmp_path)
        != changed
    )


def test_a_stand_ins_key_ignores_its_readme(tmp_path: Path) -> None:
    folder = tmp_path / "standin"
    folder.mkdir()
    (folder / "Containerfile").write_text("FROM scratch\nCOPY launcher bin/tool /usr/bin/\n")
    (folder / "launcher").write_text("#!/bin/sh\n")
    (folder / "README.md").write_text("how it differs")
    recipe = Recipe(
        name="standin",
        reference="localhost/test/standin:1",
        kind="standin",
        containerfile=folder / "Containerfile",
        context=None,
        recipe_dir=folder,
    )
    first = key_of(recipe, tmp_path)
    (folder / "README.md").write_text("how it differs, said better")
    assert key_of(recipe, tmp_path) == first
    (folder / "launcher").write_text("#!/bin/sh\nexec tool\n")
    assert key_of(recipe, tmp_path) != first


def test_file_hashes_are_remembered_by_stat(tmp_path: Path) -> None:
    data = tmp_path / "big.bin"
    data.write_bytes(b"a" * 1000)
    hashes = FileHashes(tmp_path / "memo.json")
    first = hashes.of(data)
    hashes.save()
    again = FileHashes(tmp_path / "memo.json")
    assert again.of(data) == first
    data.write_bytes(b"b" * 1001)
    assert again.of(data) != first


# ---- build and import with fakes ---------------------------------------------------------


class FakeBuildah:
    """buildah's storage as a dict; counts builds."""

    def __init__(self) -> None:
        self.images: dict[str, str] = {recipes.PYTHON: "python-id"}
        self.builds: list[str] = []
        self.restores: list[str] = []
        self.images_archived: dict[str, str] = {}
        self.removed: list[str] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(buildah, "image_id", lambda ref: self.images.get(ref))
        monkeypatch.setattr(buildah, "bud", self.bud)
        monkeypatch.setattr(buildah, "archive", lambda ref, path: path.write_text(ref))
        monkeypatch.setattr(buildah, "restore", self.restore)
        monkeypatch.setattr(buildah, "remove_quietly", self.removed.append)

    def bud(self, *, reference: str, **_: Any) -> None:
        self.builds.append(reference)
        self.images[reference] = f"id-{len(self.builds)}"

    def restore(self, path: Path, reference: str) -> None:
        self.restores.append(reference)
        self.images[reference] = self.images_archived[reference]


def test_second_build_with_nothing_changed_builds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeBuildah()
    fake.install(monkeypatch)
    recipe = project_recipe(tmp_path)
    store = Store(tmp_path / "cache")
    everything = {"app": recipe}
    (first,) = build_module.build(everything, ["app"], store)
    assert (first.outcome, fake.builds) == ("built", [recipe.reference])
    (second,) = build_module.build(everything, ["app"], store)
    assert second.outcome == "cached" and len(fake.builds) == 1
    (forced,) = build_module.build(everything, ["app"], store, force=["app"])
    assert forced.outcome == "built" and len(fake.builds) == 2
    assert fake.removed == ["id-1"]  # the image the rebuild replaced
    # buildah's storage lost the image: restored from the archive, not rebuilt
    fake.images_archived = {recipe.reference: fake.images.pop(recipe.reference)}
    (restored,) = build_module.build(everything, ["app"], store)
    assert restored.outcome == "restored" and fake.restores == [recipe.reference]
    # a changed input: rebuilt
    (tmp_path / "images" / "app" / "pkg" / "code.py").write_text("print(3)\n")
    (rebuilt,) = build_module.build(everything, ["app"], store)
    assert rebuilt.outcome == "built" and len(fake.builds) == 3


def test_an_unavailable_base_skips_what_builds_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeBuildah().install(monkeypatch)
    app = project_recipe(tmp_path)
    scratch = tmp_path / "Containerfile"
    scratch.write_text("FROM scratch\n")
    base = Recipe(
        name="python",
        reference=recipes.PYTHON,
        kind="base",
        containerfile=scratch,
        context=None,
        unavailable="no toolchain",
    )
    results = build_module.build({"python": base, "app": app}, ["app"], Store(tmp_path / "c"))
    assert [(r.name, r.outcome) for r in results] == [
        ("python", "unavailable"),
        ("app", "skipped"),
    ]


def test_import_skips_what_containerd_has_at_the_same_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    FakeBuildah().install(monkeypatch)
    store = Store(tmp_path / "cache")
    recipe = project_recipe(tmp_path)
    build_module.build({"app": recipe}, ["app"], store)
    in_containerd: dict[str, str] = {}
    imports: list[Path] = []

    def fake_import(address: str, namespace: str, archive: Path) -> None:
        imports.append(archive)
        in_containerd[recipe.reference] = "sha256:" + "a" * 64

    monkeypatch.setattr(containerd, "images", lambda address, namespace: dict(in_containerd))
    monkeypatch.setattr(containerd, "import_archive", fake_import)
    first = build_module.import_into(store, ["app", "nothing"], "/x.sock", "k8s.io")
    assert [r.outcome for r in first] == ["imported", "missing"]
    (second,) = build_module.import_into(store, ["app"], "/x.sock", "k8s.io")
    assert second.outcome == "present" and len(imports) == 1
    in_containerd[recipe.reference] = "sha256:" + "b" * 64  # replaced behind our back
    (third,) = build_module.import_into(store, ["app"], "/x.sock", "k8s.io")
    assert third.outcome == "imported" and len(imports) == 2


def test_cli_list_prints_every_image(capsys: pytest.CaptureFixture[str]) -> None:
    cli = load_cli()
    assert cli.main(["list", "--registry", "localhost/elasticctr", "--tag", "cube=c1"]) == 0
    out = capsys.readouterr().out
    for name in cli.RUNTIME_IMAGES:
        assert name in out
    assert "localhost/elasticctr/trainer:0.1.0" in out
    assert "localhost/elasticctr/cube:c1" in out
    assert "docker.io/library/python:3.11.14-slim-bookworm" in out


def test_set_up_installs_the_debian_packages_the_builds_need() -> None:
    setup = (ROOT / "tools" / "setup.sh").read_text()
    # The builds' and the cluster node's: added to the compressors unless SKIP_CLUSTER.
    packages = setup[setup.index("packages+=(") :].split(")")[0].split("(")[1].split()
    assert set(packages) >= {"buildah", "mmdebstrap", "containerd", "uidmap"}
