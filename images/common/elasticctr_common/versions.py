"""Model versions: the donefile that makes a version exist.

The donefile holds one JSON line per complete version, `{"id": V, "key": V, "input": URI}`,
ids strictly increasing. The trainer appends a line only after every file of V is written,
so readers never see a half-written version.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .contract import DONEFILE
from .storage import Store


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
