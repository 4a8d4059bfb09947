"""HDFS: namenode + datanodes in the cluster, formatted once, volumes kept; or external."""

from __future__ import annotations

import pytest

from components.hdfs import Hdfs, HdfsArgs
from tests.support.components import env_of, run_component


def in_cluster(datanodes: int = 3, replication: int = 2):  # type: ignore[no-untyped-def]
    return run_component(
        lambda t: Hdfs(
            "hdfs",
            HdfsArgs(
                target=t,
                mode="in-cluster",
                image="apache/hadoop:3.4.1",
                datanodes=datanodes,
                replication=replication,
            ),
        )
    )


def test_in_cluster_namenode_and_datanodes() -> None:
    graph = in_cluster()
    sets = {
        s.inputs["metadata"]["name"]: s.inputs["spec"]
        for s in graph.of_type("kubernetes:apps/v1:StatefulSet")
    }
    assert (sets["hdfs-namenode"]["replicas"], sets["hdfs-datanode"]["replicas"]) == (1, 3)
    for spec in sets.values():
        assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
        container = spec["template"]["spec"]["containers"][0]
        env = env_of(container)
        mount = container["volumeMounts"][0]["mountPath"]
        # Formatting happens once: the marker directory is inside the volume, not the mount point.
        assert env["ENSURE_NAMENODE_DIR"].startswith(mount + "/")
        assert env["HDFS-SITE.XML_dfs.replication"] == "2"
        assert env["CORE-SITE.XML_fs.defaultFS"] == "hdfs://hdfs-namenode:8020"
    assert sets["hdfs-namenode"]["template"]["spec"]["containers"][0]["command"] == [
        "hdfs",
        "namenode",
    ]
    outputs = graph.one("elasticctr:hdfs:Hdfs").outputs
    assert outputs["address"] == "hdfs://hdfs-namenode.test-ns.svc.cluster.local:8020"


def test_external_address_creates_nothing() -> None:
    graph = run_component(
        lambda t: Hdfs("hdfs", HdfsArgs(target=t, mode="external", address="hdfs://nn.corp:9000/"))
    )
    assert [r.type for r in graph.resources if r.custom] == ["pulumi:providers:kubernetes"]
    assert graph.one("elasticctr:hdfs:Hdfs").outputs["address"] == "hdfs://nn.corp:9000"


def test_replication_above_datanodes_fails() -> None:
    with pytest.raises(ValueError, match=r"replication must be from 1 to datanodes \(1\), got 2"):
        in_cluster(datanodes=1, replication=2)
