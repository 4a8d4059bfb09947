"""/metrics of the live cube processes (native server, agent, transfer), read with
prometheus_client's parsers and checked against the metrics contract: every family each
one exposes is the contract's, with its type, labels and buckets, and the values follow
what happened (a committed rollout, seeks and misses, a rollout aborted by a corrupt shard
file)."""

from __future__ import annotations

import numpy as np
import pytest
from elasticctr_common.metrics import CUBE_AGENT, CUBE_SERVER, CUBE_TRANSFER
from elasticctr_common.storage import open_store
from elasticctr_cube.builder import build, publish

from tests.support.cube import committed, model_table, wait_until, write_model_version
from tests.support.metrics import scrape, value

pytestmark = pytest.mark.slow


def test_server_agent_and_transfer_metrics_keep_the_contract(cube_cluster):
    cluster = cube_cluster(shards=1)
    node = cluster.node(0)
    server_url, agent_url = f"{node.server_url}/metrics", f"{node.agent_url}/metrics"
    transfer_url = cluster.transfer_url("/metrics")
    server = scrape(server_url, CUBE_SERVER)
    assert value(server, "elasticctr_cube_server_version", slot="current") == -1
    transfer = scrape(transfer_url, CUBE_TRANSFER)
    assert value(transfer, "elasticctr_cube_transfer_committed_version") == -1
    assert value(transfer, "elasticctr_cube_transfer_rollout_phase", phase="idle") == 1
    # Nothing committed yet: no shard has anything to serve, none is missing.
    assert value(transfer, "elasticctr_cube_transfer_ready_shards") == 1

    tables = {v: model_table(v, n=500) for v in (1, 2)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)  # seeks all 500 keys twice
    with cluster.client() as client:
        client.seek(np.array([0, 1, 2], np.uint64))  # absent: 3 misses
    server = scrape(server_url, CUBE_SERVER)
    p = "elasticctr_cube_server_"
    assert value(server, p + "version", slot="current") == 1
    assert value(server, p + "keys", slot="current") == 500
    assert value(server, p + "ready") == 1
    assert value(server, p + "seeks_total", protocol="binary") == 3
    assert value(server, p + "seek_keys_total") == 1003
    assert value(server, p + "seek_missing_keys_total") == 3
    assert value(server, p + "seek_seconds_count", protocol="binary") == 3
    assert value(server, p + "loads_total", result="loaded") == 1
    assert value(server, p + "resident_memory_bytes") > 0

    agent = scrape(agent_url, CUBE_AGENT)
    a = "elasticctr_cube_agent_"
    assert value(agent, a + "prepares_total", result="ready") == 1
    assert value(agent, a + "prepare_seconds_count", result="ready") == 1
    assert value(agent, a + "prepared_version") == 1
    assert value(agent, a + "last_success_timestamp_seconds") > 0
    transfer = scrape(transfer_url, CUBE_TRANSFER)
    t = "elasticctr_cube_transfer_"
    assert value(transfer, t + "rollouts_total", kind="donefile", result="committed") == 1
    assert value(transfer, t + "versions_built_total", kind="base") == 1
    assert value(transfer, t + "committed_version") == 1
    assert value(transfer, t + "last_success_timestamp_seconds") > 0
    assert value(transfer, t + "kept_versions") == 1
    assert value(transfer, t + "shards") == 1
    assert value(transfer, t + "ready_shards") == 1

    # Version 2's shard file damaged in storage: the agent's check fails, the rollout aborts.
    uri = write_model_version(cluster.model_dir, 2, *tables[2])
    prebuilt = cluster.root / "prebuilt"
    publish(
        prebuilt, build(uri, prebuilt, version=2, shard_num=1), open_store(cluster.versions_uri)
    )
    stored = cluster.versions_dir / "2" / "shard-0.cube"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0x40
    stored.write_bytes(bytes(data))
    cluster.publish_model(2, *tables[2])
    assert cluster.wait_result(2)["result"] == "aborted"
    agent = scrape(agent_url, CUBE_AGENT)
    assert value(agent, a + "failures_total", cause="verify") == 1
    assert value(agent, a + "prepares_total", result="failed") == 1
    transfer = scrape(transfer_url, CUBE_TRANSFER)
    assert value(transfer, t + "rollouts_total", kind="donefile", result="aborted") == 1
    assert value(transfer, t + "failures_total", cause="rollout") == 1
    assert value(transfer, t + "committed_version") == 1
    wait_until(
        lambda: value(scrape(transfer_url, CUBE_TRANSFER), t + "rollout_phase", phase="idle") == 1,
        10,
        "the transfer to be idle",
    )
    server = scrape(server_url, CUBE_SERVER)
    assert value(server, p + "version", slot="current") == 1
    # The shard's server gone (its agent still answers): no ready server for the shard.
    cluster.procs.kill(cluster.name("server", 0))
    transfer = scrape(transfer_url, CUBE_TRANSFER)
    assert value(transfer, t + "ready_shards") == 0 and value(transfer, t + "shards") == 1
