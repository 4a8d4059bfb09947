"""cube-agent fetching its shard from S3 (moto) and HDFS (MiniDFSCluster), as real processes.

A published version is fetched, verified and loaded; a shard file damaged in storage is
refused with a checksum error and nothing is loaded.
"""

from __future__ import annotations

import base64
import sys
import uuid

import numpy as np
import pytest
from elasticctr_common.ports import free_port
from elasticctr_common.storage import open_store
from elasticctr_cube.builder import build, publish
from elasticctr_cube.httpjson import call
from elasticctr_cube.manifest import layout_dir
from elasticctr_cube.shardfile import read_shard_file

from tests.support.cube import (
    http_ok,
    model_table,
    server_call,
    start_server,
    wait_until,
    write_model_version,
)

pytestmark = pytest.mark.slow


@pytest.fixture(params=["s3", "hdfs"])
def cube_uri(request) -> str:
    if request.param == "s3":
        request.getfixturevalue("s3_env")
        bucket = request.getfixturevalue("s3_server").create_bucket()
        return f"s3://{bucket}/cube"
    request.getfixturevalue("hdfs_env")
    return f"{request.getfixturevalue('hdfs_cluster').url}/cube-{uuid.uuid4().hex[:8]}"


def prepare(agent_url: str, version: int) -> dict:
    code, answer = call("POST", f"{agent_url}/agent/prepare", {"version": version})
    assert code == 202, answer

    def ended():
        state = call("GET", f"{agent_url}/agent/status")[1]["prepares"].get(str(version), {})
        return state if state.get("state") in ("ready", "failed") else None

    return wait_until(ended, 60, f"the prepare of version {version}")


def test_agent_fetches_verifies_and_loads_from_storage(cube_uri, procs, cube_server_bin, tmp_path):
    store = open_store(cube_uri).child(layout_dir(2))  # the agent serves shard 1 of 2
    for version in (1, 2):
        keys, values = model_table(version, n=600)
        uri = write_model_version(tmp_path / "models", version, keys, values)
        manifest = build(uri, tmp_path / f"out{version}", version=version, shard_num=2)
        publish(tmp_path / f"out{version}", manifest, store)
    damaged = bytearray((tmp_path / "out2" / "shard-1.cube").read_bytes())
    damaged[-5] ^= 0x01
    (tmp_path / "damaged").write_bytes(bytes(damaged))
    store.child("2").upload(tmp_path / "damaged", "shard-1.cube")

    server_port, agent_port = free_port(), free_port()
    control_port = start_server(procs, "server", server_port, 1, 2)
    procs.start("agent", [
        sys.executable, "-m", "elasticctr_cube", "agent", "--shard", "1", "--shard-num", "2",
        "--cube-uri", cube_uri, "--server", f"http://127.0.0.1:{control_port}",
        "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", str(agent_port),
    ])  # fmt: skip
    agent_url = f"http://127.0.0.1:{agent_port}"
    wait_until(lambda: http_ok(f"{agent_url}/healthz"), 30, "the agent")

    assert prepare(agent_url, 1)["state"] == "ready", procs.log("agent")
    assert call("POST", f"{agent_url}/agent/switch", {"version": 1})[0] == 200
    _, shard_keys, shard_values = read_shard_file(tmp_path / "out1" / "shard-1.cube")
    code, answer = server_call(
        server_port, "POST", "/DictService/seek", {"keys": [int(shard_keys[3])]}
    )
    assert code == 200 and answer["version"] == 1
    got = np.frombuffer(base64.b64decode(answer["values"][0]["value"]), "<f4")
    np.testing.assert_array_equal(got, shard_values[3])

    failed = prepare(agent_url, 2)
    assert failed["state"] == "failed" and "corrupt: sha256" in failed["error"], failed
    status = server_call(server_port, "GET", "/control/status")[1]
    assert (status["cur_version"], status["bg_version"]) == (1, None)
    assert not (tmp_path / "data" / "2").exists()
