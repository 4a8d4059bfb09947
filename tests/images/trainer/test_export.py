"""The export's streaming halves: the SequenceFile parts written chunk by chunk, and the
model check folded over the same chunks, each equal to doing it on the whole table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from elasticctr_common.seqfile import read_sequence_file
from elasticctr_trainer import export
from elasticctr_trainer.delta import SNAPSHOT, ExportDiff, Snapshot
from elasticctr_trainer.export import SparseParts
from elasticctr_trainer.modelcheck import EmbeddingScan, check_embeddings
from numpy.typing import NDArray


def table(rows: int, seed: int = 1) -> tuple[NDArray[np.uint64], NDArray[np.float32]]:
    rng = np.random.default_rng(seed)
    keys = (np.sort(rng.choice(10 * rows + 10, rows, replace=False)) + 1).astype(np.uint64)
    return keys, rng.normal(0, 0.5, (rows, 9)).astype(np.float32)


def chunks(rows: int, seed: int) -> list[tuple[int, int]]:
    """Random [start, end) cuts of `rows`, empty ones included (a chunk with no trained key)."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, rows + 1, size=rng.integers(1, 12)))
    bounds = [0, *cuts.tolist(), rows]
    return list(itertools.pairwise(bounds))


@pytest.mark.parametrize("seed", range(6))
def test_parts_written_chunk_by_chunk_hold_the_table_in_parts_of_the_set_size(
    tmp_path, monkeypatch, seed
):
    monkeypatch.setattr(export, "RECORDS_PER_PART", 7)
    keys, values = table(40, seed)
    parts = SparseParts(tmp_path)
    for start, end in chunks(len(keys), seed):
        parts.add(keys[start:end], values[start:end])
    paths = parts.close()
    assert [p.name for p in paths] == [f"part-{i:05d}" for i in range(6)]  # 7 x 5 + 5
    read = [read_sequence_file(p.read_bytes(), str(p)) for p in paths]
    assert [len(k) for k, _ in read] == [7, 7, 7, 7, 7, 5]
    assert parts.records == 40
    np.testing.assert_array_equal(np.concatenate([k for k, _ in read]), keys)
    np.testing.assert_array_equal(np.concatenate([v for _, v in read]), values)


def test_an_empty_table_is_one_empty_part(tmp_path):
    parts = SparseParts(tmp_path)
    parts.add(np.empty(0, np.uint64), np.empty((0, 9), np.float32))
    (path,) = parts.close()
    assert path.name == "part-00000"
    keys, _ = read_sequence_file(path.read_bytes(), str(path), dim=9)
    assert len(keys) == 0 and parts.records == 0


@pytest.mark.parametrize("seed", range(8))
def test_the_check_folded_over_chunks_says_what_one_pass_says(seed):
    keys, values = table(60, seed)
    rng = np.random.default_rng(100 + seed)
    # Ties at the clamp and above it, so that the five named keys depend on the order kept.
    big = rng.choice(60, 12, replace=False)
    values[big, rng.integers(0, 9, 12)] = rng.choice([10.0, -10.0, 11.5], 12)
    if seed % 2:  # NaN and infinities win over size
        bad = rng.choice(60, 7, replace=False)
        values[bad, 0] = rng.choice([np.nan, np.inf, -np.inf], 7)
    whole = check_embeddings(keys, values, 10.0)
    assert len(whole) == 1
    scan = EmbeddingScan(10.0)
    for start, end in chunks(len(keys), seed):
        scan.add(keys[start:end], values[start:end])
    assert scan.problems() == whole


def test_the_check_names_the_largest_values_first_and_ties_in_key_order():
    keys = np.array([2, 4, 6, 8, 10, 12, 14], np.uint64)
    values = np.zeros((7, 9), np.float32)
    values[:, 0] = [10, 12, 10, 12, 10, 10, 10]
    scan = EmbeddingScan(100.0)
    scan.add(keys[:3], values[:3])
    scan.add(keys[3:], values[3:])
    assert scan.problems() == [
        "embeddings of 7 keys reach |value| >= 10 (the sparse rule's clamp): "
        "4: 12, 8: 12, 2: 10, 6: 10, 10: 10"
    ]


def dump(diff: ExportDiff, keys, values, cuts: list[tuple[int, int]]):
    """The export's rows and deletions as the dump streams key ranges [lo, hi)."""
    rows_k, rows_v = [], []
    for lo, hi in cuts:
        inside = (keys >= lo) & (keys < hi)
        k, v = diff.rows(lo, hi, keys[inside], values[inside])
        rows_k.append(k)
        rows_v.append(v)
    return np.concatenate(rows_k), np.concatenate(rows_v), diff.deleted_keys()


@pytest.mark.parametrize("seed", range(5))
def test_a_delta_applied_on_its_parent_is_the_dumped_table_bit_for_bit(tmp_path, seed):
    rng = np.random.default_rng(seed)
    snapshot = tmp_path / SNAPSHOT
    keys, values = table(300, seed)
    diff = ExportDiff(snapshot, None)  # the first export: a base
    written_k, written_v, deleted = dump(diff, keys, values, [(1, 1000), (1000, 3011)])
    assert len(deleted) == 0 and np.array_equal(written_k, keys)
    diff.commit(1, 9)
    served = dict(zip(keys.tolist(), written_v, strict=True))
    for version in range(2, 7):
        parent = Snapshot.open(snapshot, version - 1)
        assert parent is not None and Snapshot.open(snapshot, version) is None
        # updates, deletions, new keys, and changes no float comparison sees
        keys = np.array(sorted(served), np.uint64)
        values = np.array([served[k] for k in keys.tolist()], np.float32)
        values[rng.choice(len(keys), 20, replace=False)] += 1
        values[rng.integers(len(keys)), 0] = -0.0 if values[0, 0] == 0 else 0.0
        keep = rng.random(len(keys)) > 0.05
        new = np.setdiff1d(rng.integers(1, 3011, 15).astype(np.uint64), keys)
        keys = np.concatenate([keys[keep], new])
        values = np.concatenate([values[keep], rng.normal(size=(len(new), 9)).astype(np.float32)])
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        diff = ExportDiff(snapshot, parent)
        cuts = [(lo, min(lo + 500, 3011)) for lo in range(1, 3011, 500)]
        written_k, written_v, deleted = dump(diff, keys, values, cuts)
        assert len(written_k) < len(keys)  # only what changed
        for k in deleted.tolist():
            del served[k]
        served.update(zip(written_k.tolist(), written_v, strict=True))
        assert sorted(served) == keys.tolist()
        got = np.array([served[k] for k in keys.tolist()], np.float32)
        np.testing.assert_array_equal(got.view(np.uint32), values.view(np.uint32))
        if version == 4:  # not published (refused, or held back): the snapshot stays
            diff.discard()
            served = dict(zip(parent.keys.tolist(), np.array(parent.values), strict=True))
            keys, values = np.array(parent.keys), np.array(parent.values)
            diff = ExportDiff(snapshot, parent)
            dump(diff, keys, values, cuts)
        diff.commit(version, 9)


def test_a_snapshot_of_another_version_or_cut_short_is_not_used(tmp_path):
    snapshot = tmp_path / SNAPSHOT
    keys, values = table(50)
    diff = ExportDiff(snapshot, None)
    dump(diff, keys, values, [(0, 10**6)])
    assert Snapshot.open(snapshot, 1) is None  # not committed: nothing there
    diff.commit(1, 9)
    assert Snapshot.open(snapshot, 1) is not None and Snapshot.open(snapshot, 2) is None
    with open(snapshot / "values.f32", "r+b") as f:
        f.truncate(100)
    assert Snapshot.open(snapshot, 1) is None
