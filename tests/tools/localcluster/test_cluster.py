"""tools/localcluster/cluster.py: `down` stops only the cluster that holds the machine's lock
as this directory's, never another one's (restoring the host would take its network)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from tools.localcluster import cluster
from tools.localcluster.settings import Layout


@pytest.fixture
def lock_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "run" / "elasticctr-cluster.lock"
    monkeypatch.setattr(cluster, "LOCK_FILE", path)
    # Root or not, `down` gets as far as the lock; what it would stop is recorded, not run.
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    return path


@pytest.fixture
def downs(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    stopped: list[Path] = []

    def record(self: cluster.LocalCluster, say: object) -> list[str]:
        stopped.append(self.layout.dir)
        return []

    monkeypatch.setattr(cluster.LocalCluster, "_down", record)
    return stopped


@contextlib.contextmanager
def _held(lock_file: Path, owner: str) -> Iterator[IO[str]]:
    """The lock as a running cluster holds it: its own open file, `owner` written in it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.truncate(0)
        held.write(owner)
        held.flush()
        yield held


def test_down_with_the_lock_free_stops_its_directory(
    tmp_path: Path, lock_file: Path, downs: list[Path]
) -> None:
    layout = Layout.at(tmp_path / "mine")
    assert cluster.LocalCluster(layout).down(say=lambda _: None) == []
    assert downs == [layout.dir]


def test_down_of_the_cluster_holding_the_lock_stops_it(
    tmp_path: Path, lock_file: Path, downs: list[Path]
) -> None:
    layout = Layout.at(tmp_path / "mine")
    with _held(lock_file, f"{layout.dir} pid 4242\n"):
        cluster.LocalCluster(layout).down(say=lambda _: None)
    assert downs == [layout.dir]


@pytest.mark.parametrize("owner", ["{other} pid 4242\n", ""], ids=["another", "unnamed"])
def test_down_never_stops_another_holders_cluster(
    tmp_path: Path, lock_file: Path, downs: list[Path], owner: str
) -> None:
    layout = Layout.at(tmp_path / "mine")
    other = tmp_path / "cluster-test"
    with (
        _held(lock_file, owner.format(other=other)),
        pytest.raises(cluster.ClusterError) as refused,
    ):
        cluster.LocalCluster(layout).down(say=lambda _: None)
    message = str(refused.value)
    assert (str(other) if owner else "unnamed") in message
    assert str(layout.dir) in message and str(lock_file) in message
    assert downs == []
