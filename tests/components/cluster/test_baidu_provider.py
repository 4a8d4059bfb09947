"""The Baidu dynamic providers' create/read/update/delete against a local CCE v2 / CCR fake
that checks the BCE v1 signature of every request (tests/components/cluster/baidu_fake.py).

Under Pulumi's mocks a dynamic resource is a plain resource: its provider class is what
runs against the cloud, so the tests call it directly, as the Pulumi engine would.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from components.cluster.baidu.cce import (
    _ClusterProvider,
    _InstanceGroupProvider,
    _KubeconfigProvider,
)
from components.cluster.baidu.ccr import _ProjectProvider
from components.cluster.baidu.openapi import ACCESS_KEY_ENV, SECRET_KEY_ENV, ApiError, OpenApi
from tests.components.cluster.baidu_fake import ACCESS_KEY, SECRET_KEY, FakeBaidu, serve

POLL = 0.01


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeBaidu]:
    monkeypatch.setenv(ACCESS_KEY_ENV, ACCESS_KEY)
    monkeypatch.setenv(SECRET_KEY_ENV, SECRET_KEY)
    state = FakeBaidu()
    server = serve(state)
    yield state
    server.shutdown()
    server.server_close()
    # Every request the providers sent carried a valid signature.
    assert all(s.signature_ok for s in state.seen), [
        (s.method, s.path) for s in state.seen if not s.signature_ok
    ]


def cluster_props(fake: FakeBaidu, **overrides: Any) -> dict[str, Any]:
    props = {
        "endpoint": fake.url,
        "cluster_name": "elasticctr-test",
        "k8s_version": "1.30.1",
        "vpc_id": "vpc-test1",
        "subnet_id": "sbn-test1",
        "master_flavor": "l50",
        "timeout_seconds": 5,
        "poll_seconds": POLL,
        "cluster_id": None,
        "phase": None,
    }
    return {**props, **overrides}


def running_cluster(fake: FakeBaidu) -> str:
    return _ClusterProvider().create(cluster_props(fake)).id


def group_props(fake: FakeBaidu, cluster_id: str, **overrides: Any) -> dict[str, Any]:
    props = {
        "endpoint": fake.url,
        "cluster_id": cluster_id,
        "name": "training",
        "instance_type": "bcc.g5.c8m32",
        "replicas": 2,
        "min_replicas": 1,
        "max_replicas": 4,
        "disk_gb": 100,
        "vpc_id": "vpc-test1",
        "subnet_id": "sbn-test1",
        "ssh_key_id": "k-test1",
        "labels": {"elasticctr.io/pool": "training"},
        "timeout_seconds": 5,
        "poll_seconds": POLL,
        "instance_group_id": None,
        "ready_replicas": None,
    }
    return {**props, **overrides}


# ---------------------------------------------------------------- cluster


def test_cluster_create_waits_until_running(fake: FakeBaidu) -> None:
    fake.polls_to_run = 4  # slow creation: three polls see "provisioning"
    result = _ClusterProvider().create(cluster_props(fake))
    assert result.id.startswith("cce-")
    assert result.outs is not None and result.outs["phase"] == "running"
    assert result.outs["cluster_id"] == result.id
    assert len(fake.calls("GET", rf"^/v2/cluster/{result.id}$")) == 4
    sent = fake.calls("POST", r"^/v2/cluster$")[0].body["cluster"]
    assert sent["masterConfig"]["masterType"] == "managed"
    assert sent["masterConfig"]["exposedPublic"] is True
    assert sent["masterConfig"]["managedClusterMasterOption"] == {"masterFlavor": "l50"}
    assert sent["vpcID"] == "vpc-test1" and sent["k8sVersion"] == "1.30.1"


def test_cluster_create_failure_reports_the_api_error_text_and_cleans_up(fake: FakeBaidu) -> None:
    fake.fail_cluster_with = "BLB quota exceeded in zone A"
    with pytest.raises(RuntimeError) as failure:
        _ClusterProvider().create(cluster_props(fake))
    message = str(failure.value)
    assert "create_failed" in message and "BLB quota exceeded in zone A" in message
    assert "is being deleted again" in message
    (deleted,) = fake.calls("DELETE", r"^/v2/cluster/")
    assert deleted.query == {"deleteResource": "true", "deleteCDSSnapshot": "true"}


def test_cluster_create_times_out_and_deletes_what_it_started(fake: FakeBaidu) -> None:
    fake.never_ready = True
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"to be running: still not done after 0.2s"):
        _ClusterProvider().create(cluster_props(fake, timeout_seconds=0.2))
    assert time.monotonic() - started < 3
    assert len(fake.calls("DELETE", r"^/v2/cluster/")) == 1


def test_an_error_reply_is_reported_with_code_message_and_request_id(fake: FakeBaidu) -> None:
    fake.inject("POST /v2/cluster", 400, "VpcNotExist", "vpc vpc-test1 does not exist")
    with pytest.raises(ApiError) as failure:
        _ClusterProvider().create(cluster_props(fake))
    assert str(failure.value) == (
        "POST /v2/cluster: HTTP 400 VpcNotExist: vpc vpc-test1 does not exist "
        "(requestId req-injected)"
    )
    assert fake.clusters == {}


def test_cluster_read_reports_drift_and_a_deleted_cluster(fake: FakeBaidu) -> None:
    provider = _ClusterProvider()
    created = provider.create(cluster_props(fake))
    assert created.outs is not None
    # Someone upgraded the cluster in the console.
    fake.clusters[created.id]["spec"]["k8sVersion"] = "1.31.1"
    read = provider.read(created.id, created.outs)
    assert read.id == created.id and read.outs is not None
    assert read.outs["k8s_version"] == "1.31.1" and read.outs["phase"] == "running"
    # The refreshed state now differs from the program's inputs: a replacement.
    diff = provider.diff(created.id, read.outs, cluster_props(fake))
    assert diff.changes and diff.replaces == ["k8s_version"]
    del fake.clusters[created.id]
    assert provider.read(created.id, created.outs).id == ""


def test_cluster_diff_replaces_on_spec_changes_and_updates_settings_in_place(
    fake: FakeBaidu,
) -> None:
    provider = _ClusterProvider()
    old = cluster_props(fake, cluster_id="cce-1", phase="running")
    assert not provider.diff("cce-1", old, cluster_props(fake)).changes
    renamed = provider.diff("cce-1", old, cluster_props(fake, master_flavor="l200"))
    assert renamed.replaces == ["master_flavor"] and renamed.delete_before_replace
    slower = provider.diff("cce-1", old, cluster_props(fake, timeout_seconds=99))
    assert slower.changes and not slower.replaces
    updated = provider.update("cce-1", old, cluster_props(fake, timeout_seconds=99))
    assert updated.outs is not None and updated.outs["timeout_seconds"] == 99
    assert updated.outs["cluster_id"] == "cce-1"


def test_cluster_delete_waits_until_the_api_forgets_it(fake: FakeBaidu) -> None:
    provider = _ClusterProvider()
    created = provider.create(cluster_props(fake))
    assert created.outs is not None
    fake.polls_to_delete = 3
    provider.delete(created.id, created.outs)
    assert created.id not in fake.clusters
    gets_after_delete = [
        s for s in fake.seen[fake.seen.index(fake.calls("DELETE")[0]) :] if s.method == "GET"
    ]
    assert len(gets_after_delete) == 4  # three "deleting", then 404
    provider.delete(created.id, created.outs)  # already gone: nothing to do


def test_cluster_delete_times_out(fake: FakeBaidu) -> None:
    provider = _ClusterProvider()
    created = provider.create(cluster_props(fake))
    assert created.outs is not None
    fake.polls_to_delete = 10**6
    with pytest.raises(Exception, match="to be deleted: still not done"):
        provider.delete(created.id, {**created.outs, "timeout_seconds": 0.1})


# ---------------------------------------------------------------- instance groups


def test_instance_group_create_waits_for_ready_nodes(fake: FakeBaidu) -> None:
    cluster_id = running_cluster(fake)
    fake.polls_to_ready = 3
    result = _InstanceGroupProvider().create(group_props(fake, cluster_id))
    assert result.outs is not None and result.outs["ready_replicas"] == 2
    sent = fake.calls("POST", "/instancegroup$")[0].body
    assert sent["replicas"] == 2
    assert sent["instanceTemplate"]["instanceResource"]["machineSpec"] == "bcc.g5.c8m32"
    assert sent["instanceTemplate"]["labels"] == {"elasticctr.io/pool": "training"}
    assert sent["clusterAutoscalerSpec"] == {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 4,
        "scalingGroupPriority": 1,
    }


def test_scaling_an_instance_group_is_an_update_not_a_replacement(fake: FakeBaidu) -> None:
    provider = _InstanceGroupProvider()
    cluster_id = running_cluster(fake)
    created = provider.create(group_props(fake, cluster_id))
    assert created.outs is not None
    scaled = group_props(fake, cluster_id, replicas=4, max_replicas=6)
    diff = provider.diff(created.id, created.outs, scaled)
    assert diff.changes and diff.replaces == []
    posts_before = len(fake.calls("POST"))
    updated = provider.update(created.id, created.outs, scaled)
    assert updated.outs is not None and updated.outs["ready_replicas"] == 4
    assert updated.outs["instance_group_id"] == created.id
    (replicas,) = fake.calls("PUT", "/replicas$")
    assert replicas.body == {"replicas": 4, "deleteInstance": True}
    (autoscaler,) = fake.calls("PUT", "/autoscaler$")
    assert autoscaler.body["maxReplicas"] == 6
    assert len(fake.calls("POST")) == posts_before and not fake.calls("DELETE")
    # A new machine spec cannot be applied to running nodes: that one replaces.
    bigger = provider.diff(created.id, updated.outs, {**scaled, "instance_type": "bcc.g5.c16m64"})
    assert bigger.replaces == ["instance_type"]


def test_instance_group_read_and_delete(fake: FakeBaidu) -> None:
    provider = _InstanceGroupProvider()
    cluster_id = running_cluster(fake)
    created = provider.create(group_props(fake, cluster_id))
    assert created.outs is not None
    fake.groups[created.id]["spec"]["replicas"] = 3  # scaled by hand in the console
    read = provider.read(created.id, created.outs)
    assert read.outs is not None and read.outs["replicas"] == 3
    provider.delete(created.id, created.outs)
    assert created.id not in fake.groups
    (deleted,) = fake.calls("DELETE", "/instancegroup/")
    assert deleted.query == {"deleteInstances": "true", "releaseAllResources": "true"}
    assert provider.read(created.id, created.outs).id == ""


def test_instance_group_on_a_missing_cluster_reports_the_api_error(fake: FakeBaidu) -> None:
    with pytest.raises(ApiError, match="HTTP 409 ClusterNotRunning: cluster cce-nope"):
        _InstanceGroupProvider().create(group_props(fake, "cce-nope"))


# ---------------------------------------------------------------- kubeconfig, CCR, signing


def test_kubeconfig_is_fetched_for_the_public_endpoint(fake: FakeBaidu) -> None:
    cluster_id = running_cluster(fake)
    provider = _KubeconfigProvider()
    props = {"endpoint": fake.url, "cluster_id": cluster_id, "access": "public"}
    created = provider.create(props)
    assert created.outs is not None
    assert created.outs["kubeconfig"] == f"apiVersion: v1\n# {cluster_id} public\n"
    assert provider.read(created.id, created.outs).id == created.id
    assert provider.diff(created.id, created.outs, {**props, "cluster_id": "cce-2"}).replaces == [
        "cluster_id"
    ]


def test_ccr_project_lifecycle(fake: FakeBaidu) -> None:
    provider = _ProjectProvider()
    props = {
        "endpoint": fake.url,
        "instance_id": "ccr-inst1",
        "project": "elasticctr",
        "public": True,
        "registry": None,
    }
    created = provider.create(props)
    assert created.outs is not None
    assert created.outs["registry"] == "ccr-inst1-pub.cnc.bj.baidubce.com/elasticctr"
    assert fake.projects["ccr-inst1/elasticctr"]["public"] == "true"
    fake.projects["ccr-inst1/elasticctr"]["public"] = "false"  # made private in the console
    read = provider.read(created.id, created.outs)
    assert read.outs is not None and read.outs["public"] is False
    assert provider.diff(created.id, read.outs, props).replaces == ["public"]
    provider.delete(created.id, created.outs)
    assert fake.projects == {}
    assert provider.read(created.id, created.outs).id == ""


def test_a_wrong_secret_key_is_refused_by_the_signature_check(
    fake: FakeBaidu, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_KEY_ENV, "not-the-secret")
    with pytest.raises(ApiError, match="HTTP 401 SignatureDoesNotMatch: signature does not match"):
        OpenApi(fake.url).call("GET", "/v2/cluster/cce-1")
    fake.seen.clear()
    monkeypatch.setenv(SECRET_KEY_ENV, SECRET_KEY)
    OpenApi(fake.url).call("GET", "/v1/instances/ccr-1", query={"a b": "c/d", "z": ""})


def test_missing_credentials_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ACCESS_KEY_ENV, raising=False)
    with pytest.raises(RuntimeError, match="set BAIDUCLOUD_ACCESS_KEY and BAIDUCLOUD_SECRET_KEY"):
        OpenApi("http://127.0.0.1:9").call("GET", "/v2/cluster/x")
