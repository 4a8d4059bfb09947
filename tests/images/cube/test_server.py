"""cube-server (native) as a real process: Paddle-compatible JSON seek, control, bad input."""

from __future__ import annotations

import base64
import socket
import sys
import time
from typing import Any

import numpy as np
import pytest
from elasticctr_common.cube.client import (
    CubeClient,
    CubeRequestError,
    CubeUnavailable,
    CubeVersionError,
)
from elasticctr_common.cube.conf import CubeConf, CubeNode
from elasticctr_common.ports import free_port
from elasticctr_cube.httpjson import HttpCallError, call
from elasticctr_cube.shardfile import write_shard_file

from tests.support.cube import (
    control_call,
    http_ok,
    load_version,
    model_table,
    server_call,
    start_server,
    wait_until,
)

MISSING = 4294967295  # Paddle's cube answers status -1 as uint32 for a missing key


@pytest.fixture
def shard_files(tmp_path):
    """Shard 0 of 2 for versions 1..3 (only keys k % 2 == 0)."""
    files: dict[int | str, Any] = {}
    for version in (1, 2, 3):
        keys, values = model_table(version, n=400)
        mine = keys % 2 == 0
        files[version] = (keys[mine], values[mine])
        path = tmp_path / f"v{version}.cube"
        write_shard_file(
            path, version=version, shard=0, shard_num=2, keys=keys[mine], values=values[mine]
        )
        files[f"path{version}"] = path
    return files


@pytest.fixture
def server(procs, cube_server_bin):
    port = free_port()
    start_server(procs, "server", port, 0, 2, "--max-keys", "500")
    return port


def client_for(port: int, **kwargs) -> CubeClient:
    return CubeClient(CubeConf("d", 1, (CubeNode("127.0.0.1", port),)), **kwargs)


def test_not_ready_until_a_version_is_switched_in(server):
    assert server_call(server, "GET", "/readyz")[0] == 503
    code, answer = server_call(server, "POST", "/DictService/seek", {"keys": [2]})
    assert code == 503 and "no version" in answer["error"]
    with pytest.raises(CubeUnavailable, match="no version"), client_for(server, timeout=0.3) as c:
        c.seek([2])


def test_json_seek_answers_like_paddles_cube(server, shard_files):
    status = load_version(server, 1, shard_files["path1"])
    assert status["bg_version"] == 1 and status["cur_version"] is None
    assert control_call(server, "POST", "/control/switch", {"version": "1"})[0] == 200
    assert server_call(server, "GET", "/readyz")[1] == {"ready": True, "version": 1}
    keys, values = shard_files[1]
    asked = [int(keys[0]), 4, int(keys[-1]), str(int(keys[1]))]  # 4 is not in the table
    code, answer = server_call(server, "POST", "/DictService/seek", {"keys": asked})
    assert code == 200 and answer["version"] == 1
    got = answer["values"]
    assert [v["status"] for v in got] == [0, MISSING, 0, 0] and got[1]["value"] == ""
    for i, row in ((0, 0), (2, -1), (3, 1)):
        decoded = np.frombuffer(base64.b64decode(got[i]["value"]), "<f4")
        np.testing.assert_array_equal(decoded, values[row])


def test_two_versions_held_switch_and_pinning(server, shard_files):
    keys, _ = shard_files[1]
    load_version(server, 1, shard_files["path1"])
    control_call(server, "POST", "/control/switch", {"version": 1})
    load_version(server, 2, shard_files["path2"])
    with client_for(server) as c:
        assert c.seek(keys).version == 1
        pinned = c.seek(keys, version=2)
        assert pinned.version == 2 and (pinned.values[:, 0] == 2).all()
        assert (
            control_call(server, "POST", "/control/switch", {"version": 2})[1]["result"]
            == "switched"
        )
        assert c.seek(keys).version == 2
        assert c.seek(keys, version=1).version == 1  # the old version stays held
        assert control_call(server, "POST", "/control/unload", {"version": 1})[1] == {
            "result": "unloaded"
        }
        with pytest.raises(CubeVersionError, match="version 1 is not held"):
            c.seek(keys, version=1)
        code, answer = server_call(server, "POST", "/DictService/seek", {"keys": [0], "version": 1})
        assert code == 409 and "current 2, background none" in answer["error"]
    code, answer = control_call(server, "POST", "/control/unload", {"version": 2})
    assert code == 409 and "is current" in answer["error"]


def test_bad_loads_leave_the_serving_version_unchanged(server, shard_files, tmp_path):
    keys, _ = shard_files[1]
    load_version(server, 1, shard_files["path1"])
    control_call(server, "POST", "/control/switch", {"version": 1})
    data = shard_files["path2"].read_bytes()
    bad = tmp_path / "bad.cube"
    other_shard = tmp_path / "other.cube"
    k2, v2 = model_table(2, n=50)
    write_shard_file(other_shard, version=2, shard=1, shard_num=2, keys=k2, values=v2)
    cases = [
        (data[:-4], "truncated"),
        (data[:-100] + bytes([data[-100] ^ 1]) + data[-99:], "body checksum mismatch"),
        (b"not a shard file at all" * 4, "bad magic"),
        (other_shard.read_bytes(), "is shard 1 of 2, this server is shard 0 of 2"),
        (shard_files["path3"].read_bytes(), "holds version 3, asked to load version 2"),
    ]
    for content, message in cases:
        bad.write_bytes(content)
        status = load_version(server, 2, bad)
        assert status["load"]["state"] == "failed" and message in status["load"]["error"]
        assert (status["cur_version"], status["bg_version"]) == (1, None)
    status = load_version(server, 2, tmp_path / "absent.cube")
    assert "cannot open" in status["load"]["error"]
    code, answer = control_call(server, "POST", "/control/switch", {"version": 2})
    assert code == 409 and "not loaded" in answer["error"]
    with client_for(server) as c:
        assert c.seek(keys).version == 1


def test_oversize_and_malformed_requests_are_refused(server, shard_files):
    load_version(server, 1, shard_files["path1"])
    control_call(server, "POST", "/control/switch", {"version": 1})
    code, answer = server_call(server, "POST", "/DictService/seek", {"keys": list(range(501))})
    assert code == 413 and "501 keys exceeds the limit of 500" in answer["error"]
    with client_for(server) as c, pytest.raises(CubeRequestError, match="exceeds the limit"):
        c.seek(np.arange(501))
    for body, message in [
        ({"keys": [-1]}, "keys[0] = -1 is not an unsigned 64-bit integer"),
        ({"keys": [1], "version": "x"}, "must be an unsigned integer"),
        ({}, 'seek needs "keys"'),
    ]:
        code, answer = server_call(server, "POST", "/DictService/seek", body)
        assert code == 400 and message in answer["error"], answer
    assert server_call(server, "GET", "/DictService/seek")[0] == 405
    assert server_call(server, "GET", "/nope")[0] == 404
    code, answer = control_call(server, "POST", "/control/load", {"version": 5})
    assert code == 400 and '"path"' in answer["error"]
    status = server_call(server, "GET", "/control/status")[1]
    assert status["requests"] >= 5 and status["errors"] >= 5


def test_status_counts_keys_and_missing_keys(server, shard_files):
    load_version(server, 1, shard_files["path1"])
    control_call(server, "POST", "/control/switch", {"version": 1})
    keys, _ = shard_files[1]
    with client_for(server) as c:
        result = c.seek(np.concatenate([keys[:10], np.array([2, 6], np.uint64)]))
        with pytest.raises(TypeError, match="keys must be integers"):
            c.seek(np.array([1.0]))
    assert result.missing == 2 and not result.found[-2:].any()
    assert not result.values[-2:].any() and c.stats.missing_keys == 2
    status = server_call(server, "GET", "/control/status")[1]
    assert (status["keys"], status["missing_keys"]) == (12, 2)
    assert status["current"]["keys"] == len(keys) and status["current"]["dim"] == 8


def test_role_command_takes_the_shard_from_the_environment(procs, cube_server_bin, monkeypatch):
    """As the StatefulSet runs it: `python -m elasticctr_cube server --port=P`, shard from env."""
    monkeypatch.setenv("CUBE_SHARD_INDEX", "1")
    monkeypatch.setenv("CUBE_SHARD_NUM", "3")
    port = free_port()
    procs.start(
        "env-server",
        [sys.executable, "-m", "elasticctr_cube", "server", "--host=127.0.0.1", f"--port={port}",
         f"--control-port={free_port()}"],
    )  # fmt: skip
    status = wait_until(lambda: http_json(port, "/control/status"), 10, "the server")
    assert (status["shard"], status["shard_num"]) == (1, 3)


def test_readers_cannot_change_versions(server, shard_files):
    """Loads, switches and unloads are refused on the port readers use (a NetworkPolicy
    opens ports, not paths: serving could switch cube's version); the control port takes
    them, and takes no seeks."""
    load_version(server, 1, shard_files["path1"])
    for path, body in (
        ("/control/switch", {"version": 1}),
        ("/control/unload", {"version": 1}),
        ("/control/load", {"version": 2, "path": str(shard_files["path2"])}),
    ):
        code, answer = server_call(server, "POST", path, body)
        assert code == 403 and "control port" in answer["error"], (path, answer)
    status = server_call(server, "GET", "/control/status")[1]  # reading is for everyone
    assert (status["cur_version"], status["bg_version"], status["load"]["version"]) == (None, 1, 1)
    assert control_call(server, "POST", "/control/switch", {"version": 1})[0] == 200
    assert control_call(server, "POST", "/DictService/seek", {"keys": [2]})[0] == 404
    assert server_call(server, "POST", "/DictService/seek", {"keys": [2]})[0] == 200


def test_the_control_port_listens_on_loopback_by_default(procs, cube_server_bin):
    """Without --control-host the control port is the pod's own: on 127.0.0.1, whatever
    address the data port has."""
    port, control = free_port(), free_port()
    procs.start("server", [sys.executable, "-m", "elasticctr_cube", "server", "--shard", "0",
                           "--shard-num", "1", "--host", "127.0.0.2", "--port", str(port),
                           "--control-port", str(control)])  # fmt: skip
    wait_until(lambda: http_ok(f"http://127.0.0.2:{port}/healthz"), 10, "the server")
    assert call("GET", f"http://127.0.0.1:{control}/control/status")[0] == 200
    with pytest.raises(HttpCallError, match="refused"):
        call("GET", f"http://127.0.0.2:{control}/control/status")


def http_json(port: int, path: str):
    try:
        return server_call(port, "GET", path)[1]
    except HttpCallError:
        return None


def test_idle_connections_never_lock_out_health_checks_nor_new_clients(procs, cube_server_bin):
    """Clients that open connections and leave them idle must not lock others out: at
    the connection limit the oldest idle one is closed to make room, and idle ones time out."""
    port = free_port()
    start_server(procs, "server", port, 0, 1, "--max-connections", "40", "--idle-timeout", "2")
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(60)]
    opened = time.monotonic()
    try:
        for _ in range(5):  # more than the limit is open (or was): the server still answers
            assert server_call(port, "GET", "/healthz")[0] == 200
        status = server_call(port, "GET", "/control/status")[1]
        assert status["connections"] <= 40 and status["idle_closed"] >= 20, status
        idle[-1].settimeout(5)  # the newest idle one is closed after --idle-timeout
        assert idle[-1].recv(1) == b""
        assert 1.5 < time.monotonic() - opened < 4.5
    finally:
        for s in idle:
            s.close()
