"""HDFS: namenode + datanodes in the cluster, configured through HADOOP_CONF_DIR and
explicit commands (an interface apache/hadoop and the Maven-built stand-in both serve),
formatted once, volumes kept; or external."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from components.hdfs import CONF_DIR, NAMENODE_COMMAND, Hdfs, HdfsArgs, hadoop_conf, site_xml
from infra.config import HdfsConfig
from tests.support.components import env_of, run_component

# The config's defaults (infra/config.py: the one place they are written).
SIZES = HdfsConfig().model_dump(include={"namenode_storage", "datanode_storage", "cpu", "mem"})


def in_cluster(datanodes: int = 3, replication: int = 2):
    return run_component(
        lambda t: Hdfs(
            "hdfs",
            HdfsArgs(
                target=t,
                mode="in-cluster",
                image="apache/hadoop:3.4.1",
                address="",
                datanodes=datanodes,
                replication=replication,
                clients=("trainer",),
                **SIZES,
            ),
        )
    )


def properties(xml: str) -> dict[str, str]:
    root = ET.fromstring(xml)
    return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}


def stateful_sets() -> dict[str, dict[str, Any]]:
    graph = in_cluster()
    return {
        s.inputs["metadata"]["name"]: s.inputs["spec"]
        for s in graph.of_type("kubernetes:apps/v1:StatefulSet")
    }


def test_site_files_are_rendered_into_a_config_map() -> None:
    graph = in_cluster()
    (config_map,) = graph.of_type("kubernetes:core/v1:ConfigMap")
    data = config_map.inputs["data"]
    assert set(data) == {"core-site.xml", "hdfs-site.xml", "log4j.properties"}
    assert properties(data["core-site.xml"])["fs.defaultFS"] == "hdfs://hdfs-namenode:8020"
    hdfs = properties(data["hdfs-site.xml"])
    assert hdfs["dfs.replication"] == "2"
    assert hdfs["dfs.namenode.name.dir"] == "file:///data/namenode"
    assert hdfs["dfs.datanode.data.dir"] == "file:///data/datanode"
    assert hdfs["dfs.namenode.datanode.registration.ip-hostname-check"] == "false"
    assert "log4j.appender.console.target=System.err" in data["log4j.properties"]


def test_every_role_reads_the_conf_dir_and_writes_only_its_volume_and_tmp() -> None:
    sets = stateful_sets()
    assert (sets["hdfs-namenode"]["replicas"], sets["hdfs-datanode"]["replicas"]) == (1, 3)
    for spec in sets.values():
        assert spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        env = env_of(container)
        assert env["HADOOP_CONF_DIR"] == CONF_DIR
        assert env["HADOOP_LOG_DIR"].startswith("/tmp/")
        # No apache/hadoop starter conventions: they would not reach the stand-in.
        assert not [name for name in env if ".XML_" in name or name == "ENSURE_NAMENODE_DIR"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert mounts[CONF_DIR]["readOnly"] is True
        assert set(mounts) == {CONF_DIR, "/data", "/tmp"}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["hadoop-conf"]["configMap"]["name"] == "hdfs-conf"
        assert spec["template"]["metadata"]["annotations"]["elasticctr.io/config-sha256"]


def test_namenode_formats_only_an_unformatted_name_dir_then_runs_in_the_foreground() -> None:
    sets = stateful_sets()
    namenode = sets["hdfs-namenode"]["template"]["spec"]["containers"][0]["command"]
    assert namenode[:2] == ["/bin/sh", "-c"]
    assert 'if [ ! -d "/data/namenode/current" ]' in namenode[2]
    assert "hdfs namenode -format -nonInteractive" in namenode[2]
    assert namenode[2].splitlines()[-1] == "exec hdfs namenode"
    datanode = sets["hdfs-datanode"]["template"]["spec"]["containers"][0]["command"]
    assert datanode == ["hdfs", "datanode"]


@pytest.mark.parametrize("formatted", [False, True])
def test_namenode_script_formats_once(tmp_path: Path, formatted: bool) -> None:
    """The start-up script itself, with a fake `hdfs` that records its calls."""
    (name_dir := tmp_path / "data" / "namenode").mkdir(parents=True)
    if formatted:
        (name_dir / "current").mkdir()
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "hdfs"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    fake.chmod(0o755)
    script = NAMENODE_COMMAND[2].replace("/data/namenode", str(name_dir))
    subprocess.run(
        ["/bin/sh", "-c", script], check=True, env={"PATH": f"{fake.parent}:/bin:/usr/bin"}
    )
    expected = ["namenode"] if formatted else ["namenode -format -nonInteractive", "namenode"]
    assert calls.read_text().splitlines() == expected


def test_site_xml_escapes_values() -> None:
    xml = site_xml({"a.b": "x<y&z"})
    assert properties(xml) == {"a.b": "x<y&z"}
    assert properties(hadoop_conf(1)["hdfs-site.xml"])["dfs.replication"] == "1"


def test_in_cluster_address() -> None:
    outputs = in_cluster().one("elasticctr:hdfs:Hdfs").outputs
    assert outputs["address"] == "hdfs://hdfs-namenode.test-ns.svc.cluster.local:8020"
    assert outputs["web_url"] == "http://hdfs-namenode.test-ns.svc.cluster.local:9870"


def test_external_address_creates_nothing() -> None:
    graph = run_component(
        lambda t: Hdfs(
            "hdfs",
            HdfsArgs(
                target=t,
                mode="external",
                address="hdfs://nn.corp:9000/",
                datanodes=1,
                replication=1,
                clients=("trainer",),
                **SIZES,
            ),
        )
    )
    assert [r.type for r in graph.resources if r.custom] == ["pulumi:providers:kubernetes"]
    assert graph.component_outputs("elasticctr:hdfs:Hdfs")["address"] == "hdfs://nn.corp:9000"


def test_replication_above_datanodes_fails() -> None:
    with pytest.raises(ValueError, match=r"replication must be from 1 to datanodes \(1\), got 2"):
        in_cluster(datanodes=1, replication=2)
