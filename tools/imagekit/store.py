"""Where built images are kept: ${ELASTICCTR_CACHE:-~/.cache/elasticctr}/images/.

archives/<name>.tar   `buildah push IMG docker-archive:...` of each image (what
                      containerd imports; a machine that lost buildah's storage
                      restores bases from them instead of rebuilding)
contexts/<name>/      the staged build context of a stand-in (rebuilt each build)
index.json            per image: the key it was built from, its id, sizes, timings
file-hashes.json      content hashes remembered by file stat (fingerprint.py)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path


def cache_root() -> Path:
    base = os.environ.get("ELASTICCTR_CACHE") or str(Path.home() / ".cache" / "elasticctr")
    return Path(base) / "images"


@dataclass
class Entry:
    """What the last successful build of one image left behind."""

    key: str
    reference: str
    image_id: str
    archive: str
    # the docker-archive's size: the image's layers uncompressed
    archive_bytes: int
    build_seconds: float  # the last build that ran (not a cache hit)
    built_at: str
    # the manifest digest containerd gives this archive on import (the same archive always
    # gets the same one): import skips an image whose reference already points at it
    containerd_digest: str = ""


class Store:
    def __init__(self, root: Path | None = None) -> None:
        self.root = root or cache_root()
        self.archives = self.root / "archives"
        self.contexts = self.root / "contexts"
        self.downloads = self.root / "downloads"
        for directory in (self.archives, self.contexts, self.downloads):
            directory.mkdir(parents=True, exist_ok=True)
        self._index_file = self.root / "index.json"
        self.file_hashes = self.root / "file-hashes.json"

    def archive_of(self, name: str) -> Path:
        return self.archives / f"{name}.tar"

    def context_of(self, name: str) -> Path:
        return self.contexts / name

    def entries(self) -> dict[str, Entry]:
        if not self._index_file.is_file():
            return {}
        raw = json.loads(self._index_file.read_text())
        return {name: Entry(**value) for name, value in raw.items()}

    def save(self, name: str, entry: Entry) -> None:
        entries = self.entries()
        entries[name] = entry
        tmp = self._index_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({n: asdict(e) for n, e in entries.items()}, indent=1))
        tmp.replace(self._index_file)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """One build or import at a time per cache (they share buildah's storage too)."""
        with (self.root / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
