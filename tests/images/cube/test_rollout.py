"""The whole cube as real processes: 3 servers, 3 agents, 1 transfer, over file:// storage.

build -> publish -> switch gives exact vectors; readers never see a mix of versions
during 10 switches; a corrupt shard or a part killed mid-rollout aborts the rollout with
the old version serving, and the next rollout succeeds.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

import numpy as np
import pytest
from elasticctr_common.registry import ModelRegistry
from elasticctr_cube.httpjson import call

from tests.support.cube import committed, expect_values, model_table, wait_until

pytestmark = pytest.mark.slow


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


def test_the_registrys_serving_alias_follows_the_committed_version(
    cube_cluster, mlflow_server, monkeypatch
):
    model = f"ctr-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.tracking_uri)
    monkeypatch.setenv("ELASTICCTR_REGISTERED_MODEL", model)
    registry = ModelRegistry(mlflow_server.tracking_uri, model)
    cluster = cube_cluster()
    tables = {v: model_table(v) for v in (1, 2)}
    registry.register(1, "s3://bucket/models/1")
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    wait_until(lambda: registry.alias() == 1, 30, "the alias on version 1")
    # Cube may commit a version before trainer 0 registers it: the alias follows later.
    cluster.publish_model(2, *tables[2])
    committed(cluster, 2, tables)
    wait_until(
        lambda: "not registered" in (cluster.transfer_status()["registry"]["error"] or ""),
        30,
        "the transfer to report version 2 unregistered",
    )
    assert registry.alias() == 1
    registry.register(2, "s3://bucket/models/2")
    wait_until(lambda: registry.alias() == 2, 30, "the alias on version 2")
    code, answer = cluster.rollback(1)
    assert code == 202, answer
    wait_until(lambda: registry.alias() == 1, 30, "the alias back on version 1")
    # The transfer records the move once MLflow has answered, a moment after the alias moved.
    expected = {"model": model, "serving": 1, "error": None}
    wait_until(
        lambda: cluster.transfer_status()["registry"] == expected,
        30,
        "the transfer to report the alias on version 1",
    )


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


@pytest.mark.parametrize("damage", ["flipped bit", "nan"])
def test_a_corrupt_shard_aborts_the_rollout_and_the_old_version_keeps_serving(cube_cluster, damage):
    """A shard file damaged in storage fails its agent's sha256 check; one written with a
    NaN value (by hand, or by a builder that did not check; its manifest entry matches)
    fails the agent's scan. Either aborts the rollout on every shard."""
    import dataclasses

    from elasticctr_common.storage import open_store
    from elasticctr_cube.builder import build, publish
    from elasticctr_cube.shardfile import read_shard_file, write_shard_file

    from tests.support.cube import write_model_version

    cluster = cube_cluster()
    tables = {v: model_table(v) for v in (1, 2, 3)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    # Version 2 is published with one shard file damaged, then announced.
    uri = write_model_version(cluster.model_dir, 2, *tables[2])
    prebuilt = cluster.root / "prebuilt"
    manifest = build(uri, prebuilt, version=2, shard_num=3)
    shard1 = prebuilt / "shard-1.cube"
    if damage == "nan":
        _, keys, values = read_shard_file(shard1)
        values = values.copy()
        values[4, 1] = np.nan
        written = write_shard_file(
            shard1, version=2, shard=1, shard_num=3, keys=keys, values=values
        )
        shards = list(manifest.shards)
        shards[1] = dataclasses.replace(shards[1], bytes=written.bytes, sha256=written.sha256)
        manifest = dataclasses.replace(manifest, shards=shards)
        expected = (
            "shard-1.cube of version 2 is refused: 1 keys have NaN or infinite values "
            f"(e.g. {keys[4]}); cube serves finite embeddings only"
        )
    publish(prebuilt, manifest, open_store(cluster.versions_uri))
    if damage == "flipped bit":
        stored = cluster.versions_dir / "2" / "shard-1.cube"
        data = bytearray(stored.read_bytes())
        data[len(data) // 2] ^= 0x40
        stored.write_bytes(bytes(data))
        expected = "corrupt: sha256"
    cluster.publish_model(2, *tables[2])
    result = cluster.wait_result(2)
    assert result["result"] == "aborted" and "shard 1:" in result["error"]
    assert expected in result["error"], result
    for s in range(3):
        status = cluster.server_status(s)
        assert status["cur_version"] == 1 and status["bg_version"] != 2, status
    assert not (cluster.root / "data1-0" / "2").exists()  # the refused file is deleted
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
    tables = {v: model_table(v) for v in (1, 5)}
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
    # version 4: a NaN embedding, as a damaged export (the trainer's check bypassed) has
    nan = values.copy()
    nan[7, 2] = np.nan
    cluster.publish_model(4, keys, nan)
    rejected = cluster.wait_result(4)
    assert rejected["result"] == "rejected", rejected
    assert (
        f"version 4: file://{cluster.model_dir}/4/sparse/part-00000: 1 keys have NaN"
        in (rejected["error"])
        and f"(e.g. {keys[7]})" in rejected["error"]
    ), rejected
    code, answer = cluster.rollback(77)
    assert code == 400 and "version 77 is not published" in answer["error"]
    with cluster.client() as client:
        expect_values(client.seek(keys), keys, tables)
    assert cluster.transfer_status()["kept_versions"] == [1]
    cluster.publish_model(5, *tables[5])
    committed(cluster, 5, tables)


def test_a_restored_server_does_not_wedge_a_later_rollback(cube_cluster):
    """After an agent restored its restarted server, the prepare state of the restored
    version once stayed `loading`, and a rollback to it waited 600 s: it must not."""
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
