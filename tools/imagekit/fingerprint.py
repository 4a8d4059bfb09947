"""Cache keys: a sha256 over labelled parts (texts, files, trees of files).

File contents are hashed once and remembered by (path, size, mtime, inode), so a second
run with nothing changed stats files instead of reading them (the Rust toolchain alone is
half a gigabyte).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path

# Bump when the meaning of a key changes (a new input, a different build command), so that
# every image is rebuilt once.
KEY_FORMAT = "1"


class FileHashes:
    """sha256 of file contents, remembered in a JSON file across runs."""

    def __init__(self, memo_file: Path) -> None:
        self._file = memo_file
        self._memo: dict[str, list[int | str]] = {}
        if memo_file.is_file():
            try:
                self._memo = json.loads(memo_file.read_text())
            except ValueError:
                self._memo = {}  # a torn write: hash again
        self._dirty = False

    def of(self, path: Path) -> str:
        stat = path.stat()
        stamp: list[int | str] = [stat.st_size, stat.st_mtime_ns, stat.st_ino]
        known = self._memo.get(str(path))
        if known is not None and known[:3] == stamp:
            return str(known[3])
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
        self._memo[str(path)] = [*stamp, digest.hexdigest()]
        self._dirty = True
        return digest.hexdigest()

    def save(self) -> None:
        if self._dirty:
            tmp = self._file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._memo))
            tmp.replace(self._file)
            self._dirty = False


class Fingerprint:
    """Accumulates the inputs of one image; `hexdigest()` is its cache key."""

    def __init__(self, hashes: FileHashes) -> None:
        self._hashes = hashes
        self._parts: list[str] = [f"format={KEY_FORMAT}"]

    def text(self, label: str, value: str) -> None:
        self._parts.append(f"{label}={hashlib.sha256(value.encode()).hexdigest()}")

    def file(self, label: str, path: Path) -> None:
        mode = "x" if os.access(path, os.X_OK) else "-"
        self._parts.append(f"{label}={mode}{self._hashes.of(path)}")

    def tree(self, label: str, root: Path, ignore: Iterable[str] = ()) -> None:
        """Every file under `root` (relative names, contents, executable bit), in name
        order, except those an ignore pattern excludes."""
        patterns = [_compile(p) for p in ignore]
        for path in sorted(_files(root)):
            relative = path.relative_to(root).as_posix()
            if not _ignored(relative, patterns):
                self.file(f"{label}/{relative}", path)

    def hexdigest(self) -> str:
        return hashlib.sha256("\n".join(self._parts).encode()).hexdigest()


def _files(root: Path) -> Iterable[Path]:
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory, name)
            if path.is_file():
                yield path


def read_ignore_file(path: Path) -> list[str]:
    """Patterns of a .dockerignore file (comments and blank lines dropped)."""
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("!"):
            # The project's ignore files have none; a silent mismatch with BuildKit's
            # semantics would make keys miss changes.
            raise ValueError(f"{path}: exception patterns (!) are not supported: {line}")
        patterns.append(line.strip("/"))
    return patterns


def _compile(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex over relative paths: `*` within one name,
    `**` across directories; a match on a directory covers everything below it."""
    out = []
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out.append("(?:.*/)?")
            index += 3
        elif pattern.startswith("**", index):
            out.append(".*")
            index += 2
        elif pattern[index] == "*":
            out.append("[^/]*")
            index += 1
        elif pattern[index] == "?":
            out.append("[^/]")
            index += 1
        else:
            out.append(re.escape(pattern[index]))
            index += 1
    return re.compile("".join(out) + "(?:/.*)?")


def _ignored(relative: str, patterns: list[re.Pattern[str]]) -> bool:
    return any(p.fullmatch(relative) for p in patterns)
