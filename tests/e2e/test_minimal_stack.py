"""A user's first stack through the real engine: a stack file that sets only what its
cluster needs (no `storage`, no `data`, ...) gets Pulumi.yaml's defaults from the engine
and deploys; the queue, node pools and PriorityClasses it names are looked up in the
cluster at preview (infra/preflight.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.controlplane import api_client
from tests.support.manifests import load_rendered
from tests.support.pulumi_cli import Project, resources_of, temp_dir, type_and_name

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
kubernetes = pytest.importorskip("kubernetes")


def preview_fails_naming(project: Project, message: str) -> None:
    """`pulumi preview` fails, and its output says `message`."""
    result = project.run("preview", check=False)
    assert result.returncode != 0, result.describe()
    assert message in result.output, result.describe()


@pytest.fixture(scope="module")
def rendering(pulumi_path: str) -> Iterator[Project]:
    """The same minimal stack file, rendering its manifests (no cluster: CLI tools only)."""
    work = temp_dir("elasticctr-e2e-minimal-render-")
    try:
        config = {
            "elasticctr:cluster": {"render_dir": str(work / "render")},
            "elasticctr:volcano": {"managed": True},
        }
        yield Project.create(
            work, "first", pulumi_path, kubeconfig=work / "absent.kubeconfig", config=config
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def project(control_plane: Any, cluster_path: str) -> Iterator[Project]:
    work = temp_dir("elasticctr-e2e-minimal-")
    try:
        # What this control plane needs, nothing more: where it is, no waiting for pods (it
        # has no node), and Volcano's CRDs come with it (no chart to install).
        config = {
            "elasticctr:cluster": {
                "kubeconfig": str(control_plane.kubeconfig),
                "skip_await": True,
            },
            "elasticctr:volcano": {"managed": True},
        }
        yield Project.create(
            work, "first", cluster_path, kubeconfig=control_plane.kubeconfig, config=config
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_stack_that_leaves_storage_at_its_default_renders(rendering: Project) -> None:
    rendering.up()
    kinds = {
        (d["kind"], d["metadata"]["name"]) for _, d in load_rendered(rendering.work / "render")
    }
    assert ("Job", "elasticctr-train") in kinds and ("StatefulSet", "minio") in kinds, kinds


def test_a_number_yaml_would_rewrite_fails_the_preview(rendering: Project) -> None:
    # The engine reads `trainers: 4.0` as 4 and hands the program "4": only the file says.
    text = rendering.stack_file.read_text(encoding="utf-8")
    rendering.stack_file.write_text(
        text.replace("config:\n", "config:\n  elasticctr:trainers: 4.0\n", 1), encoding="utf-8"
    )
    preview_fails_naming(
        rendering,
        "elasticctr:trainers must be an integer from 1 to 1000, got 4.0 in "
        "stacks/Pulumi.first.yaml",
    )


def test_a_stack_that_leaves_storage_at_its_default_deploys(project: Project) -> None:
    project.up()
    state = project.export()
    made = {type_and_name(r["urn"]) for r in resources_of(state)}
    assert ("kubernetes:batch.volcano.sh/v1alpha1:Job", "training-job") in made, sorted(made)
    outputs = project.run("stack", "output", "--json").json()
    assert outputs["bucket"] == "elasticctr" and outputs["namespace"] == "elasticctr"
    project.run("destroy", "--yes", "--skip-preview")


def test_a_queue_the_cluster_lacks_fails_the_preview(project: Project, control_plane: Any) -> None:
    from kubernetes import client

    project.config_set("training.queue", "nightly", path=True)
    preview_fails_naming(
        project,
        'elasticctr:training.queue must name a Volcano queue of the cluster (none), got "nightly"',
    )
    with api_client(control_plane) as api:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "scheduling.volcano.sh",
            "v1beta1",
            "queues",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": "nightly"},
                "spec": {"weight": 1},
            },
        )
    project.run("preview")


def test_a_node_pool_no_node_has_is_a_preview_warning(project: Project) -> None:
    project.config_set("serving.node_pool", "gpu", path=True)
    result = project.run("preview")
    assert "no node of the cluster is labelled elasticctr.io/pool=gpu" in result.output, (
        result.describe()
    )


def test_a_priority_class_the_cluster_lacks_fails_the_preview(
    project: Project, control_plane: Any
) -> None:
    from kubernetes import client

    project.config_set("serving.priority_class", "online", path=True)
    # The API server makes the two system classes itself.
    preview_fails_naming(
        project,
        "elasticctr:serving.priority_class must name a PriorityClass of the cluster "
        '(system-cluster-critical, system-node-critical), got "online"',
    )
    with api_client(control_plane) as api:
        client.SchedulingV1Api(api).create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name="online"), value=1000)
        )
    project.run("preview")


def test_a_cluster_without_room_for_the_stack_is_a_preview_warning(
    project: Project, control_plane: Any
) -> None:
    from kubernetes import client

    short = project.run("preview")  # this control plane has no node yet
    assert "the cluster's 0 nodes that take pods have 0 CPU and 0.0 GiB allocatable" in (
        short.output
    ), short.describe()
    assert "some pods would stay Pending" in short.output
    with api_client(control_plane) as api:
        core = client.CoreV1Api(api)
        core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="roomy")))
        try:
            room = {"cpu": "64", "memory": "256Gi", "pods": "110"}
            core.patch_node_status("roomy", {"status": {"allocatable": room, "capacity": room}})
            fits = project.run("preview")
        finally:
            core.delete_node("roomy")
    assert "some pods would stay Pending" not in fits.output, fits.describe()
