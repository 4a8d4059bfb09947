"""cube-builder: SequenceFiles -> per-shard files, manifest, publish; bad input is refused."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest
from elasticctr_common.seqfile import write_sequence_file
from elasticctr_common.storage import open_store
from elasticctr_cube import shardfile
from elasticctr_cube.builder import BuildError, build, main, publish
from elasticctr_cube.manifest import read_manifest
from elasticctr_cube.shardfile import (
    HEADER_LEN,
    ShardFileError,
    bucket_bits_for,
    bucket_key_order,
    buckets_of,
    read_shard_file,
    scan_shard_file,
)

from tests.support.cube import model_table, write_model_version


def test_build_partitions_keys_by_modulo_and_writes_a_manifest(tmp_path):
    keys, values = model_table(version=4, n=2000)
    uri = write_model_version(tmp_path / "models", 4, keys, values, parts=3)
    manifest = build(uri, tmp_path / "out", version=4, shard_num=3)
    assert (manifest.version, manifest.shard_num, manifest.dim) == (4, 3, 8)
    assert manifest.key_count == len(keys) == sum(e.keys for e in manifest.shards)
    for entry in manifest.shards:
        path = tmp_path / "out" / entry.file
        assert entry.sha256 == scan_shard_file(path).sha256 and entry.bytes == path.stat().st_size
        header, shard_keys, shard_values = read_shard_file(path)
        assert (header.version, header.shard, header.shard_num) == (4, entry.shard, 3)
        assert (shard_keys % 3 == entry.shard).all()
        index = np.searchsorted(keys, shard_keys)
        np.testing.assert_array_equal(keys[index], shard_keys)
        np.testing.assert_array_equal(values[index], shard_values)
    on_disk = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert on_disk["shards"][0]["file"] == "shard-0.cube"


def test_publish_writes_the_manifest_last_and_the_cli_does_both(tmp_path):
    keys, values = model_table(version=1, n=100)
    uri = write_model_version(tmp_path / "models", 1, keys, values)
    cube = open_store(f"file://{tmp_path / 'cube'}")
    manifest = build(uri, tmp_path / "out", version=1, shard_num=2)
    publish(tmp_path / "out", manifest, cube)
    assert read_manifest(cube, 1) == manifest
    assert main(["--input", uri, "--output", cube.uri(), "--version", "2", "--shards", "2"]) == 0
    assert read_manifest(cube, 2).key_count == len(keys)


def test_bucket_table_sizes():
    assert [bucket_bits_for(n) for n in (0, 1, 4, 5, 8, 9, 1_000_000)] == [0, 0, 0, 1, 1, 2, 18]


@pytest.mark.parametrize("count", [1, 4, 5, 1000, 20_000])
def test_shard_order_is_by_bucket_then_key(count):
    """The shard file's key order (bucket, key), as np.lexsort gives it, duplicates
    included (they must stay adjacent for the duplicate check)."""
    rng = np.random.default_rng(count)
    keys = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True)
    keys[: count // 10] = keys[count // 10 : 2 * (count // 10)]
    buckets = buckets_of(keys, bucket_bits_for(count))
    order = bucket_key_order(keys, buckets)
    expected = np.lexsort((keys, buckets))
    assert np.array_equal(keys[order], keys[expected])
    assert np.array_equal(buckets[order], buckets[expected])


def test_duplicate_keys_across_files_are_refused(tmp_path):
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    write_sequence_file(sparse / "part-0", [(7, bytes(8)), (9, bytes(8))])
    write_sequence_file(sparse / "part-1", [(7, bytes(8))])
    with pytest.raises(BuildError, match=r"shard 1: 1 keys occur more than once .* e\.g\. 7"):
        build(f"file://{sparse}", tmp_path / "out", version=1, shard_num=2)


def test_wrong_dimension_is_refused(tmp_path):
    keys, values = model_table(version=1, n=50)
    uri = write_model_version(tmp_path / "models", 1, keys, values)
    with pytest.raises(BuildError, match="vectors have 8 floats, expected 9"):
        build(uri, tmp_path / "out", version=1, shard_num=2, dim=9)


def test_files_of_different_dimensions_are_refused(tmp_path):
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    write_sequence_file(sparse / "part-0", [(1, bytes(8))])
    write_sequence_file(sparse / "part-1", [(2, bytes(12))])
    with pytest.raises(BuildError, match=r"part-1.*vectors have 3 floats, expected 2"):
        build(f"file://{sparse}", tmp_path / "out", version=1, shard_num=2)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_values_that_are_not_finite_are_refused_naming_version_file_and_keys(tmp_path, bad):
    """The trainer checks its export, but a damaged or foreign export skips that check."""
    keys, values = model_table(version=3, n=400)
    values[[10, 11, 12, 13, 14, 15, 100], 5] = bad  # 7 keys of part-00000 (the first half)
    uri = write_model_version(tmp_path / "models", 3, keys, values)
    named = ", ".join(str(k) for k in keys[[10, 11, 12, 13, 14]])
    message = (
        f"version 3: {uri}/part-00000: 7 keys have NaN or infinite values (e.g. {named}); "
        "cube serves finite embeddings only"
    )
    with pytest.raises(BuildError) as refused:
        build(uri, tmp_path / "out", version=3, shard_num=2)
    assert str(refused.value) == message
    assert not (tmp_path / "out" / "manifest.json").exists()
    cube = f"file://{tmp_path / 'cube'}"
    with pytest.raises(SystemExit, match=f"cube-builder: {re.escape(message)}"):
        main(["--input", uri, "--output", cube, "--version", "3", "--shards", "2"])
    assert not (tmp_path / "cube" / "3").exists()


def test_empty_or_missing_input_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match="no input files"):
        build(f"file://{tmp_path / 'empty'}", tmp_path / "out", version=1, shard_num=2)
    write_sequence_file(tmp_path / "empty" / "part-0", [])
    with pytest.raises(BuildError, match="holds no records"):
        build(f"file://{tmp_path / 'empty'}", tmp_path / "out", version=1, shard_num=2)


def test_truncated_or_corrupt_shard_files_are_detected(tmp_path):
    keys, values = model_table(version=1, n=300)
    uri = write_model_version(tmp_path / "models", 1, keys, values)
    path = tmp_path / "out" / build(uri, tmp_path / "out", version=1, shard_num=1).shards[0].file
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    with pytest.raises(ShardFileError, match="truncated"):
        read_shard_file(path)
    path.write_bytes(
        data[: HEADER_LEN + 100] + bytes([data[HEADER_LEN + 100] ^ 1]) + data[HEADER_LEN + 101 :]
    )
    with pytest.raises(ShardFileError, match="body checksum mismatch"):
        read_shard_file(path)
    path.write_bytes(data[:20] + bytes([data[20] ^ 1]) + data[21:])
    with pytest.raises(ShardFileError, match="header checksum mismatch"):
        read_shard_file(path)


@pytest.mark.parametrize("chunk", [shardfile.SCAN_CHUNK, 388])
def test_the_agents_scan_hashes_and_finds_values_that_are_not_finite(tmp_path, monkeypatch, chunk):
    """A shard file written by hand (or by a builder that did not check) with NaN and inf:
    the scan counts each such key once, even when its vector spans two chunks (dim 3 =
    12 bytes against 388-byte chunks), and names the first ones in file order."""
    monkeypatch.setattr(shardfile, "SCAN_CHUNK", chunk)
    keys, values = model_table(version=2, n=300, dim=3)
    clean = shardfile.write_shard_file(
        tmp_path / "clean.cube", version=2, shard=0, shard_num=1, keys=keys, values=values
    )
    assert scan_shard_file(clean.path) == shardfile.ShardScan(clean.sha256, 0, ())
    values[[3, 50, 51, 52, 120, 121, 299]] = np.nan  # whole vectors
    values[200, 1], values[201, 2] = np.inf, -np.inf  # one value of each
    dirty = shardfile.write_shard_file(
        tmp_path / "dirty.cube", version=2, shard=0, shard_num=1, keys=keys, values=values
    )
    _, file_keys, file_values = read_shard_file(dirty.path)
    in_file_order = file_keys[~np.isfinite(file_values).all(axis=1)]
    scan = scan_shard_file(dirty.path)
    assert scan.sha256 == dirty.sha256 == hashlib.sha256(dirty.path.read_bytes()).hexdigest()
    assert (scan.nonfinite_keys, scan.named_keys) == (9, tuple(in_file_order[:5].tolist()))
    damaged = tmp_path / "damaged.cube"  # a header that does not parse: hashed only
    damaged.write_bytes(b"X" + dirty.path.read_bytes()[1:])
    assert scan_shard_file(damaged).nonfinite_keys == 0
