"""The end of a cluster session: `pulumi destroy` leaves nothing of the stack, and taking the
cluster down leaves the host as it was before it came up (tests/conftest.py runs these two
after every other test on the cluster, in this order)."""

from __future__ import annotations

import pytest

from tests.support.cluster import ClusterSession, LocalStack, link_exists, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.mark.runs_last("destroys_the_stack")
def test_destroy_leaves_nothing_of_the_stack(local_stack: LocalStack) -> None:
    from kubernetes import client

    local_stack.destroy()
    api = local_stack.api()
    core = client.CoreV1Api(api)

    def namespace_gone() -> bool:
        return local_stack.NAMESPACE not in {n.metadata.name for n in core.list_namespace().items}

    wait_for(namespace_gone, 300, f"namespace {local_stack.NAMESPACE} deleted")
    ours = "app.kubernetes.io/part-of=elasticctr"
    assert core.list_pod_for_all_namespaces(label_selector=ours).items == []
    assert core.list_service_for_all_namespaces(label_selector=ours).items == []
    # Volcano, installed by the stack's Helm release, is gone with it: its pods and Services,
    # and its custom resources (the chart's CRDs).
    assert core.list_namespaced_pod("volcano-system").items == []
    assert core.list_namespaced_service("volcano-system").items == []
    crds = client.ApiextensionsV1Api(api).list_custom_resource_definition().items
    assert [c.metadata.name for c in crds if c.spec.group.endswith("volcano.sh")] == []

    # Every volume the stack's claims got is reclaimed (deleted with its directory).
    def volumes_reclaimed() -> bool:
        return core.list_persistent_volume().items == []

    wait_for(volumes_reclaimed, 120, "persistent volumes deleted")
    print(f"\n[local stack] timings: {local_stack.timings}")


@pytest.mark.runs_last("restores_the_host")
def test_down_restores_the_host(local_cluster: ClusterSession) -> None:
    problems = local_cluster.stop()
    assert problems == [], problems
    assert not link_exists(), "the cni0 bridge is left"
    changes = local_cluster.host_changes()
    assert changes == [], "\n".join(changes)
    print(f"\n[cluster] timings: {local_cluster.timings}")
