"""Delta versions through the whole cube (servers, agents, transfer as processes): a base
and k deltas serve, bit for bit, what a full export of the same version serves, after each
delta, after compaction into a new base, after a server restarted mid-chain, and after a
rollback across a compaction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from elasticctr_common.seqfile import write_sequence_file
from elasticctr_cube.builder import build

from tests.support.cube import wait_until

pytestmark = pytest.mark.slow
DIM = 4


class History:
    """A table changed at random version by version: updates, inserts, deletions (also
    of keys deleted before, and keys inserted again after their deletion)."""

    def __init__(self, seed: int, keys: int = 900) -> None:
        self.rng = np.random.default_rng(seed)
        self.table: dict[int, np.ndarray] = {}
        self.ever: set[int] = set()
        self.tables: dict[int, dict[int, np.ndarray]] = {}
        self._upsert(self.rng.integers(1, 2**64 - 1, keys, dtype=np.uint64))

    def _upsert(self, keys) -> tuple[np.ndarray, np.ndarray]:
        keys = np.unique(np.asarray(keys, np.uint64))
        values = self.rng.standard_normal((len(keys), DIM)).astype(np.float32)
        for k, v in zip(keys.tolist(), values, strict=True):
            self.table[k] = v
        self.ever |= set(keys.tolist())
        return keys, values

    def base(self, version: int) -> tuple[np.ndarray, np.ndarray]:
        self.tables[version] = dict(self.table)
        return self.full(version)

    def full(self, version: int) -> tuple[np.ndarray, np.ndarray]:
        table = self.tables[version]
        keys = np.array(sorted(table), np.uint64)
        return keys, np.array([table[k] for k in keys.tolist()], np.float32).reshape(-1, DIM)

    def delta(self, version: int, fraction: float = 0.03):
        present = np.array(sorted(self.table), np.uint64)
        n = max(1, int(len(present) * fraction))
        old = np.array(sorted(self.ever), np.uint64)
        touched = np.concatenate([
            self.rng.choice(present, n, replace=False),  # updates
            self.rng.integers(1, 2**64 - 1, n // 3 + 1, dtype=np.uint64),  # new keys
            self.rng.choice(old, n // 3 + 1),  # deleted before (inserted again), or present
        ])  # fmt: skip
        deleted = np.setdiff1d(self.rng.choice(present, n // 2 + 1, replace=False), touched)
        for k in deleted.tolist():
            del self.table[k]
        keys, values = self._upsert(touched)
        self.ever |= set(deleted.tolist())
        self.tables[version] = dict(self.table)
        return keys, values, deleted

    def check(self, client, version: int) -> None:
        """Every key ever seen answers as the full table of `version`: the same float bits,
        missing exactly where the table has no key."""
        keys = np.array(sorted(self.ever), np.uint64)
        result = client.seek(keys, version=version)
        table = self.tables[version]
        expected = np.zeros((len(keys), DIM), np.float32)
        found = np.array([k in table for k in keys.tolist()])
        for i in np.flatnonzero(found):
            expected[i] = table[int(keys[i])]
        assert result.version == version
        np.testing.assert_array_equal(result.found, found)
        np.testing.assert_array_equal(result.values.view(np.uint32), expected.view(np.uint32))


def manifest(cluster, version: int) -> dict:
    return json.loads((cluster.versions_dir / str(version) / "manifest.json").read_text())


def full_build_digests(tmp: Path, history: History, version: int, shards: int) -> list[str]:
    """The sha256 of each shard file a full export of `version` builds into."""
    export = tmp / f"full-{version}"
    export.mkdir()
    write_sequence_file(export / "part-00000", history.full(version))
    built = build(f"file://{export}", tmp / f"built-{version}", version=version, shard_num=shards)
    return [e.sha256 for e in built.shards]


def committed_everywhere(cluster, version: int) -> None:
    result = cluster.wait_result(version)
    assert result["result"] == "committed", f"{result}\n{cluster.dump()}"
    for s in range(cluster.shards):
        assert cluster.server_status(s)["cur_version"] == version


def test_base_and_deltas_serve_what_the_full_export_serves(cube_cluster, tmp_path):
    cluster = cube_cluster(transfer_args=["--base-every", "4", "--max-chain-fraction", "0.3"])
    history = History(seed=3)
    cluster.publish_model(1, *history.base(1))
    committed_everywhere(cluster, 1)
    manifests = {1: manifest(cluster, 1)}
    with cluster.client() as client:
        history.check(client, 1)
        for version in range(2, 11):
            # version 8 changes 40% of the table: over the bound, it becomes a base at once
            keys, values, deleted = history.delta(version, 0.4 if version == 8 else 0.03)
            cluster.publish_delta(version, version - 1, keys, values, deleted)
            committed_everywhere(cluster, version)
            manifests[version] = manifest(cluster, version)  # before it is pruned
            history.check(client, version)
            chain = cluster.server_status(1)["current"]["chain"]
            assert chain[-1] == version and chain == list(range(chain[0], version + 1))
    bases = [v for v, m in manifests.items() if m["parent"] is None]
    # base_every 4: 1 base, 2-4 deltas, 5 a base again; 8 over the bound; 9, 10 deltas
    assert bases == [1, 5, 8], manifests
    assert (manifests[10]["depth"], manifests[10]["base"], manifests[10]["parent"]) == (2, 8, 9)
    # the compacted bases are, byte for byte, what a full export of the same table builds
    for version in (5, 8):
        digests = [s["sha256"] for s in manifests[version]["shards"]]
        assert digests == full_build_digests(tmp_path, history, version, cluster.shards)

    # a server restarted mid-chain is restored to base 8 + deltas 9, 10 by its agent
    cluster.procs.kill("server1")
    cluster.start_server(1)
    wait_until(lambda: cluster.server_status(1)["cur_version"] == 10, 30, "the restore")
    assert cluster.server_status(1)["current"]["chain"] == [8, 9, 10]
    with cluster.client() as client:
        history.check(client, 10)

    # the 3 committed versions kept and their chains, nothing older
    assert cluster.transfer_status()["kept_versions"] == [8, 9, 10]

    # versions published while the transfer was away: it follows the newest, 12, whose
    # parent 11 it never built: one delta on 10 holding 11's and 12's changes
    cluster.procs.kill("transfer")
    for version in (11, 12):
        cluster.publish_delta(version, version - 1, *history.delta(version))
    cluster.start_transfer()
    committed_everywhere(cluster, 12)
    assert (manifest(cluster, 12)["parent"], manifest(cluster, 12)["depth"]) == (10, 3)
    assert cluster.server_status(2)["current"]["chain"] == [8, 9, 10, 12]
    with cluster.client() as client:
        history.check(client, 12)


def test_a_rollback_across_a_compaction_loads_the_chain_from_its_base(cube_cluster):
    cluster = cube_cluster(transfer_args=["--base-every", "3", "--keep", "6"])
    history = History(seed=11, keys=500)
    cluster.publish_model(1, *history.base(1))
    committed_everywhere(cluster, 1)
    for version in range(2, 6):  # 2, 3 deltas on 1; 4 a base; 5 a delta on 4
        cluster.publish_delta(version, version - 1, *history.delta(version))
        committed_everywhere(cluster, version)
    assert manifest(cluster, 4).get("parent") is None and manifest(cluster, 5)["parent"] == 4
    code, answer = cluster.rollback(3)
    assert code == 202, answer
    wait_until(lambda: cluster.transfer_status()["committed"] == 3, 30, "the rollback")
    committed_everywhere(cluster, 3)
    assert cluster.server_status(0)["current"]["chain"] == [1, 2, 3]
    with cluster.client() as client:
        history.check(client, 3)
    # forward again: 6 is a delta on 5, which the servers no longer hold (the rollback
    # dropped it): each agent loads base 4 and deltas 5, 6
    cluster.publish_delta(6, 5, *history.delta(6))
    committed_everywhere(cluster, 6)
    assert cluster.server_status(0)["current"]["chain"] == [4, 5, 6]
    with cluster.client() as client:
        history.check(client, 6)


def test_a_new_shard_count_gets_the_committed_chain_as_a_base(cube_cluster):
    old = cube_cluster(shards=3, transfer_args=["--base-every", "5"])
    history = History(seed=5, keys=700)
    old.publish_model(1, *history.base(1))
    committed_everywhere(old, 1)
    for version in (2, 3):
        old.publish_delta(version, version - 1, *history.delta(version))
        committed_everywhere(old, version)
    new = old.reshape(2)
    wait_until(lambda: new.transfer_status()["layout"]["ready"], 60, "the 2-shard layout")
    built = manifest(new, 3)
    assert built["parent"] is None and built["shard_num"] == 2  # base 1 + deltas 2, 3 merged
    assert new.server_status(0)["current"]["chain"] == [3]
    with new.client() as client:
        history.check(client, 3)
    # the next delta goes to the new layout as a delta on its base
    new.publish_delta(4, 3, *history.delta(4))
    committed_everywhere(new, 4)
    assert manifest(new, 4)["parent"] == 3
    with new.client() as client:
        history.check(client, 4)
