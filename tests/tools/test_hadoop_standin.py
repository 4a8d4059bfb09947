"""The Hadoop stand-in serves components/hdfs.py's interface: its namenode and datanode
commands and rendered conf files, run from the image in a private containerd (host
network, read-only root, uid 1000), register a datanode, write and read a file with
`hdfs dfs`, and a restarted namenode keeps its namespace (formatted once)."""

from __future__ import annotations

import os
import time
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest
from elasticctr_common.ports import free_port

from components.hdfs import (
    CONF_DIR,
    DATA_MOUNT,
    DATANODE_COMMAND,
    LOG_DIR,
    NAMENODE_COMMAND,
    hadoop_conf,
    site_xml,
)
from tests.support.containerd import PrivateContainerd
from tests.tools.conftest import images_tool, require_builder

pytestmark = pytest.mark.cluster

ENV = {"HADOOP_CONF_DIR": CONF_DIR, "HADOOP_LOG_DIR": LOG_DIR}


def on_loopback(conf: dict[str, str], ports: dict[str, int]) -> dict[str, str]:
    """The component's files, with addresses on this host's free ports (host network)."""

    def props(xml: str) -> dict[str, str]:
        root = ET.fromstring(xml)
        return {p.findtext("name", ""): p.findtext("value", "") for p in root.iter("property")}

    core = props(conf["core-site.xml"]) | {"fs.defaultFS": f"hdfs://127.0.0.1:{ports['rpc']}"}
    hdfs = props(conf["hdfs-site.xml"]) | {
        "dfs.namenode.http-address": f"127.0.0.1:{ports['http']}",
        "dfs.datanode.address": f"127.0.0.1:{ports['data']}",
        "dfs.datanode.http.address": f"127.0.0.1:{ports['dn-http']}",
        "dfs.datanode.ipc.address": f"127.0.0.1:{ports['ipc']}",
    }
    return {**conf, "core-site.xml": site_xml(core), "hdfs-site.xml": site_xml(hdfs)}


class Hdfs:
    def __init__(self, containerd: PrivateContainerd, image: str, base: Path) -> None:
        self.containerd, self.image = containerd, image
        self.ports = {k: free_port() for k in ("rpc", "http", "data", "dn-http", "ipc")}
        self.conf = base / "conf"
        self.conf.mkdir()
        for name, text in on_loopback(hadoop_conf(replication=1), self.ports).items():
            (self.conf / name).write_text(text)
        self.started: list[str] = []
        self.dirs = {}
        for role in ("namenode", "datanode", "namenode-tmp", "datanode-tmp", "client-tmp", "io"):
            self.dirs[role] = base / role
            self.dirs[role].mkdir()
            os.chown(self.dirs[role], 1000, 1000)

    def mounts(self, role: str) -> dict[str, tuple[Path, bool]]:
        mounts = {CONF_DIR: (self.conf, False), "/tmp": (self.dirs[f"{role}-tmp"], True)}
        if role == "client":
            mounts["/io"] = (self.dirs["io"], True)
        else:
            mounts[DATA_MOUNT] = (self.dirs[role], True)
        return mounts

    def start(self, role: str, command: list[str], name: str = "") -> Path:
        """Start `role` as container `name` (default: the role), logging to its own file."""
        name = name or role
        self.started.append(name)
        return self.containerd.start(name, self.image, command, env=ENV, mounts=self.mounts(role))

    def try_hdfs(self, *args: str) -> tuple[int, str]:
        """`hdfs ARGS` in a client container: exit status, and stdout (or stderr's tail)."""
        result = self.containerd.run(
            f"client-{time.monotonic_ns()}", self.image, ["hdfs", *args],
            env=ENV, mounts=self.mounts("client"), timeout=120,
        )  # fmt: skip
        return result.returncode, result.stdout if result.returncode == 0 else result.stderr[-3000:]

    def hdfs(self, *args: str) -> str:
        status, out = self.try_hdfs(*args)
        assert status == 0, out
        return out

    def wait_http(self, log: Path, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.ports['http']}/", timeout=2
                ) as page:
                    return int(page.status)
            except OSError:
                time.sleep(1)
        raise AssertionError(f"namenode HTTP never answered:\n{log.read_text()[-3000:]}")

    def wait_live_datanodes(self, count: int, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        report = ""
        while time.monotonic() < deadline:
            # the namenode's HTTP server starts before its RPC server: refused at first
            status, report = self.try_hdfs("dfsadmin", "-report")
            if status == 0 and f"Live datanodes ({count})" in report:
                return report
            time.sleep(2)
        raise AssertionError(f"no {count} live datanodes:\n{report}")


@pytest.fixture(scope="module")
def hadoop_image(private_containerd: PrivateContainerd) -> str:
    require_builder()
    tool = images_tool()
    (result,) = [r for r in tool.build(tool.catalog(), ["hadoop"]) if r.name == "hadoop"]
    assert result.outcome in tool.READY, result.detail
    tool.import_into(private_containerd.address, ["hadoop"], private_containerd.namespace)
    return str(result.reference)


@pytest.fixture
def hdfs(
    hadoop_image: str, private_containerd: PrivateContainerd, tmp_path: Path
) -> Iterator[Hdfs]:
    cluster = Hdfs(private_containerd, hadoop_image, tmp_path)
    yield cluster
    for name in reversed(cluster.started):
        private_containerd.stop(name)


def test_namenode_and_datanode_from_the_stand_in(hdfs: Hdfs) -> None:
    namenode_log = hdfs.start("namenode", NAMENODE_COMMAND)
    assert hdfs.wait_http(namenode_log) == 200  # the component's readiness probe: GET /
    formatted = hdfs.dirs["namenode"] / "namenode" / "current" / "VERSION"
    assert formatted.is_file(), namenode_log.read_text()[-5000:]
    datanode_log = hdfs.start("datanode", DATANODE_COMMAND)
    report = hdfs.wait_live_datanodes(1)
    assert "127.0.0.1" in report

    payload = "1 0 101:1 202:2\n" * 1000
    (hdfs.dirs["io"] / "part-0").write_text(payload)
    hdfs.hdfs("dfs", "-mkdir", "-p", "/train_data/20191221/00")
    hdfs.hdfs("dfs", "-put", "/io/part-0", "/train_data/20191221/00/part-0")
    assert hdfs.hdfs("dfs", "-cat", "/train_data/20191221/00/part-0") == payload
    assert "Formatting using clusterid" in namenode_log.read_text()
    assert "DataNode" in datanode_log.read_text()  # logs on stderr, in the container's log

    # A restart runs the same command: the name dir is formatted, so it is not again.
    hdfs.containerd.stop("datanode")
    hdfs.containerd.stop("namenode")
    restarted = hdfs.start("namenode", NAMENODE_COMMAND, name="namenode-again")
    hdfs.wait_http(restarted)
    assert "Formatting using clusterid" not in restarted.read_text()
    hdfs.start("datanode", DATANODE_COMMAND, name="datanode-again")
    hdfs.wait_live_datanodes(1)
    assert hdfs.hdfs("dfs", "-cat", "/train_data/20191221/00/part-0") == payload
