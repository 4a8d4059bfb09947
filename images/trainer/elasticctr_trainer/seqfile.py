"""SequenceFile writer for the sparse table, in the framing Paddle Serving's cube-builder
reads (its `seq_file.h` writer and `seqfile_reader.cpp`).

Header: `SEQ` + version 6, key and value class `org.apache.hadoop.io.BytesWritable` (as
Hadoop Text: one-byte length + name), compression flags false, no metadata, 16 random
sync bytes. Record: int32 big-endian record length, int32 big-endian key length (8),
the key as 8-byte little-endian uint64, the value as `embedding_dim` little-endian
float32. Like Paddle's writer, the key and value bytes are written as they are, without
the int32 size prefix Hadoop's own `BytesWritable.write` would add (cube-builder reads
the key as the first 8 bytes of the record's key). After every `SYNC_INTERVAL` bytes of
records comes a sync marker: int32 -1 and the header's sync bytes.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import numpy as np

MAGIC = b"SEQ\x06"
BYTES_WRITABLE = b"org.apache.hadoop.io.BytesWritable"
SYNC_INTERVAL = 2000  # what Paddle Serving's writer uses
SYNC_ESCAPE = b"\xff\xff\xff\xff"
KEY_BYTES = 8


def header(sync: bytes) -> bytes:
    class_name = bytes([len(BYTES_WRITABLE)]) + BYTES_WRITABLE
    no_compression, no_block_compression, no_metadata = b"\x00", b"\x00", b"\x00" * 4
    return (
        MAGIC + class_name + class_name + no_compression + no_block_compression + no_metadata + sync
    )


def record_dtype(embedding_dim: int) -> np.dtype:
    return np.dtype(
        [
            ("record_length", ">i4"),
            ("key_length", ">i4"),
            ("key", "<u8"),
            ("value", "<f4", (embedding_dim,)),
        ]
    )


def write_embeddings(out: BinaryIO, keys: np.ndarray, values: np.ndarray) -> int:
    """Write one SequenceFile of `keys[i] -> values[i]`; return the number of records."""
    count, dim = values.shape
    if keys.shape != (count,):
        raise ValueError(f"{keys.shape[0]} keys for {count} values")
    records = np.empty(count, dtype=record_dtype(dim))
    records["record_length"] = KEY_BYTES + 4 * dim
    records["key_length"] = KEY_BYTES
    records["key"] = keys.astype(np.uint64, copy=False)
    records["value"] = values.astype(np.float32, copy=False)
    sync = os.urandom(16)
    out.write(header(sync))
    record_bytes = KEY_BYTES + 4 * dim
    per_sync = -(-SYNC_INTERVAL // record_bytes)  # records until the byte count reaches it
    for start in range(0, count, per_sync):
        chunk = records[start : start + per_sync]
        out.write(chunk.tobytes())
        if len(chunk) == per_sync:
            out.write(SYNC_ESCAPE + sync)
    return count
