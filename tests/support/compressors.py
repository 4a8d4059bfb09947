"""Compressed data files as log pipelines write them: by the real command-line tools
(Debian's gzip, bzip2, xz-utils, zstd, lz4 and zip; tools/setup.sh checks they are there)."""

from __future__ import annotations

import subprocess

# name -> the command that compresses stdin to stdout. pzstd writes a skippable frame
# before each zstd frame; `gzip -1` and `xz -0` keep the tests quick.
COMMANDS = {
    "gzip": ["gzip", "-c", "-1"],
    "bzip2": ["bzip2", "-c"],
    "xz": ["xz", "-c", "-0"],
    "zstd": ["zstd", "-c", "-q"],
    "pzstd": ["pzstd", "-c", "-q", "-p", "2"],
    "lz4": ["lz4", "-c", "-q"],
}
# What the data readers name each compression they read.
READ = {"gzip": "gzip", "bzip2": "bzip2", "xz": "xz", "zstd": "zstd", "pzstd": "zstd"}


def compress(tool: str, data: bytes) -> bytes:
    return subprocess.run(COMMANDS[tool], input=data, capture_output=True, check=True).stdout


def concatenated(tool: str, *parts: bytes) -> bytes:
    """One file of several streams (members, frames), as `cat a.gz b.gz` or a log rotator
    appending to a file writes it."""
    return b"".join(compress(tool, part) for part in parts)
