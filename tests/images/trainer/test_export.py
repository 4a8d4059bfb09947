"""The export's streaming halves: the SequenceFile parts written chunk by chunk, and the
model check folded over the same chunks, each equal to doing it on the whole table."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from elasticctr_common.seqfile import read_sequence_file
from elasticctr_trainer import export
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
