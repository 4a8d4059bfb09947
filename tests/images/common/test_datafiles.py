"""A data file's lines whatever wrote it (a gzip hour file was once read as 0 lines and
trained on by nobody): text as it is; gzip, bzip2, xz and zstd data, written by
the real tools, decompressed by its first bytes, concatenated streams too; compressed data
that breaks off or is damaged is a bad file after the lines it held; other binary data and
known formats that are not read are bad files, named."""

from __future__ import annotations

import io
import random
import re
import subprocess

import pytest
from elasticctr_common.datafiles import NOT_READ, BadFile, data_lines

from tests.support.compressors import READ, compress, concatenated

LINES = [f"{1 + i % 3} {i % 2} {i * 7919}:101 {i}:102" for i in range(20_000)]
TEXT = "".join(f"{line}\n" for line in LINES).encode()


def read(data: bytes) -> list[str]:
    return [line for _, line in data_lines(io.BytesIO(data))]


def read_until_bad(data: bytes) -> tuple[list[str], str]:
    """The lines read before the BadFile, and its message."""
    lines: list[str] = []
    with pytest.raises(BadFile) as bad:
        for _, line in data_lines(io.BytesIO(data)):
            lines.append(line)
    return lines, str(bad.value)


@pytest.mark.parametrize("tool", sorted(READ))
def test_compressed_data_reads_as_its_text(tool):
    assert read(compress(tool, TEXT)) == LINES


@pytest.mark.parametrize("tool", sorted(READ))
def test_concatenated_streams_read_whole(tool):
    """`cat a.gz b.gz > c.gz`, a rotator appending a member per flush, an empty member."""
    half = len(TEXT) // 2
    cut = TEXT.index(b"\n", half) + 1
    data = concatenated(tool, TEXT[:cut], b"", TEXT[cut:], b"1 1 5:101\n")
    assert read(data) == [*LINES, "1 1 5:101"]
    padded = compress(tool, TEXT[:cut]) + bytes(3) + compress(tool, TEXT[cut:]) + bytes(512)
    assert read(padded) == LINES  # zero padding, as tape-era tools wrote it, holds no data


@pytest.mark.parametrize("tool", sorted(READ))
def test_bytes_after_the_last_stream_are_not_ignored(tool):
    """BZ2File and LZMAFile would drop them unread: a silent loss if they were data."""
    lines, failed = read_until_bad(compress(tool, TEXT) + b"1 0 5:101\n")
    assert (lines, failed) == (LINES, f"{READ[tool]}: truncated or corrupt data after line 20000")


@pytest.mark.parametrize("tool", sorted(READ))
def test_truncated_data_is_a_bad_file_after_the_lines_it_held(tool):
    data = compress(tool, TEXT)
    for cut in (len(data) - 1, len(data) * 2 // 3, 14):
        lines, failed = read_until_bad(data[:cut])
        found = re.fullmatch(
            rf"{READ[tool]}: truncated or corrupt data (after line (\d+)|before its first line)",
            failed,
        )
        assert found, (cut, failed)
        assert len(lines) == int(found[2] or 0) and lines == LINES[: len(lines)]
    assert len(read_until_bad(data[: len(data) - 1])[0]) > 10_000  # what it held was read


@pytest.mark.parametrize("tool", sorted(READ))
def test_damaged_data_is_a_bad_file(tool):
    data = bytearray(compress(tool, TEXT))
    for at in range(len(data) // 2, len(data) // 2 + 8):
        data[at] ^= 0x55
    _, failed = read_until_bad(bytes(data))
    assert failed.startswith(f"{READ[tool]}: "), failed


def test_known_formats_that_are_not_read_are_refused_by_name(tmp_path):
    (tmp_path / "part-00000").write_bytes(TEXT[:1000])
    zipped = subprocess.run(
        ["zip", "-q", "-j", "-", str(tmp_path / "part-00000")], capture_output=True, check=True
    ).stdout
    for data, what in [
        (zipped, "a zip archive"),
        (compress("lz4", TEXT), "lz4-compressed data"),
        (b"PAR1\x15\x04\x15\x10\x15\x14L\x15\x02" + bytes(64), "a Parquet file"),
        (b"\xff\x06\x00\x00sNaPpY\x00\x10", "snappy-framed data"),
    ]:
        assert read_until_bad(data) == ([], f"{what}: {NOT_READ}")


def test_other_binary_data_is_a_bad_file_at_its_first_sign():
    noise = random.Random(22).randbytes(1 << 16)
    assert read_until_bad(noise)[1] in {
        "binary data (a NUL byte) at line 1",
        "not UTF-8 text at line 1",
    }
    lines, failed = read_until_bad(TEXT[:100] + noise)
    assert failed.endswith(f"at line {len(lines) + 1}") and lines == LINES[: len(lines)]
    inner = compress("gzip", b"1 0 5:101\n" + noise)
    assert read_until_bad(inner)[1].startswith("gzip: ")


def test_edges_are_text():
    assert read(b"") == []
    assert read(compress("gzip", b"")) == []
    assert read(b"1 0 5:101") == ["1 0 5:101"]  # no line end at the end
    # The first bytes of a signature, but not a whole one: text (bad lines, counted as such).
    assert read(b"BZh9 1 5:101\n\x1f\n") == ["BZh9 1 5:101", "\x1f"]
    assert read(b"PK\n") == ["PK"]


@pytest.mark.parametrize("tool", [None, "gzip", "zstd"])
def test_a_pipe_reads_as_the_file(tool, tmp_path):
    """stdin may be a pipe (`zcat | ...`, the client's `-`): the first bytes looked at are
    read again for the text."""
    path = tmp_path / "data"
    path.write_bytes(compress(tool, TEXT) if tool else TEXT)
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as cat:
        assert cat.stdout is not None and not cat.stdout.seekable()
        lines = [line for _, line in data_lines(cat.stdout)]
    assert lines == LINES
