"""Render mode: `pulumi up` of the dev stack with `cluster.render_dir` writes every manifest
to a directory (the Kubernetes provider's renderYamlToDirectory) and reaches no cluster; every
file passes the same schema checks as the objects of the mock tests (tests/support/
manifests.py: kubernetes-validate strict at 1.28 and 1.37, Volcano's Job CRD with unknown
fields rejected).

The dev stack as committed, plus `cluster.render_dir` and `volcano.managed: true` (the Volcano
chart cannot be downloaded here, and a Helm release is not a manifest). KUBECONFIG points at
a file that does not exist, as in a shell where it is set: the provider must not use it.

Rendered Secrets hold their values in plaintext (base64): the render directory lives in a
private temporary directory (mode 0700) that the fixture deletes, also when a test fails.
"""

from __future__ import annotations

import base64
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import pulumi_harness as harness
from tests.support.manifests import (
    KUBERNETES_VERSIONS,
    describe,
    differences,
    is_volcano_job,
    load_rendered,
    schema_errors,
    volcano_job_schema,
)
from tests.support.pulumi_cli import Project, Result, temp_dir
from tests.support.stacks import run_stack
from tests.support.volcano_crds import CrdsUnavailable

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STACK = "dev"


@dataclass
class Rendered:
    project: Project
    directory: Path
    up: Result
    files: list[tuple[Path, dict[str, Any]]]

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return [document for _, document in self.files]


@pytest.fixture(scope="module")
def rendered(pulumi_path: str) -> Iterator[Rendered]:
    work = temp_dir("elasticctr-render-")
    try:
        project = Project.create(work, STACK, pulumi_path, kubeconfig=work / "absent.kubeconfig")
        directory = work / "render"
        project.config_set("cluster.render_dir", str(directory), path=True)
        project.config_set("volcano.managed", "true", path=True)
        up = project.up()
        yield Rendered(project, directory, up, load_rendered(directory))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def mock_manifests(render_dir: Path) -> list[dict[str, Any]]:
    graph: harness.Graph = run_stack(
        STACK,
        {
            "elasticctr:cluster": {"render_dir": str(render_dir)},
            "elasticctr:volcano": {"managed": True},
        },
    )
    return graph.manifests()


def key(manifest: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = manifest["metadata"]
    return (manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"])


def test_every_object_is_rendered_once(rendered: Rendered) -> None:
    assert rendered.up.returncode == 0
    files = [path.relative_to(rendered.directory) for path, _ in rendered.files]
    # No CRD is declared (Volcano's come with its chart); one object per file.
    assert {p.parts[0] for p in files} == {"1-manifest"}
    assert len(files) == len(set(files))
    declared = {key(m) for m in mock_manifests(rendered.directory)}
    assert sorted(key(m) for m in rendered.manifests) == sorted(declared)
    assert len(declared) >= 40


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_files_match_the_kubernetes_schema(rendered: Rendered, version: str) -> None:
    assert schema_errors(rendered.manifests, versions=[version]) == []


def test_the_rendered_volcano_job_matches_its_crd(rendered: Rendered) -> None:
    try:
        schema = volcano_job_schema()
    except CrdsUnavailable as why:
        pytest.skip(f"Volcano CRD schema unavailable: {why}")
    jobs = [m for m in rendered.manifests if is_volcano_job(m)]
    assert [describe(j) for j in jobs] == ["Job/elasticctr-train"]
    assert schema_errors(jobs, versions=[], volcano_schema=schema) == []


def test_rendered_objects_are_what_the_program_declares(rendered: Rendered) -> None:
    """The files hold the declared objects as they are (the provider adds nothing but the
    Secret's data: stringData is rendered base64-encoded; and, applying client-side, its
    `app.kubernetes.io/managed-by: pulumi` label)."""
    by_key = {key(m): m for m in rendered.manifests}
    for manifest in mock_manifests(rendered.directory):
        rendered_one = by_key[key(manifest)]
        # The label is the program's on most objects and the provider's on all of them.
        for side in (rendered_one, manifest):
            labels = side.get("metadata", {}).get("labels", {})
            assert labels.pop("app.kubernetes.io/managed-by", "pulumi") == "pulumi"
            if not labels:
                side["metadata"].pop("labels", None)
        if manifest["kind"] == "Secret":
            assert set(rendered_one["data"]) == set(manifest["stringData"])
            manifest = {k: v for k, v in manifest.items() if k != "stringData"}
            rendered_one = {k: v for k, v in rendered_one.items() if k != "data"}
        assert differences(rendered_one, manifest) == [], describe(manifest)


def test_rendered_secrets_are_plaintext_in_a_private_directory(rendered: Rendered) -> None:
    """A known property of renderYamlToDirectory: the Secret's values are in the file
    (base64), while the state keeps them encrypted. The engine says so, and the directory
    is private to this user and deleted with the fixture."""
    secrets = {m["metadata"]["name"]: m for m in rendered.manifests if m["kind"] == "Secret"}
    workloads = ("training", "cube", "cube-transfer", "serving", "mlflow")
    assert set(secrets) == {"minio-root", *(f"storage-{w}" for w in workloads)}
    values = {
        f"{name}.{k}": base64.b64decode(v).decode()
        for name, secret in secrets.items()
        for k, v in secret["data"].items()
    }
    keys = secrets["storage-serving"]["data"]
    assert [
        len(base64.b64decode(keys[k])) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    ] == [
        20,
        40,
    ]
    assert "rendered YAML will contain a secret value in plaintext" in rendered.up.output
    state = "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in rendered.project.state_files()
    )
    assert not any(v in state for v in values.values())
    assert stat.S_IMODE(rendered.project.work.stat().st_mode) == 0o700
