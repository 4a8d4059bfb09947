"""Never adopt or delete what the stack did not create, with the real CLI
and provider against a local API server: a namespace that exists already, holding another
team's ConfigMap, is refused while the stack would create it, is used as it is when the
config says so (never labelled or locked down), and survives `pulumi destroy` with its
object."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.controlplane import api_client
from tests.support.pulumi_cli import Project, temp_dir

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
kubernetes = pytest.importorskip("kubernetes")
SHARED = "shared-team"


@pytest.fixture(scope="module")
def shared(control_plane: Any) -> Iterator[Any]:
    """The API client, with namespace SHARED and another team's ConfigMap in it."""
    from kubernetes import client

    with api_client(control_plane) as api:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": SHARED, "labels": {"team": "theirs"}}})
        core.create_namespaced_config_map(
            SHARED, {"metadata": {"name": "theirs"}, "data": {"k": "v"}}
        )
        yield api


@pytest.fixture(scope="module")
def project(control_plane: Any, cluster_path: str) -> Iterator[Project]:
    work = temp_dir("elasticctr-e2e-ns-")
    try:
        project = Project.create(work, "ci", cluster_path, kubeconfig=control_plane.kubeconfig)
        project.config_set("cluster.kubeconfig", str(control_plane.kubeconfig), path=True)
        project.config_set("namespace", SHARED)
        yield project
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _namespace(api: Any) -> Any:
    from kubernetes import client

    return client.CoreV1Api(api).read_namespace(SHARED)


def test_a_namespace_that_exists_is_not_taken_over(shared: Any, project: Project) -> None:
    result = project.up(check=False)
    assert result.returncode != 0
    assert f'namespaces "{SHARED}" already exists' in result.output, result.describe()
    assert _namespace(shared).metadata.labels == {
        "team": "theirs",
        "kubernetes.io/metadata.name": SHARED,
    }


def test_an_existing_namespace_is_used_as_it_is_and_left_behind(
    shared: Any, project: Project
) -> None:
    from kubernetes import client

    # The failed up created nothing in the namespace: start from a clean state.
    project.run("refresh", "--yes")
    project.config_set("create_namespace", "false")
    project.up()
    core = client.CoreV1Api(shared)
    labels = _namespace(shared).metadata.labels
    assert not any(k.startswith("pod-security.kubernetes.io") for k in labels), labels
    policies = client.NetworkingV1Api(shared).list_namespaced_network_policy(SHARED).items
    assert policies, "the stack's own pods get their policies"
    for policy in policies:
        # None of them selects every pod of the namespace: the other team's are untouched.
        assert policy.spec.pod_selector.match_labels, policy.metadata.name
    assert core.read_namespaced_config_map("theirs", SHARED).data == {"k": "v"}

    project.run("destroy", "--yes", "--skip-preview")
    assert _namespace(shared).status.phase == "Active"
    assert core.read_namespaced_config_map("theirs", SHARED).data == {"k": "v"}
    left = [c.metadata.name for c in core.list_namespaced_config_map(SHARED).items]
    assert sorted(left) == ["kube-root-ca.crt", "theirs"]
