"""The SequenceFile reader/writer against the format Paddle Serving's cube-builder reads."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
from elasticctr_common.seqfile import (
    RAW,
    SYNC_INTERVAL,
    WRITABLE,
    SequenceFileError,
    SequenceFileWriter,
    read_sequence_file,
)

SYNC = bytes(range(16))
# The header Paddle Serving's kvtool.SequenceFileWriter writes, byte for byte.
# '"' is the Hadoop VInt 34, the length of each class name.
PADDLE_HEADER = (
    b"SEQ\x06"
    b'"org.apache.hadoop.io.BytesWritable'
    b'"org.apache.hadoop.io.BytesWritable'
    b"\x00\x00\x00\x00\x00\x00"
)


def encode(keys, values, framing=RAW) -> bytes:
    out = io.BytesIO()
    SequenceFileWriter(out, framing, sync_marker=SYNC).write_arrays(keys, values)
    return out.getvalue()


def table(n=500, dim=10):
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    return keys, rng.standard_normal((n, dim)).astype(np.float32)


def test_header_and_records_match_paddles_writer():
    data = encode(np.array([1, 2**64 - 1], np.uint64), np.ones((2, 2), np.float32))
    assert data.startswith(PADDLE_HEADER + SYNC)
    first = data[len(PADDLE_HEADER) + 16 :][:24]
    # record length 16 and key length 8 big-endian, then the key as native little-endian
    assert first == struct.pack(">ii", 16, 8) + struct.pack("<Q", 1) + struct.pack("<2f", 1, 1)


@pytest.mark.parametrize("framing", [RAW, WRITABLE])
def test_round_trip_through_sync_markers(framing):
    keys, values = table()
    data = encode(keys, values, framing)
    assert data.count(b"\xff\xff\xff\xff" + SYNC) >= len(keys) * 48 // SYNC_INTERVAL - 1
    got_keys, got_values = read_sequence_file(data, "t")
    np.testing.assert_array_equal(got_keys, keys)
    np.testing.assert_array_equal(got_values, values)


def test_metadata_and_long_vint_lengths_are_parsed():
    meta_key, meta_value = b"k" * 200, b"v"  # 200 needs a 2-byte Hadoop VInt (0x8f 0xc8)
    header = (
        PADDLE_HEADER[:-4] + struct.pack(">i", 1) + b"\x8f\xc8" + meta_key + b"\x01" + meta_value
    )
    body = encode(np.array([5], np.uint64), np.ones((1, 3), np.float32))[len(PADDLE_HEADER) :]
    keys, values = read_sequence_file(header + body, "t")
    assert keys.tolist() == [5] and values.shape == (1, 3)


def test_empty_file_has_no_records():
    keys, values = read_sequence_file(PADDLE_HEADER + SYNC, "t")
    assert len(keys) == 0 and values.shape == (0, 0)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"XYZ" + d[3:], "not a Hadoop SequenceFile"),
        (lambda d: d[:3] + b"\x05" + d[4:], "version 5 is not supported"),
        (lambda d: d.replace(b"BytesWritable", b"BytesWritabIe", 1), "key class"),
        (lambda d: d[:74] + b"\x01" + d[75:], "compressed SequenceFiles are not supported"),
        (lambda d: d[:-7], "truncated record"),
        (lambda d: d[:100] + b"\x00" * 3, "truncated record header"),
    ],
)
def test_bad_input_is_a_clear_error(mutate, message):
    keys, values = table(50)
    with pytest.raises(SequenceFileError, match=message) as err:
        read_sequence_file(mutate(encode(keys, values)), "part-00000")
    assert "part-00000" in str(err.value)


def test_corrupt_sync_marker_is_detected():
    keys, values = table(200)
    data = bytearray(encode(keys, values))
    at = data.index(b"\xff\xff\xff\xff" + SYNC, len(PADDLE_HEADER) + 16)
    data[at + 10] ^= 0xFF
    with pytest.raises(SequenceFileError, match="sync marker does not match"):
        read_sequence_file(bytes(data), "t")


def test_wrong_dimension_is_named():
    keys, values = table(5, dim=9)
    with pytest.raises(
        SequenceFileError, match="wrong dimension: vectors have 9 floats, expected 8"
    ):
        read_sequence_file(encode(keys, values), "t", dim=8)


def test_records_of_different_dimensions_are_refused():
    out = io.BytesIO()
    writer = SequenceFileWriter(out, sync_marker=SYNC)
    writer.write(1, np.ones(4, np.float32).tobytes())
    writer.write(2, np.ones(5, np.float32).tobytes())
    with pytest.raises(SequenceFileError, match=r"5 floats differs from the first record"):
        read_sequence_file(out.getvalue(), "t")


def test_keys_that_are_not_8_bytes_are_refused():
    out = io.BytesIO()
    SequenceFileWriter(out, sync_marker=SYNC)
    out.write(struct.pack(">ii", 8, 4) + b"\x01\x02\x03\x04" + b"\x00" * 4)
    with pytest.raises(SequenceFileError, match="key of 4 bytes"):
        read_sequence_file(out.getvalue(), "t")


@pytest.mark.parametrize("n", [1, 45, 46, 500, 2003])
def test_numpy_reader_equals_the_record_by_record_reader(monkeypatch, n):
    """Raw files are read with numpy (seqfile._read_raw_records); the record loop reads
    everything else. Both give the same arrays, whatever the sync markers' positions."""
    import elasticctr_common.seqfile as seqfile

    keys, values = table(n, dim=9)
    data = encode(keys, values)
    fast = read_sequence_file(data)
    assert seqfile._read_raw_records(memoryview(data), len(PADDLE_HEADER) + 16, SYNC, 9)
    monkeypatch.setattr(seqfile, "_read_raw_records", lambda *args: None)
    exact = read_sequence_file(data)
    for got, want in ((fast[0], exact[0]), (fast[1], exact[1])):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(fast[0], keys) and np.array_equal(fast[1], values)


@pytest.mark.parametrize("sizes", [[1], [45, 1], [46], [47, 500], [2003], [3, 3, 200]])
def test_array_writer_writes_what_the_record_writer_writes(sizes):
    """write_arrays lays out whole runs between sync markers with numpy: byte for byte
    what `write` produces record by record, across consecutive calls too."""
    keys, values = table(sum(sizes), dim=9)
    by_record, by_array = io.BytesIO(), io.BytesIO()
    one, many = (
        SequenceFileWriter(by_record, sync_marker=SYNC),
        SequenceFileWriter(by_array, sync_marker=SYNC),
    )
    for key, row in zip(keys.tolist(), values, strict=True):
        one.write(key, row.tobytes())
    start = 0
    for size in sizes:
        many.write_arrays(keys[start : start + size], values[start : start + size])
        start += size
    assert by_array.getvalue() == by_record.getvalue()
