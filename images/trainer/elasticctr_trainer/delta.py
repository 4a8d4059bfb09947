"""Delta exports: which keys changed since the last published version, and which were
deleted, found by comparing the table trainer 0 dumps with the one it published last.

Paddle's pservers cannot say it exactly. The CTR accessor counts a `delta_score` per key
(raised by every push, reset by a `save` in mode 1, Paddle's "xbox delta"), but that save
writes each pserver's rows to the pserver's own disk as text with 6 significant digits
(`CtrCommonAccessor::ParseToString`), leaves out keys below `delta_threshold`, says
nothing of the keys `shrink` deleted, and resets the scores as it goes, so an export that
then fails its model check would lose them. So trainer 0 keeps the table of the last
version it published (its *snapshot*: keys ascending, values as float32, in its work
directory) and compares the dumped table with it chunk by chunk as the dump streams: a key
is in the delta when it is new or any of its value's bits differ, and deleted when the
snapshot has it and the table no longer does. The delta is therefore exact by
construction, whatever happened on the pservers (shrink, decay, a restore from a
checkpoint older than the published version). The snapshot names the version it holds;
it is used only when that is the last version of the donefile, else the export is a base
(a new work directory after a restart, a version published by someone else).
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

SNAPSHOT = "export-snapshot"
_META, _KEYS, _VALUES = "meta.json", "keys.u64", "values.f32"


@dataclass(frozen=True)
class Snapshot:
    """The table of a published version, mapped from disk (never whole in memory)."""

    version: int
    keys: NDArray[np.uint64]
    values: NDArray[np.float32]

    @classmethod
    def open(cls, directory: Path, version: int) -> Snapshot | None:
        """The snapshot in `directory` if it holds `version` whole, else None."""
        try:
            meta = json.loads((directory / _META).read_text())
            count, dim = int(meta["keys"]), int(meta["dim"])
            if int(meta["version"]) != version:
                return None
            sizes = [(directory / _KEYS).stat().st_size, (directory / _VALUES).stat().st_size]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if sizes != [count * 8, count * dim * 4]:
            return None
        if count == 0:
            return cls(version, np.zeros(0, np.uint64), np.zeros((0, dim), np.float32))
        keys = np.memmap(directory / _KEYS, dtype="<u8", mode="r")
        values = np.memmap(directory / _VALUES, dtype="<f4", mode="r").reshape(count, dim)
        return cls(version, keys, values)

    def rows(self, lo: int, hi: int) -> tuple[NDArray[np.uint64], NDArray[np.float32]]:
        """Its keys in [lo, hi) and their values."""
        a, b = np.searchsorted(self.keys, [lo, hi])
        return np.asarray(self.keys[a:b], np.uint64), np.asarray(self.values[a:b])


def _rows_differ(a: NDArray[Any], b: NDArray[Any]) -> NDArray[np.bool_]:
    """Per row, whether two float32 [n, dim] arrays differ in any bit (rows compared as
    opaque bytes: -0.0 is not 0.0, and NaNs compare by payload)."""
    a, b = np.ascontiguousarray(a, "<f4"), np.ascontiguousarray(b, "<f4")
    if a.shape[1] == 0:
        return np.zeros(len(a), bool)
    row = np.dtype((np.void, a.shape[1] * 4))
    return np.asarray(a.view(row).ravel() != b.view(row).ravel(), bool)


def changed_rows(
    old_keys: NDArray[Any], old_values: NDArray[Any], keys: NDArray[Any], values: NDArray[Any]
) -> tuple[NDArray[np.bool_], NDArray[np.uint64]]:
    """Of the rows `keys`/`values`, which are new or differ in any bit from the old rows;
    and the old keys that are gone. Both key lists are ascending (one binary search each)."""
    if len(old_keys) == len(keys) and np.array_equal(old_keys, keys):  # the usual chunk
        return _rows_differ(values, old_values), np.zeros(0, np.uint64)
    if len(old_keys) == 0:
        return np.ones(len(keys), bool), np.zeros(0, np.uint64)
    at = np.minimum(np.searchsorted(old_keys, keys), len(old_keys) - 1)
    same_key = old_keys[at] == keys
    new_rows, old_rows = np.flatnonzero(same_key), at[same_key]
    changed = ~same_key
    changed[new_rows] = _rows_differ(values[new_rows], old_values[old_rows])
    still = np.zeros(len(old_keys), bool)
    still[old_rows] = True
    return changed, np.asarray(old_keys[~still], np.uint64)


class ExportDiff:
    """One export's comparison with the snapshot of its parent (None: a base export): the
    rows to write, the deleted keys, and the next snapshot, written as the dump streams and
    put in place only when the version is published (`commit`)."""

    def __init__(self, directory: Path, parent: Snapshot | None) -> None:
        self.directory, self.parent = directory, parent
        self.pending = directory.with_name(directory.name + ".new")
        shutil.rmtree(self.pending, ignore_errors=True)
        self.pending.mkdir(parents=True)
        self._keys: BinaryIO | None = open(self.pending / _KEYS, "wb")  # noqa: SIM115
        self._values: BinaryIO | None = open(self.pending / _VALUES, "wb")  # noqa: SIM115
        self.count, self.dim = 0, 0
        self.deleted: list[NDArray[np.uint64]] = []
        self.seconds = 0.0  # spent here: the snapshot written, the comparison

    def rows(
        self, lo: int, hi: int, keys: NDArray[Any], values: NDArray[Any]
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        """The table's rows of keys [lo, hi) (ascending): recorded for the next snapshot;
        returned as the export writes them (all of them for a base, the changed ones for a
        delta), with the deletions of the range noted."""
        assert self._keys is not None and self._values is not None
        started = time.perf_counter()
        try:
            return self._rows(lo, hi, keys, values)
        finally:
            self.seconds += time.perf_counter() - started

    def _rows(
        self, lo: int, hi: int, keys: NDArray[Any], values: NDArray[Any]
    ) -> tuple[NDArray[Any], NDArray[Any]]:
        assert self._keys is not None and self._values is not None
        self._keys.write(np.asarray(keys, "<u8").tobytes())
        self._values.write(np.ascontiguousarray(values, "<f4").tobytes())
        self.count += len(keys)
        self.dim = values.shape[1] if len(keys) else self.dim
        if self.parent is None:
            return keys, values
        changed, gone = changed_rows(*self.parent.rows(lo, hi), keys, values)
        self.deleted.append(gone)
        return keys[changed], values[changed]

    def deleted_keys(self) -> NDArray[np.uint64]:
        return np.concatenate([np.zeros(0, np.uint64), *self.deleted])

    def close(self) -> None:
        for f in (self._keys, self._values):
            if f is not None:
                f.close()
        self._keys = self._values = None

    def commit(self, version: int, dim: int) -> None:
        """The dumped table becomes the snapshot of `version` (just published)."""
        self.close()
        meta = {"version": version, "keys": self.count, "dim": self.dim or dim}
        (self.pending / _META).write_text(json.dumps(meta))
        shutil.rmtree(self.directory, ignore_errors=True)
        self.pending.rename(self.directory)

    def discard(self) -> None:
        """Not published: the snapshot stays that of the last published version."""
        self.close()
        shutil.rmtree(self.pending, ignore_errors=True)
