"""The whole cube as real processes: 3 servers, 3 agents, 1 transfer, over file:// storage.

build -> publish -> switch gives exact vectors; readers never see a mix of versions
during 10 switches; a corrupt shard or a part killed mid-rollout aborts the rollout with
the old version serving, and the next rollout succeeds.
"""

from __future__ import annotations

import signal
import threading
import time

import numpy as np
import pytest
from elasticctr_cube.httpjson import call

from tests.images.cube.cubetest import expect_values, model_table, wait_until

pytestmark = pytest.mark.slow


def committed(cluster, version: int, tables) -> None:
    result = cluster.wait_result(version)
    assert result["result"] == "committed", f"{result}\n{cluster.dump()}"
    keys = tables[version][0]
    with cluster.client() as client:
        expect_values(client.seek(keys), keys, tables)
        assert client.seek(keys).version == version
    for s in range(cluster.shards):
        for r in range(cluster.replicas):
            assert cluster.server_status(s, r)["cur_version"] == version


def test_build_publish_switch_serves_exact_vectors_then_rolls_back(cube_cluster):
    cluster = cube_cluster()
    tables = {v: model_table(v) for v in (1, 2)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    cluster.publish_model(2, *tables[2])
    committed(cluster, 2, tables)
    status = cluster.transfer_status()
    assert (status["committed"], status["previous"], status["phase"]) == (2, 1, "idle")
    assert status["kept_versions"] == [1, 2]
    with cluster.client() as client:  # keys absent from the table: zero vectors, counted
        result = client.seek(np.array([0, 1, 2], np.uint64))
        assert result.missing == 3 and not result.values.any() and client.stats.missing_keys == 3
    # The port readers (serving) use takes no rollback: only the loopback control port does.
    code, answer = call("POST", cluster.transfer_url("/rollback"), {"version": 1})
    assert code == 403 and "control port" in answer["error"], answer
    code, answer = cluster.rollback(1)
    assert code == 202, answer
    wait_until(lambda: cluster.transfer_status()["committed"] == 1, 30, "the rollback")
    committed(cluster, 1, tables)
    assert [h["kind"] for h in cluster.history()] == ["donefile", "donefile", "rollback"]
    cluster.procs.kill("transfer")  # a restarted transfer carries on from its saved state
    cluster.start_transfer()
    time.sleep(0.5)
    status = cluster.transfer_status()
    assert (status["committed"], status["last_seen_donefile_id"]) == (1, 2)
    assert len(cluster.history()) == 3
    committed(cluster, 1, tables)


def test_readers_never_see_a_mix_of_versions_during_10_switches(cube_cluster):
    cluster = cube_cluster()
    tables = {v: model_table(v) for v in range(1, 12)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    keys = tables[1][0]
    stop, seen, errors, reads, retries = threading.Event(), set(), [], [0], []

    def reader(seed: int) -> None:
        rng = np.random.default_rng(seed)
        with cluster.client(timeout=5.0) as client:
            while not stop.is_set():
                sample = rng.choice(keys, 300)
                try:
                    result = client.seek(sample)
                    expect_values(result, sample, tables)
                except Exception as err:  # every failure is a test failure
                    errors.append(repr(err))
                    return
                seen.add(result.version)
                reads[0] += 1
            retries.append(client.stats.version_retries)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    try:
        for version in range(2, 12):
            cluster.publish_model(version, *tables[version])
            assert cluster.wait_result(version)["result"] == "committed", cluster.dump()
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors[:3]
    assert reads[0] > 100 and len(seen) >= 5, (reads, seen)
    # Answers caught mid-switch (shards on different versions) happened and were re-asked.
    assert sum(retries) > 0, retries
    assert len(cluster.transfer_status()["kept_versions"]) <= 4  # last 3 committed + current


def test_a_corrupt_shard_aborts_the_rollout_and_the_old_version_keeps_serving(cube_cluster):
    from elasticctr_common.storage import open_store
    from elasticctr_cube.builder import build, publish

    from tests.images.cube.cubetest import write_model_version

    cluster = cube_cluster()
    tables = {v: model_table(v) for v in (1, 2, 3)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    # Version 2 is published with one shard file damaged in storage, then announced.
    uri = write_model_version(cluster.model_dir, 2, *tables[2])
    manifest = build(uri, cluster.root / "prebuilt", version=2, shard_num=3)
    publish(cluster.root / "prebuilt", manifest, open_store(cluster.cube_uri))
    shard1 = cluster.cube_dir / "2" / "shard-1.cube"
    data = bytearray(shard1.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard1.write_bytes(bytes(data))
    cluster.publish_model(2, *tables[2])
    result = cluster.wait_result(2)
    assert result["result"] == "aborted" and "shard 1:" in result["error"]
    assert "corrupt: sha256" in result["error"], result
    for s in range(3):
        status = cluster.server_status(s)
        assert status["cur_version"] == 1 and status["bg_version"] != 2, status
    with cluster.client() as client:
        expect_values(client.seek(tables[1][0]), tables[1][0], tables)
    cluster.publish_model(3, *tables[3])
    committed(cluster, 3, tables)


@pytest.mark.parametrize("victim", ["agent", "server"])
def test_a_part_killed_mid_rollout_leaves_the_old_version_and_the_next_succeeds(
    cube_cluster, victim
):
    cluster = cube_cluster(transfer_args=["--hold-before-switch", "1.0"])
    tables = {v: model_table(v) for v in (1, 2, 3)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    cluster.publish_model(2, *tables[2])
    wait_until(lambda: cluster.transfer_status()["phase"] == "holding", 30, "phase holding")
    cluster.procs.kill(f"{victim}1")  # every shard holds version 2 loaded, none switched
    result = cluster.wait_result(2)
    assert result["result"] == "aborted" and "shard 1:" in result["error"], result
    for s in (0, 2):
        assert cluster.server_status(s)["cur_version"] == 1
    # What each server serves, for readers (the client's `status`): shard 1 is missing.
    servers = call("GET", cluster.transfer_url("/servers"))[1]
    assert servers["committed"] == 1
    assert servers["servers"]["shard 1"]["error"].startswith(f"{victim}: "), servers
    assert [servers["servers"][f"shard {s}"]["cur_version"] for s in (0, 2)] == [1, 1]
    if victim == "server":  # as Kubernetes would: the server restarts empty ...
        cluster.start_server(1)
        # ... and its agent brings back the committed version on its own
        wait_until(lambda: cluster.server_status(1)["cur_version"] == 1, 30, "the restore")
        servers = call("GET", cluster.transfer_url("/servers"))[1]["servers"]
        assert (servers["shard 1"]["ready"], servers["shard 1"]["cur_version"]) == (True, 1)
    with cluster.client() as client:
        expect_values(client.seek(tables[1][0]), tables[1][0], tables)
    if victim == "agent":
        cluster.start_agent(1)
    time.sleep(0.2)
    cluster.publish_model(3, *tables[3])
    committed(cluster, 3, tables)


def test_bad_input_is_rejected_and_the_serving_version_stays(cube_cluster):
    import json

    cluster = cube_cluster()
    tables = {v: model_table(v) for v in (1, 4)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    keys, values = tables[1]
    # version 2 repeats a key; version 3 has 8 floats where the trainer's meta says 9
    cluster.publish_model(2, np.concatenate([keys, keys[:1]]), np.concatenate([values, values[:1]]))
    assert "occur more than once" in cluster.wait_result(2)["error"]
    dense = cluster.model_dir / "3" / "dense"
    dense.mkdir(parents=True)
    (dense / "meta.json").write_text(json.dumps({"version": 3, "embedding_dim": 9}))
    cluster.publish_model(3, keys, values)
    rejected = cluster.wait_result(3)
    assert rejected["result"] == "rejected" and "expected 9" in rejected["error"], rejected
    code, answer = cluster.rollback(77)
    assert code == 400 and "version 77 is not published" in answer["error"]
    with cluster.client() as client:
        expect_values(client.seek(keys), keys, tables)
    assert cluster.transfer_status()["kept_versions"] == [1]
    cluster.publish_model(4, *tables[4])
    committed(cluster, 4, tables)


def test_a_restored_server_does_not_wedge_a_later_rollback(cube_cluster):
    """issue 13, item 3: after an agent restored its restarted server, the prepare state of
    the restored version stayed `loading`, and a rollback to it waited 600 s."""
    cluster = cube_cluster()  # --prepare-timeout 600, the default
    tables = {v: model_table(v) for v in (1, 2)}
    for version in (1, 2):
        cluster.publish_model(version, *tables[version])
        committed(cluster, version, tables)
    cluster.procs.kill("server1")
    cluster.start_server(1)
    wait_until(lambda: cluster.server_status(1)["cur_version"] == 2, 30, "the restore")
    for version in (1, 2):  # away from the restored version, then back to it
        started = time.monotonic()
        code, answer = cluster.rollback(version)
        assert code == 202, answer
        wait_until(lambda v=version: cluster.transfer_status()["committed"] == v, 30, "rollback")
        assert time.monotonic() - started < 30
        committed(cluster, version, tables)


def test_a_stuck_rollout_holds_the_lock_only_until_the_rollout_timeout(cube_cluster):
    cluster = cube_cluster(transfer_args=["--rollout-timeout", "3"])
    tables = {v: model_table(v) for v in (1, 2)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    server = cluster.procs.procs["server1"]
    server.send_signal(signal.SIGSTOP)  # answers nothing, closes nothing: a hung server
    try:
        started = time.monotonic()
        cluster.publish_model(2, *tables[2])
        wait_until(lambda: cluster.transfer_status()["phase"] == "preparing", 30, "prepare")
        code, answer = cluster.rollback(1)
        assert code == 409 and "--rollout-timeout 3.0s" in answer["error"], answer
        result = cluster.wait_result(2, 60)
        assert result["result"] == "aborted" and "shard 1" in result["error"], result
        # 3 s, plus the abort's requests to the hung shard (each bounded by a timeout)
        assert time.monotonic() - started < 20, result
    finally:
        server.send_signal(signal.SIGCONT)
    with cluster.client() as client:
        expect_values(client.seek(tables[1][0]), tables[1][0], tables)
