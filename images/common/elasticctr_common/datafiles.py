"""A data file's lines, whatever log pipeline wrote it: what the file holds is told by its
first bytes, never by its name. Text is read as it is; gzip, bzip2, xz and zstd data are
decompressed (concatenated streams too: log rotators append members to a file); a format
recognised but not read (archives, Parquet, lz4, snappy) is refused by name. One reading
for every reader of data files: the trainer's dataset pipe and its native twin
(images/trainer/pipe/src/input.rs, the same rules and messages), the evaluation of
held-out data and the client's `predict`. Several streams in one file (members, frames) are
read in turn, zero bytes between or after them skipped as padding.

Lines end with `\\n` (one `\\r` before it is dropped); a lone `\\r` stays in its line.
`data_lines` raises `BadFile` at the first sign that the file is not lines of text: a
refused format, a NUL byte, invalid UTF-8, or compressed data that breaks off or is
damaged (a truncated upload, a rotator killed mid-write). The lines before that point
were read: the caller has counted them, and counts the file as bad.
"""

from __future__ import annotations

import functools
import io
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, Protocol

__all__ = ["COMPRESSIONS", "NOT_READ", "BadFile", "data_lines", "text_lines"]

HEAD = 10  # leading bytes looked at: the longest signature below (bzip2's)
NOT_READ = "neither text nor gzip, bzip2, xz or zstd data"
# Formats recognised and refused (`<what>: NOT_READ`): archives and columnar files hold no
# lines, and lz4 and snappy framing are not what log pipelines write as files.
REFUSED = {
    b"PK\x03\x04": "a zip archive",
    b"PK\x05\x06": "a zip archive",
    b"7z\xbc\xaf\x27\x1c": "a 7z archive",
    b"PAR1": "a Parquet file",
    b"\x04\x22\x4d\x18": "lz4-compressed data",
    b"\xff\x06\x00\x00sNaPpY": "snappy-framed data",
}

CHUNK = 1 << 16


class Decompressor(Protocol):
    """One stream's decompressor: bz2's, lzma's and zstd's objects, and `_GzipMember`."""

    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    @property
    def needs_input(self) -> bool: ...
    def decompress(self, data: bytes, max_length: int = -1) -> bytes: ...


Decoder = tuple[Callable[[], Decompressor], tuple[type[Exception], ...]]


class BadFile(ValueError):
    """The file is not lines of text, as a whole or from some point on."""


# Each compression's one-stream decompressor and the errors it raises for damaged data.
# Imported for the files that need them: the pipe starts once per data file.
def _gzip() -> Decoder:
    import zlib

    return _GzipMember, (zlib.error,)


def _bzip2() -> Decoder:
    import bz2

    return bz2.BZ2Decompressor, (OSError,)


def _xz() -> Decoder:
    import lzma

    return functools.partial(lzma.LZMADecompressor, lzma.FORMAT_XZ), (lzma.LZMAError,)


def _zstd() -> Decoder:
    if sys.version_info >= (3, 14):
        from compression import zstd
    else:  # the standard library's module, backported (PEP 784)
        from backports import zstd

    return zstd.ZstdDecompressor, (zstd.ZstdError,)


class _GzipMember:
    """zlib's decompressor for one gzip member (header, CRC and length checked), with the
    interface of the others."""

    def __init__(self) -> None:
        import zlib

        self._zlib = zlib.decompressobj(wbits=31)
        self._tail = b""

    @property
    def eof(self) -> bool:
        return self._zlib.eof

    @property
    def unused_data(self) -> bytes:
        return self._zlib.unused_data

    @property
    def needs_input(self) -> bool:
        return not self._tail

    def decompress(self, data: bytes, max_length: int = -1) -> bytes:
        out = self._zlib.decompress(self._tail + data, max(max_length, 0))
        self._tail = self._zlib.unconsumed_tail
        return out


# (name, leading bytes, decoder). gzip: ID1 ID2. bzip2: "BZh", the block size, then a
# block's or the stream end's magic. xz: the stream header magic. zstd: a frame's magic or a
# skippable frame's (0x184D2A50..5F, little-endian), which pzstd writes first.
COMPRESSIONS: list[tuple[str, re.Pattern[bytes], Callable[[], Decoder]]] = [
    ("gzip", re.compile(rb"\x1f\x8b"), _gzip),
    ("bzip2", re.compile(rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)"), _bzip2),
    ("xz", re.compile(rb"\xfd7zXZ\x00"), _xz),
    ("zstd", re.compile(rb"\x28\xb5\x2f\xfd|[\x50-\x5f]\x2a\x4d\x18"), _zstd),
]


def data_lines(stream: IO[bytes]) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of a data file read from `stream`, decompressed
    if it is compressed data; BadFile at the first sign that it is not lines of text."""
    head, stream = _head(stream)
    for name, magic, decoder in COMPRESSIONS:
        if magic.match(head):
            new, errors = decoder()
            decoded = io.BufferedReader(_Streams(stream, new), CHUNK)
            yield from text_lines(_decoded(decoded, name, (EOFError, *errors)), name)
            return
    for signature, what in REFUSED.items():
        if head.startswith(signature):
            raise BadFile(f"{what}: {NOT_READ}")
    yield from text_lines(stream)


def text_lines(
    stream: Iterable[bytes], compression: str | None = None
) -> Iterator[tuple[int, str]]:
    """(line number, line) of a byte stream iterated by `\\n` (a binary file object, or
    `io.BytesIO`), without the line end; BadFile at a NUL byte or invalid UTF-8
    (`compression`: the file's, named in the error)."""
    within = f"{compression}: " if compression else ""
    for number, raw in enumerate(stream, start=1):
        if b"\x00" in raw:
            raise BadFile(f"{within}binary data (a NUL byte) at line {number}")
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise BadFile(f"{within}not UTF-8 text at line {number}") from None
        if line.endswith("\n"):
            line = line[:-2] if line.endswith("\r\n") else line[:-1]
        yield number, line


def broken(compression: str, lines: int) -> str:
    """Why a compressed file failed that broke off or is damaged after `lines` lines."""
    where = f"after line {lines}" if lines else "before its first line"
    return f"{compression}: truncated or corrupt data {where}"


def _decoded(
    decoded: Iterable[bytes], compression: str, errors: tuple[type[Exception], ...]
) -> Iterator[bytes]:
    """The decompressed lines; BadFile, after the last whole one, when the data breaks off
    or is damaged (a partial last line is dropped)."""
    lines = iter(decoded)
    read = 0
    while True:
        try:
            raw = next(lines)
        except StopIteration:
            return
        except errors as err:
            raise BadFile(broken(compression, read)) from err
        read += 1
        yield raw


class _Streams(io.RawIOBase):
    """Stream after stream of one compression, as one raw stream. After a stream's end
    comes the end of the file, zero bytes (padding: gzip and xz tools write and skip it,
    and it holds no data), or the next stream; anything else fails as a stream that does
    not decode, never ignored (BZ2File and LZMAFile would drop such trailing bytes unread).
    EOFError: the data ends inside a stream."""

    def __init__(self, raw: IO[bytes], new: Callable[[], Decompressor]) -> None:
        self.raw = raw
        self.new = new
        self.stream: Decompressor | None = new()
        self.input = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while self.stream is not None:
            if self.stream.eof:
                self.input = self.stream.unused_data.lstrip(b"\0")
                while not self.input:
                    chunk = self.raw.read(CHUNK)
                    if not chunk:
                        self.stream = None
                        return 0
                    self.input = chunk.lstrip(b"\0")
                self.stream = self.new()
                continue
            ended = False
            if self.stream.needs_input and not self.input:
                self.input = self.raw.read(CHUNK)
                ended = not self.input
            data = self.stream.decompress(self.input, len(view))
            self.input = b""
            if data:
                view[: len(data)] = data
                return len(data)
            if ended and not self.stream.eof:
                raise EOFError("the compressed data ends inside a stream")
        return 0


def _head(stream: IO[bytes]) -> tuple[bytes, IO[bytes]]:
    """The first HEAD bytes of `stream` (fewer if it is shorter) and a stream of all its
    bytes: `stream` itself, rewound, or (a pipe) one that replays the head first."""
    head = b""
    while len(head) < HEAD:
        chunk = stream.read(HEAD - len(head))
        if not chunk:
            break
        head += chunk
    if stream.seekable():
        stream.seek(-len(head), io.SEEK_CUR)
        return head, stream
    return head, io.BufferedReader(_Replay(head, stream))


class _Replay(io.RawIOBase):
    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head = head
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self.head:
            data, self.head = self.head[: len(view)], self.head[len(view) :]
        else:
            data = self.rest.read(len(view))
        view[: len(data)] = data
        return len(data)
