"""The binary batch protocol of cube-server (docs/cube.md has the byte tables).

Request:  magic CB 'C' 'Q' 01 | flags u32 (bit 0: version pinned) | version u64 |
          count u32 | reserved u32 | count x u64 keys                 (little-endian)
Response: magic CB 'C' 'R' 01 | status u32 | version u64 | count u32 | dim u32 |
          missing u32 | reserved u32 | status 0: count x dim x f32 values (zeros where
          missing) + ceil(count / 8) found-bit bytes (LSB first); else a `count`-byte
          UTF-8 error message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

REQUEST_MAGIC = b"\xcbCQ\x01"
RESPONSE_MAGIC = b"\xcbCR\x01"
FLAG_PINNED = 1
REQUEST_HEADER = struct.Struct("<4sIQII")
RESPONSE_HEADER = struct.Struct("<4sIQIIII")

OK, BAD_REQUEST, UNKNOWN_VERSION, TOO_LARGE, NOT_READY = range(5)
STATUS_NAMES = {
    OK: "ok",
    BAD_REQUEST: "bad request",
    UNKNOWN_VERSION: "unknown version",
    TOO_LARGE: "too large",
    NOT_READY: "not ready",
}


class ProtocolError(Exception):
    """The peer sent something that is not a cube binary response."""


@dataclass(frozen=True)
class ResponseHeader:
    status: int
    version: int
    count: int
    dim: int
    missing: int

    @property
    def body_bytes(self) -> int:
        """Bytes that follow the header."""
        if self.status != OK:
            return self.count
        return self.count * self.dim * 4 + (self.count + 7) // 8


def encode_request(keys: NDArray[np.integer[Any]], version: int | None = None) -> bytes:
    keys = np.ascontiguousarray(keys, dtype="<u8")
    flags = 0 if version is None else FLAG_PINNED
    head = REQUEST_HEADER.pack(REQUEST_MAGIC, flags, version or 0, len(keys), 0)
    return head + keys.tobytes()


def decode_header(data: bytes | bytearray | memoryview) -> ResponseHeader:
    magic, status, version, count, dim, missing, _ = RESPONSE_HEADER.unpack_from(data)
    if magic != RESPONSE_MAGIC:
        raise ProtocolError(f"not a cube binary response (magic {bytes(magic)!r})")
    return ResponseHeader(status, version, count, dim, missing)


def decode_body(
    header: ResponseHeader, body: bytes | bytearray | memoryview
) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
    """(values float32 [count, dim], found bool [count]) of an OK response body."""
    n, dim = header.count, header.dim
    values = np.frombuffer(body, dtype="<f4", count=n * dim).reshape(n, dim)
    bits = np.frombuffer(body, dtype=np.uint8, offset=n * dim * 4)
    found = np.unpackbits(bits, count=n, bitorder="little").astype(bool)
    return values, found
