"""A new shard count (or new shard servers) beside the old ones, as `pulumi up` brings it:
the transfer, restarted on the new cube.conf, builds the committed version for the new
layout and rolls it out there while the old servers go on serving it, untouched.
"""

from __future__ import annotations

import json
import shutil
import threading

import pytest

from tests.support.cube import (
    committed,
    expect_values,
    model_table,
    serves_exactly,
    wait_until,
)

pytestmark = pytest.mark.slow


class Readers:
    """Seeks of every key on `cluster`'s layout in a loop, counting failures."""

    def __init__(self, cluster, tables, version: int) -> None:
        self.cluster, self.tables, self.keys = cluster, tables, tables[version][0]
        self.reads, self.failures = 0, list[str]()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with self.cluster.client() as client:
            while not self._stop.is_set():
                try:
                    expect_values(client.seek(self.keys), self.keys, self.tables)
                    self.reads += 1
                except Exception as err:
                    self.failures.append(repr(err))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def layout_ready(cluster) -> bool:
    return bool(cluster.transfer_status()["layout"]["ready"])


def test_a_new_shard_count_is_built_and_loaded_while_the_old_one_serves(cube_cluster):
    old = cube_cluster(shards=2)
    tables = {v: model_table(v) for v in (1, 2)}
    old.publish_model(1, *tables[1])
    committed(old, 1, tables)
    readers = Readers(old, tables, 1)

    new = old.reshape(3)
    wait_until(lambda: layout_ready(new), 60, "the 3-shard layout to serve version 1")
    committed(new, 1, tables)
    status = new.transfer_status()
    assert (status["committed"], status["shards"], status["layout"]) == (
        1,
        3,
        {"dir": "shards-3", "ready": True},
    )
    assert new.history()[-1]["kind"] == "layout"
    wait_until(lambda: readers.reads > 20, 30, "reads on the old layout")
    readers.stop()
    assert readers.failures == [], readers.failures[:3]
    # The old layout was never touched: it still serves version 1 from its own files.
    for s in range(2):
        assert old.server_status(s)["cur_version"] == 1
    cube = old.cube_dir
    assert sorted(p.name for p in cube.iterdir()) == ["shards-2", "shards-3", "transfer-state.json"]
    assert json.loads((cube / "shards-3" / "current").read_text()) == {"version": 1}
    assert json.loads((cube / "shards-2" / "current").read_text()) == {"version": 1}

    # New versions go to the new layout only.
    new.publish_model(2, *tables[2])
    committed(new, 2, tables)
    assert [old.server_status(s)["cur_version"] for s in range(2)] == [1, 1]

    # Back to 2 shards: that layout's files are of version 1; 2 is built for it.
    back = new.reshape(2)
    wait_until(lambda: layout_ready(back), 60, "the 2-shard layout to serve version 2")
    committed(back, 2, tables)
    assert back.transfer_status()["kept_versions"] == [1, 2]


def test_the_new_layout_is_retried_until_every_server_of_it_is_up(cube_cluster, tmp_path):
    old = cube_cluster(shards=1, transfer_args=["--retry-seconds", "0.5"])
    tables = {1: model_table(1)}
    old.publish_model(1, *tables[1])
    committed(old, 1, tables)
    # The new layout's shard 1 is late (its pod still pulling its image, say).
    new = old.reshape(2)
    new.procs.kill(new.name("agent", 1))
    wait_until(
        lambda: any(h["kind"] == "layout" and h["result"] == "aborted" for h in new.history()),
        60,
        "a failed attempt while shard 1 is away",
    )
    assert not layout_ready(new)
    failed = next(h for h in new.history() if h["kind"] == "layout")
    assert "layout shards-2" in failed["error"] and "shard 1" in failed["error"], failed
    assert old.server_status(0)["cur_version"] == 1  # the old layout serves on
    new.start_agent(1)
    wait_until(lambda: layout_ready(new), 60, "the layout once shard 1 is up")
    # Every server of the new layout serves version 1's vectors. (A retry that finds them
    # all serving it already marks the layout ready without a history entry of its own.)
    serves_exactly(new, 1, tables)


def test_a_new_layout_is_built_from_the_old_layouts_files_without_the_export(cube_cluster):
    old = cube_cluster(shards=1, transfer_args=["--retry-seconds", "0.5"])
    tables = {1: model_table(1)}
    old.publish_model(1, *tables[1])
    committed(old, 1, tables)
    shutil.rmtree(old.model_dir / "1")  # the model export is gone: cube's own files remain
    (old.model_dir / "donefile").write_text("")
    new = old.reshape(2)
    wait_until(lambda: layout_ready(new), 60, "the layout built from shards-1's files")
    committed(new, 1, tables)
    entry = next(h for h in new.history() if h["kind"] == "layout")
    assert entry["result"] == "committed", entry


def test_a_committed_version_without_its_export_leaves_the_layout_not_ready(cube_cluster):
    old = cube_cluster(shards=1, transfer_args=["--retry-seconds", "0.5"])
    tables = {1: model_table(1)}
    old.publish_model(1, *tables[1])
    committed(old, 1, tables)
    (old.model_dir / "donefile").write_text("")  # the model store lost its history
    shutil.rmtree(old.versions_dir / "1")  # and the old layout's published files are gone
    new = old.reshape(2)
    wait_until(lambda: any(h["kind"] == "layout" for h in new.history()), 60, "the layout attempt")
    entry = next(h for h in new.history() if h["kind"] == "layout")
    assert entry["result"] == "aborted"
    assert "cannot build committed version 1" in entry["error"], entry
    assert "is not in" in entry["error"] and "donefile" in entry["error"], entry
    assert not layout_ready(new)
    assert old.server_status(0)["cur_version"] == 1
