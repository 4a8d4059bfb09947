"""The version manifest: `<cube_uri>/shards-<N>/<V>/manifest.json`, written after every
shard file.

A published version exists only once its manifest exists (the last write of a publish).
A version is a base (its shard files hold every key) or a delta on `parent` (its shard
files hold the keys changed since the parent and the keys deleted; shardfile.py, format
2); `base` is the base its chain of deltas starts from, `depth` how many deltas the chain
has up to this version and `chain_keys` how many keys they hold in all (the compaction
policy reads both, transfer.py).
Versions are built per shard count, each count under its own directory (its layout): a
cube of N shards reads `shards-<N>/`, so servers of a new shard count never meet shard
files cut for another, and the old count keeps its files while it still serves.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from elasticctr_common.cube.conf import DICT_NAME
from elasticctr_common.storage import Store

MANIFEST = "manifest.json"
CURRENT = "current"  # {"version": V}: the version every shard serves, written at commit
LAYOUT_PREFIX = "shards-"


def layout_dir(shard_num: int) -> str:
    """The directory, under the cube store, of the versions built for `shard_num` shards."""
    return f"{LAYOUT_PREFIX}{shard_num}"


class ManifestError(ValueError):
    """A manifest is missing, malformed or does not fit the reader; names the URI."""


def shard_file_name(shard: int) -> str:
    return f"shard-{shard}.cube"


@dataclass(frozen=True)
class ShardEntry:
    shard: int
    file: str
    keys: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    version: int
    shard_num: int
    dim: int
    key_count: int
    input: str
    dict_name: str = DICT_NAME
    built_at: str = ""
    shards: list[ShardEntry] = field(default_factory=list)
    format: int = 1
    parent: int | None = None
    base: int | None = None  # None: this version is a base
    depth: int = 0
    chain_keys: int = 0

    @property
    def is_delta(self) -> bool:
        return self.parent is not None

    def entry(self, shard: int) -> ShardEntry:
        for e in self.shards:
            if e.shard == shard:
                return e
        raise ManifestError(f"version {self.version}: manifest has no shard {shard}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str, source: str) -> Manifest:
        try:
            raw = json.loads(text)
            shards = [ShardEntry(**s) for s in raw.pop("shards")]
            manifest = cls(**raw, shards=shards)
        except (ValueError, TypeError, KeyError) as err:
            raise ManifestError(f"{source}: not a cube manifest ({err})") from err
        if sorted(e.shard for e in manifest.shards) != list(range(manifest.shard_num)):
            raise ManifestError(f"{source}: shards do not cover 0..{manifest.shard_num - 1}")
        return manifest


def read_manifest(cube_store: Store, version: int) -> Manifest:
    path = f"{version}/{MANIFEST}"
    if not cube_store.exists(path):
        raise ManifestError(f"{cube_store.uri(path)}: version {version} is not published")
    return Manifest.from_json(cube_store.read_text(path), cube_store.uri(path))


def read_chain(cube_store: Store, version: int) -> list[Manifest]:
    """The manifests `version` is made of: its base first, then each delta up to it."""
    chain = [read_manifest(cube_store, version)]
    while chain[0].parent is not None:
        parent = chain[0].parent
        try:
            chain.insert(0, read_manifest(cube_store, parent))
        except ManifestError as err:
            raise ManifestError(
                f"version {version}: the delta chain is broken at version {parent}: {err}"
            ) from err
    return chain


def read_current(cube_store: Store) -> int | None:
    """The committed version under `cube_store`, or None before the first commit."""
    if not cube_store.exists(CURRENT):
        return None
    try:
        return int(json.loads(cube_store.read_text(CURRENT))["version"])
    except (ValueError, KeyError, TypeError) as err:
        raise ManifestError(f"{cube_store.uri(CURRENT)}: malformed ({err})") from err


def write_current(cube_store: Store, version: int) -> None:
    cube_store.write_text(CURRENT, json.dumps({"version": version}))
