"""Model versions: their layout in the model store, and the donefile that makes one exist.

The trainer writes version V as `<V>/dense/{model.pdmodel, model.pdiparams, meta.json}`
(read by serving) and `<V>/sparse/part-NNNNN` (read by cube-transfer). The donefile holds
one JSON line per complete version, `{"id": V, "key": V, "input": URI}`, input naming
`<V>/sparse`, ids strictly increasing. The trainer appends a line only after every file of
V is written, so readers never see a half-written version.

A version is a base (its parts hold every key of the table) or a delta on a named parent,
an earlier version of the donefile: `{"id": V, "key": V, "input": URI, "parent": P}`, its
parts holding the keys whose values changed since P (or are new), and `<V>/sparse/_deleted`
the keys P had and V has not (little-endian uint64; the `_` keeps SequenceFile readers off
it). The dense model of a delta is whole, as every version's.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from .contract import DONEFILE
from .storage import Store

DENSE: Final = "dense"
SPARSE: Final = "sparse"
MODEL_META: Final = "meta.json"  # in dense/: slots, embedding_dim, sparse_dim, feed names...
# The inference model's two files in dense/ (meta.json's model_file and params_file, which
# serving reads, default to them).
MODEL_FILE: Final = "model.pdmodel"
PARAMS_FILE: Final = "model.pdiparams"
# In a delta's sparse directory: the keys it deletes, little-endian uint64.
DELETED: Final = "_deleted"


def dense_path(version: int, name: str = "") -> str:
    """`<V>/dense`, or a file in it, relative to the model store."""
    return f"{version}/{DENSE}" + (f"/{name}" if name else "")


def sparse_path(version: int, part: int | None = None) -> str:
    """`<V>/sparse` (a donefile line's input), or its part file `part`."""
    return f"{version}/{SPARSE}" + ("" if part is None else f"/part-{part:05d}")


def dense_beside(sparse_uri: str) -> str | None:
    """The URI of `<V>/dense` beside a donefile line's `<V>/sparse` input; None when the
    input is not laid out so (a version another exporter published)."""
    stripped = sparse_uri.rstrip("/")
    if not stripped.endswith("/" + SPARSE):
        return None
    return stripped[: -len(SPARSE)] + DENSE


class DonefileError(ValueError):
    """A donefile line is malformed or out of order; the message names the line."""


@dataclass(frozen=True)
class Version:
    id: int
    key: int
    input: str
    parent: int | None = None  # a delta's parent version; None: a base

    def to_line(self) -> str:
        line = asdict(self)
        if self.parent is None:
            del line["parent"]  # a base's line is the one Paddle Serving's readers know
        return json.dumps(line, separators=(",", ":"))


def deleted_keys_bytes(keys: NDArray[Any]) -> bytes:
    return np.asarray(keys, dtype="<u8").tobytes()


def parse_deleted_keys(data: bytes, source: str) -> NDArray[np.uint64]:
    if len(data) % 8:
        raise ValueError(f"{source}: {len(data)} bytes, not a list of uint64 keys")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64)


def parse_donefile(text: str, source: str = DONEFILE) -> list[Version]:
    versions: list[Version] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            version = Version(
                id=int(record["id"]),
                key=int(record["key"]),
                input=str(record["input"]),
                parent=None if record.get("parent") is None else int(record["parent"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise DonefileError(f"{source}:{number}: not a version line ({err}): {line!r}") from err
        if versions and version.id <= versions[-1].id:
            raise DonefileError(
                f"{source}:{number}: version {version.id} does not follow {versions[-1].id}"
            )
        if version.parent is not None and version.parent not in {v.id for v in versions}:
            raise DonefileError(
                f"{source}:{number}: version {version.id} is a delta on version "
                f"{version.parent}, which no earlier line of the donefile names"
            )
        versions.append(version)
    return versions


def read_versions(store: Store, name: str = DONEFILE) -> list[Version]:
    """Every complete version under `store`, oldest first; none if there is no donefile."""
    if not store.exists(name):
        return []
    return parse_donefile(store.read_text(name), source=store.uri(name))


def append_version(store: Store, version: Version, name: str = DONEFILE) -> None:
    """Publish `version` by rewriting the donefile atomically with one more line.

    There is one writer per donefile (trainer 0), so read-modify-write is safe.
    """
    versions = read_versions(store, name)
    if versions and version.id <= versions[-1].id:
        raise DonefileError(
            f"{store.uri(name)}: version {version.id} does not follow {versions[-1].id}"
        )
    if version.parent is not None and version.parent not in {v.id for v in versions}:
        raise DonefileError(
            f"{store.uri(name)}: version {version.id} is a delta on version {version.parent}, "
            "which the donefile does not name"
        )
    lines = [v.to_line() for v in [*versions, version]]
    store.write_text(name, "\n".join(lines) + "\n")
