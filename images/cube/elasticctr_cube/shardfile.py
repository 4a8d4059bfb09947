"""The shard file: one immutable, memory-mappable file per shard and version.

Layout (little-endian; the native server maps it as is, see server/src/shardfile.rs):

    0   magic "ECUBESH1"  8   format u32 = 1      12  header_len u32 = 64
    16  version u64       24  key_count u64       32  shard u32      36  shard_num u32
    40  dim u32           44  bucket_bits u32     48  body_crc32 u32 52  header_crc32 u32
    56  reserved (8 zero bytes)
    64  bucket table: (2^bucket_bits + 1) x u32, index of each bucket's first key
        zero padding to a multiple of 8
        keys: key_count x u64, ordered by (bucket, key)
        values: key_count x dim x f32, in key order

Format 2 is a delta on a parent version (delta.py): the same layout with the parent version
(u64) at offset 56, covered by the header checksum (CRC-32 of bytes [0, 52) then
[56, 64)), and after the values one bit per key (LSB first), set where the key is deleted
(its value is zeros). A base (format 1) holds every key of its version.

bucket(key) = mix64(key) >> (64 - bucket_bits) (mix64 = splitmix64's finalizer), with
about 4 keys per bucket: a lookup reads one table entry, scans ~4 adjacent keys and
copies one value. body_crc32 (zlib's CRC-32) covers bytes [64, end); the file size is
fixed by the header, so truncation is detected before the checksum.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

MAGIC = b"ECUBESH1"
FORMAT = 1
DELTA_FORMAT = 2
HEADER_LEN = 64
KEYS_PER_BUCKET = 4
MAX_KEYS = 2**32 - 1
_HEADER = struct.Struct("<8sIIQQIIIII")  # up to and including body_crc32 (52 bytes)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


class ShardFileError(ValueError):
    """A shard file is truncated, corrupt or not what was expected; names the file."""


class DuplicateKeyError(ValueError):
    """The input holds a key more than once."""


@dataclass(frozen=True)
class ShardHeader:
    version: int
    key_count: int
    shard: int
    shard_num: int
    dim: int
    bucket_bits: int
    body_crc32: int
    parent: int | None = None  # a delta's parent version (format 2); None for a base

    @property
    def table_offset(self) -> int:
        return HEADER_LEN

    @property
    def keys_offset(self) -> int:
        return (HEADER_LEN + ((1 << self.bucket_bits) + 1) * 4 + 7) & ~7

    @property
    def values_offset(self) -> int:
        return self.keys_offset + self.key_count * 8

    @property
    def deleted_offset(self) -> int:
        """Where a delta's deletion bits start: right after the values."""
        return self.values_offset + self.key_count * self.dim * 4

    @property
    def file_bytes(self) -> int:
        deleted = -(-self.key_count // 8) if self.parent is not None else 0
        return self.deleted_offset + deleted

    def pack(self) -> bytes:
        head = _HEADER.pack(
            MAGIC,
            FORMAT if self.parent is None else DELTA_FORMAT,
            HEADER_LEN,
            self.version,
            self.key_count,
            self.shard,
            self.shard_num,
            self.dim,
            self.bucket_bits,
            self.body_crc32,
        )
        if self.parent is None:
            return head + struct.pack("<I", zlib.crc32(head)) + bytes(8)
        parent = struct.pack("<Q", self.parent)
        return head + struct.pack("<I", zlib.crc32(parent, zlib.crc32(head))) + parent


def mix64(keys: NDArray[np.integer[Any]]) -> NDArray[np.uint64]:
    z = np.asarray(keys, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def bucket_bits_for(key_count: int) -> int:
    """Smallest power-of-two bucket count with at most KEYS_PER_BUCKET keys per bucket."""
    buckets = max(1, -(-key_count // KEYS_PER_BUCKET))
    return (buckets - 1).bit_length()


def buckets_of(keys: NDArray[np.integer[Any]], bits: int) -> NDArray[np.int64]:
    if bits == 0:
        return np.zeros(len(keys), dtype=np.int64)
    return (mix64(keys) >> np.uint64(64 - bits)).astype(np.int64)


def bucket_key_order(
    keys: NDArray[np.integer[Any]], buckets: NDArray[np.int64]
) -> NDArray[np.intp]:
    """The permutation ordering keys by (bucket, key): `np.lexsort((keys, buckets))`, done
    as two plain sorts of 64-bit values (lexsort took 4.3 s for a 3.3M-key shard, this
    ~1 s): a key's rank among the keys fits 32 bits (MAX_KEYS), and so does its bucket."""
    rank = np.empty(len(keys), dtype=np.uint64)
    rank[np.argsort(keys)] = np.arange(len(keys), dtype=np.uint64)
    return np.argsort((buckets.astype(np.uint64) << np.uint64(32)) | rank)


@dataclass(frozen=True)
class WrittenShard:
    path: Path
    header: ShardHeader
    bytes: int
    sha256: str


def write_shard_file(
    path: str | Path,
    *,
    version: int,
    shard: int,
    shard_num: int,
    keys: NDArray[np.integer[Any]],
    values: NDArray[np.floating[Any]],
    parent: int | None = None,
    deleted: NDArray[np.bool_] | None = None,
) -> WrittenShard:
    """Sort `keys`/`values` into the shard layout and write them to `path`; with
    `parent`, a delta on it, `deleted` marking the keys it deletes (their values are
    written as zeros)."""
    keys = np.asarray(keys, dtype=np.uint64)
    values = np.ascontiguousarray(values, dtype="<f4")
    if deleted is not None and parent is None:
        raise ValueError("only a delta (parent=...) deletes keys")
    if values.ndim != 2 or len(values) != len(keys) or values.shape[1] == 0:
        raise ValueError(f"values must be [{len(keys)}, dim > 0], got {values.shape}")
    if len(keys) > MAX_KEYS:
        raise ValueError(f"{len(keys)} keys exceed {MAX_KEYS} per shard: use more shards")
    bits = bucket_bits_for(len(keys))
    buckets = buckets_of(keys, bits)
    order = bucket_key_order(keys, buckets)
    keys, values, buckets = keys[order], values[order], buckets[order]
    gone = np.zeros(len(keys), bool) if deleted is None else np.asarray(deleted, bool)[order]
    repeated = np.flatnonzero(keys[1:] == keys[:-1])
    if len(repeated):
        dupes = np.unique(keys[repeated])
        shown = ", ".join(str(k) for k in dupes[:5].tolist())
        raise DuplicateKeyError(
            f"{len(dupes)} keys occur more than once in the input, e.g. {shown}"
        )
    table = np.zeros((1 << bits) + 1, dtype="<u4")
    np.cumsum(np.bincount(buckets, minlength=1 << bits), out=table[1:])
    header = ShardHeader(version, len(keys), shard, shard_num, values.shape[1], bits, 0, parent)
    pad = bytes(header.keys_offset - HEADER_LEN - table.nbytes)
    if gone.any():
        values = values.copy()
        values[gone] = 0
    parts = [table.tobytes(), pad, keys.astype("<u8").tobytes(), values.tobytes()]
    if parent is not None:
        parts.append(np.packbits(gone, bitorder="little").tobytes())
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    header = ShardHeader(version, len(keys), shard, shard_num, values.shape[1], bits, crc, parent)
    digest = hashlib.sha256()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as out:
        for part in [header.pack(), *parts]:
            out.write(part)
            digest.update(part)
    tmp.replace(path)
    return WrittenShard(path, header, header.file_bytes, digest.hexdigest())


def read_header(data: bytes | memoryview, source: str) -> ShardHeader:
    if len(data) < HEADER_LEN:
        raise ShardFileError(f"{source}: truncated: {len(data)} bytes, no complete header")
    fields = _HEADER.unpack_from(data, 0)
    if fields[0] != MAGIC:
        raise ShardFileError(f"{source}: not a cube shard file (bad magic {fields[0]!r})")
    if fields[1] not in (FORMAT, DELTA_FORMAT) or fields[2] != HEADER_LEN:
        raise ShardFileError(f"{source}: unsupported shard file format {fields[1]}")
    header_crc, parent = struct.unpack_from("<IQ", data, 52)
    crc = zlib.crc32(bytes(data[:52]))
    if fields[1] == DELTA_FORMAT:
        crc = zlib.crc32(bytes(data[56:64]), crc)
    if crc != header_crc:
        raise ShardFileError(f"{source}: corrupt header (header checksum mismatch)")
    version, key_count, shard, shard_num, dim, bits, body_crc = fields[3:]
    delta_parent = parent if fields[1] == DELTA_FORMAT else None
    return ShardHeader(version, key_count, shard, shard_num, dim, bits, body_crc, delta_parent)


@dataclass(frozen=True)
class ShardData:
    """A shard file's contents: its keys, values [n, dim] and (a delta's) deletions."""

    header: ShardHeader
    keys: NDArray[np.uint64]
    values: NDArray[np.float32]
    deleted: NDArray[np.bool_]


def read_shard_data(path: str | Path) -> ShardData:
    """Check a shard file as the server does and return what it holds."""
    header, keys, values = read_shard_file(path)
    if header.parent is None:
        return ShardData(header, keys, values, np.zeros(len(keys), bool))
    bits = np.frombuffer(
        Path(path).read_bytes(), np.uint8, -(-header.key_count // 8), header.deleted_offset
    )
    deleted = np.unpackbits(bits, count=header.key_count, bitorder="little").astype(bool)
    return ShardData(header, keys, values, deleted)


def read_shard_file(
    path: str | Path,
) -> tuple[ShardHeader, NDArray[np.uint64], NDArray[np.float32]]:
    """Check a shard file as the server does; (header, keys, values [n, dim])."""
    data = Path(path).read_bytes()
    header = read_header(data, str(path))
    if len(data) != header.file_bytes:
        what = "truncated" if len(data) < header.file_bytes else "has trailing bytes"
        raise ShardFileError(
            f"{path}: {what}: {len(data)} bytes, header describes {header.file_bytes}"
        )
    if zlib.crc32(memoryview(data)[HEADER_LEN:]) != header.body_crc32:
        raise ShardFileError(f"{path}: corrupt data (body checksum mismatch)")
    keys = np.frombuffer(data, "<u8", header.key_count, header.keys_offset)
    values = np.frombuffer(data, "<f4", header.key_count * header.dim, header.values_offset)
    return header, keys, values.reshape(header.key_count, header.dim)


NAMED_KEYS = 5  # the keys an error names, at most
SCAN_CHUNK = 1 << 20  # a multiple of 4: the scan reads whole floats


def nonfinite_text(count: int, keys: Iterable[int]) -> str:
    """How the builder and the agent word the keys they refuse."""
    named = ", ".join(str(k) for k in keys)
    return (
        f"{count} keys have NaN or infinite values (e.g. {named}); "
        "cube serves finite embeddings only"
    )


@dataclass(frozen=True)
class ShardScan:
    """What the agent verifies of a fetched shard file before its server loads it."""

    sha256: str
    nonfinite_keys: int  # keys with a NaN or infinite value (0 if the header is unreadable)
    named_keys: tuple[int, ...]  # the first NAMED_KEYS of them, in file order


def scan_shard_file(path: str | Path) -> ShardScan:
    """SHA-256 of the file and the keys whose values are not finite, in one read of 1 MiB
    chunks (the values checked with numpy as they pass): memory stays at one chunk
    whatever the shard's size. A file whose header does not parse is only hashed: its
    digest cannot match the manifest's, or the server refuses it at load."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        head = f.read(HEADER_LEN)
        digest.update(head)
        try:
            header: ShardHeader | None = read_header(head, str(path))
        except ShardFileError:
            header = None
        start = header.values_offset if header else 0
        end = header.deleted_offset if header else 0
        dim = header.dim if header else 1
        bad, last = 0, -1  # last: the key index counted at the previous chunk
        named: list[int] = []
        at = HEADER_LEN
        while chunk := f.read(SCAN_CHUNK):
            digest.update(chunk)
            lo, hi = max(at, start), min(at + len(chunk), end)
            if lo < hi:  # values of this chunk: offsets stay multiples of 4 (start is)
                floats = np.frombuffer(chunk, "<f4", (hi - lo) // 4, lo - at)
                finite = np.isfinite(floats)
                if not finite.all():
                    first = (lo - start) // 4
                    rows = np.unique((np.flatnonzero(~finite) + first) // dim)
                    rows = rows[rows != last]
                    bad += len(rows)
                    named += rows[: NAMED_KEYS - len(named)].tolist()
                    last = int(rows[-1]) if len(rows) else last
            at += len(chunk)
        keys = [] if header is None else [_key_at(f, header, row) for row in named]
    return ShardScan(digest.hexdigest(), bad, tuple(keys))


def _key_at(f: BinaryIO, header: ShardHeader, row: int) -> int:
    f.seek(header.keys_offset + 8 * row)
    return int.from_bytes(f.read(8), "little")
