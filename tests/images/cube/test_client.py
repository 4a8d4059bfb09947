"""The client library: cube.conf, routing by key % shard, version consistency, timeouts, retries."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest
from elasticctr_common.cube.client import CubeClient, CubeUnavailable, CubeVersionError
from elasticctr_common.cube.conf import CubeConf, CubeConfError, CubeNode
from elasticctr_common.ports import free_port
from elasticctr_cube.shardfile import write_shard_file

from tests.support.cube import (
    control_call,
    expect_values,
    load_version,
    model_table,
    start_server,
)


def test_cube_conf_in_our_form_and_in_paddles_list_form(tmp_path):
    ours = {
        "dict_name": "ctr_embedding",
        "shard": 2,
        "nodes": [{"ip": "a", "port": 8027, "agent_port": 8001}, {"ip": "b", "port": 9}],
    }
    (tmp_path / "ours.conf").write_text(json.dumps(ours))
    conf = CubeConf.load(tmp_path / "ours.conf")
    assert conf.nodes[1] == CubeNode("b", 9, 8001) and conf.shard == 2
    paddle = [{"dict_name": "test", "shard": 1, "nodes": [{"ip": "127.0.0.1", "port": 8731}]}, ours]
    (tmp_path / "paddle.conf").write_text(json.dumps(paddle))
    assert CubeConf.load(tmp_path / "paddle.conf", "test").nodes[0].port == 8731
    with pytest.raises(CubeConfError, match="pick one dict_name"):
        CubeConf.load(tmp_path / "paddle.conf")
    with pytest.raises(CubeConfError, match="shard is 3 but 2 nodes"):
        CubeConf.parse({**ours, "shard": 3}, "x.conf")
    with pytest.raises(CubeConfError, match=r"x\.conf: bad or missing field"):
        CubeConf.parse({"shard": 1, "nodes": [{"port": 1}]}, "x.conf")


@pytest.fixture
def three_shards(procs, cube_server_bin, tmp_path):
    """Three servers; versions 1 and 2 loaded on each, version 1 current."""
    ports = [free_port() for _ in range(3)]
    tables = {v: model_table(v, n=900) for v in (1, 2)}
    for s, port in enumerate(ports):
        start_server(procs, f"server{s}", port, s, 3)
        for v, (keys, values) in tables.items():
            mine = keys % 3 == s
            path = tmp_path / f"{v}-{s}.cube"
            write_shard_file(
                path, version=v, shard=s, shard_num=3, keys=keys[mine], values=values[mine]
            )
            load_version(port, v, path)
            if v == 1:
                control_call(port, "POST", "/control/switch", {"version": 1})
    conf = CubeConf("d", 3, tuple(CubeNode("127.0.0.1", p) for p in ports))
    return conf, tables, ports


def test_routes_by_key_modulo_and_keeps_key_order(three_shards):
    conf, tables, _ = three_shards
    keys, values = tables[1]
    order = np.random.default_rng(3).permutation(len(keys))
    asked = np.concatenate([keys[order], np.array([3, 4, 5], np.uint64)])
    with CubeClient(conf) as client:
        result = client.seek(asked)
        assert result.version == 1 and result.missing == 3 and client.stats.missing_keys == 3
        np.testing.assert_array_equal(result.values[:-3], values[order])
        assert not result.values[-3:].any() and not result.found[-3:].any()
        assert client.seek(asked.tolist()).version == 1  # a list of ints works too
        empty = client.seek([])
        assert empty.values.shape == (0, 8) and empty.missing == 0


def test_shards_on_different_versions_give_one_consistent_answer(three_shards):
    conf, tables, ports = three_shards
    keys, _ = tables[2]
    control_call(ports[0], "POST", "/control/switch", {"version": 2})  # a switch half done
    with CubeClient(conf) as client:
        result = client.seek(keys)
        assert result.version == 2 and (result.values[:, 0] == 2).all()
        assert client.stats.version_retries == 1
        assert (client.seek(keys, version=1).values[:, 0] == 1).all()
        with pytest.raises(CubeVersionError, match="version 7 is not held"):
            client.seek(keys, version=7)


def test_a_silent_shard_times_out_with_a_clear_error():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        conf = CubeConf("d", 1, (CubeNode("127.0.0.1", silent.getsockname()[1]),))
        started = time.monotonic()
        with CubeClient(conf, timeout=0.3) as client, pytest.raises(CubeUnavailable) as err:
            client.seek([1, 2])
        assert time.monotonic() - started < 2.0
        assert "shard 0 at 127.0.0.1" in str(err.value) and "timed out" in str(err.value)


def test_a_restarted_server_is_reconnected_transparently(three_shards, procs, tmp_path):
    conf, tables, ports = three_shards
    keys, _ = tables[1]
    with CubeClient(conf, timeout=5.0) as client:
        assert client.seek(keys).version == 1  # connections are now pooled
        procs.kill("server1")
        start_server(procs, "server1", ports[1], 1, 3)
        load_version(ports[1], 1, tmp_path / "1-1.cube")
        control_call(ports[1], "POST", "/control/switch", {"version": 1})
        assert client.seek(keys).version == 1
        assert client.stats.retries >= 1


def test_a_failed_seek_leaves_no_unread_answer_behind(three_shards):
    conf, tables, ports = three_shards
    keys, _ = tables[1]
    control_call(ports[0], "POST", "/control/unload", {"version": 2})
    with CubeClient(conf) as client:
        for i in range(3):  # shard 0 refuses version 2; shards 1 and 2 answer it
            with pytest.raises(CubeVersionError, match="shard 0"):
                client.seek(keys[i * 200 : i * 200 + 100], version=2)
            other = keys[i * 200 + 100 : i * 200 + 200]
            expect_values(client.seek(other), other, {1: tables[1]})


def test_a_refusing_shard_fails_after_its_retries_not_at_the_timeout():
    conf = CubeConf("d", 1, (CubeNode("127.0.0.1", free_port()),))  # nothing listens
    with CubeClient(conf, timeout=5.0, retries=2) as client:
        started = time.monotonic()
        with pytest.raises(CubeUnavailable, match=r"after 3 failed attempts.*refused"):
            client.seek([1, 2])
        assert time.monotonic() - started < 2.0  # 3 attempts, 50 ms apart
        assert client.stats.retries == 2
