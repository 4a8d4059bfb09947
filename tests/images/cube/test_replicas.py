"""Replicas per shard, so that one server down fails no request: 3 shards x 2 replicas
as real processes. A
replica down or hung fails no reader (failover, retry, hedged requests as cube.conf
says); a switch is all-or-nothing over every replica; cube.conf reads the same through
Paddle Serving's own clients."""

from __future__ import annotations

import base64
import signal
import threading
import time

import numpy as np
import pytest

from tests.support.cube import committed, expect_values, model_table, wait_until
from tests.support.paddle_cube import PythonMeta, cpp_meta

pytestmark = pytest.mark.slow


class Readers:
    """Threads seeking random keys until stopped; every failure is kept."""

    def __init__(self, cluster, tables, threads: int = 3, **client) -> None:
        self.stop, self.reads = threading.Event(), [0]
        self.errors: list[str] = []
        self.latencies: list[float] = []
        self.clients = [cluster.client(**client) for _ in range(threads)]
        self.threads = [
            threading.Thread(target=self._run, args=(c, tables, i))
            for i, c in enumerate(self.clients)
        ]
        for t in self.threads:
            t.start()

    def _run(self, client, tables, seed: int) -> None:
        keys = tables[1][0]
        rng = np.random.default_rng(seed)
        while not self.stop.is_set():
            sample = rng.choice(keys, 200)
            started = time.monotonic()
            try:
                expect_values(client.seek(sample), sample, tables)
            except Exception as err:  # every failure is a test failure
                self.errors.append(repr(err))
            self.latencies.append(time.monotonic() - started)
            self.reads[0] += 1

    def wait_reads(self, more: int) -> None:
        target = self.reads[0] + more
        wait_until(lambda: self.reads[0] >= target, 30, f"{more} more reads")

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)
        for c in self.clients:
            c.close()


def test_one_replica_down_or_stopped_fails_no_reader_and_switches_are_all_or_nothing(
    cube_cluster,
):
    cluster = cube_cluster(shards=3, replicas=2)
    tables = {v: model_table(v) for v in (1, 2, 3)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    readers = Readers(cluster, tables)
    try:
        readers.wait_reads(50)
        cluster.procs.kill("server1-0")  # a node drained or lost: one replica of shard 1
        readers.wait_reads(200)
        # A rollout while a replica is down cannot switch every replica: it aborts, and
        # every replica keeps version 1.
        cluster.procs.kill("agent1-0")
        cluster.publish_model(2, *tables[2])
        result = cluster.wait_result(2)
        assert result["result"] == "aborted" and "shard 1 replica 0:" in result["error"]
        for s in range(3):
            assert cluster.server_status(s, 1)["cur_version"] == 1
        readers.wait_reads(100)
        cluster.start_server(1, 0)  # the replica comes back empty; its agent restores it
        cluster.start_agent(1, 0)
        wait_until(lambda: cluster.server_status(1, 0)["cur_version"] == 1, 30, "the restore")
        cluster.publish_model(3, *tables[3])
        committed(cluster, 3, tables)  # on every replica of every shard
        readers.wait_reads(100)
        # A rolling restart stops a replica with SIGTERM: it finishes
        # what it answers and exits 0 (it ignored SIGTERM as a container's PID 1 before);
        # its agent and the transfer exit 0 too.
        codes = {name: cluster.procs.terminate(name) for name in ("server1-1", "agent1-1")}
        readers.wait_reads(100)
        codes["transfer"] = cluster.procs.terminate("transfer")
    finally:
        readers.finish()
    assert not readers.errors, readers.errors[:3]
    assert sum(c.stats.retries for c in readers.clients) > 0  # failovers happened
    assert codes == {"server1-1": 0, "agent1-1": 0, "transfer": 0}
    print(f"{readers.reads[0]} reads, none failed, with a replica down, stopped, 2 rollouts")


def test_a_hung_replica_is_hedged_within_backup_request(cube_cluster):
    cluster = cube_cluster(shards=2, replicas=2)
    tables = {1: model_table(1)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    hung = cluster.procs.procs["server0-1"]
    hung.send_signal(signal.SIGSTOP)  # accepts nothing, answers nothing
    try:
        readers = Readers(cluster, tables, threads=2, timeout=2.0, backup_request=0.05)
        try:
            readers.wait_reads(100)
        finally:
            readers.finish()
    finally:
        hung.send_signal(signal.SIGCONT)
    assert not readers.errors, readers.errors[:3]
    assert sum(c.stats.hedges for c in readers.clients) > 0
    # A hung replica costs the hedge delay, not the 2 s timeout (the machine may be busy).
    assert float(np.percentile(readers.latencies, 90)) < 1.0, readers.latencies


def test_cube_conf_is_paddles_list_form_and_paddles_clients_read_it(cube_cluster):
    cluster = cube_cluster(shards=3, replicas=2)
    tables = {1: model_table(1, n=300)}
    cluster.publish_model(1, *tables[1])
    committed(cluster, 1, tables)
    text = cluster.conf_path.read_text()
    meta = cpp_meta(text)["ctr_embedding"]
    assert (meta["shard"], meta["dup"], meta["type"]) == (3, 2, "ipport_list")
    assert meta["channels"] == [[(n.ip, n.port) for n in group] for group in cluster.conf.replicas]
    keys, values = tables[1]
    answers = PythonMeta(text).seek("ctr_embedding", [int(k) for k in keys] + [5])
    got = np.array([np.frombuffer(base64.b64decode(a["value"]), "<f4")
                    for a in answers[:-1]])  # fmt: skip
    np.testing.assert_array_equal(got, values)
    assert answers[-1] == {"status": 4294967295, "value": ""}
