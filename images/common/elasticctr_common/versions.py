"""Model versions: their layout in the model store, and the donefile that makes one exist.

The trainer writes version V as `<V>/dense/{model.pdmodel, model.pdiparams, meta.json}`
(read by serving) and `<V>/sparse/part-NNNNN` (read by cube-transfer). The donefile holds
one JSON line per complete version, `{"id": V, "key": V, "input": URI}`, input naming
`<V>/sparse`, ids strictly increasing. The trainer appends a line only after every file of
V is written, so readers never see a half-written version.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Final

from .contract import DONEFILE
from .storage import Store

DENSE: Final = "dense"
SPARSE: Final = "sparse"
MODEL_META: Final = "meta.json"  # in dense/: slots, embedding_dim, sparse_dim, feed names...
# The inference model's two files in dense/ (meta.json's model_file and params_file, which
# serving reads, default to them).
MODEL_FILE: Final = "model.pdmodel"
PARAMS_FILE: Final = "model.pdiparams"


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

    def to_line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))


def parse_donefile(text: str, source: str = DONEFILE) -> list[Version]:
    versions: list[Version] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            version = Version(
                id=int(record["id"]), key=int(record["key"]), input=str(record["input"])
            )
        except (ValueError, KeyError, TypeError) as err:
            raise DonefileError(f"{source}:{number}: not a version line ({err}): {line!r}") from err
        if versions and version.id <= versions[-1].id:
            raise DonefileError(
                f"{source}:{number}: version {version.id} does not follow {versions[-1].id}"
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
    lines = [v.to_line() for v in [*versions, version]]
    store.write_text(name, "\n".join(lines) + "\n")
