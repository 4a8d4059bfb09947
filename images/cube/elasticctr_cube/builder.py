"""cube-builder: SequenceFile export -> per-shard files + manifest, then publish.

Input: every file under the version's `input` URI whose name does not start with `_` or
`.` (Hadoop SequenceFiles, see seqfile.py). Keys go to shard `key % shard_num`. Each
input file is parsed and partitioned into per-shard spill files, then each shard is
sorted and written (shardfile.py), so memory peaks at one input file plus one shard.

A delta export (a donefile line with a parent) becomes delta shard files on the parent's
cube version (`build(..., parent=manifest)`): the changed keys and the deleted ones
(`<V>/sparse/_deleted`), per shard. `merge` makes a base of a version from a chain of
sources, oldest first (a base and the deltas on it, as cube shard files of any shard count
or as model exports): the last source that has a key decides its value or its deletion.

Every value must be finite: the trainer checks its export, but a damaged or foreign
export reaches the model store without that check, and a NaN embedding would otherwise
be served (as NaN scores).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from elasticctr_common.cube.conf import DICT_NAME
from elasticctr_common.seqfile import SequenceFileError, read_sequence_file
from elasticctr_common.storage import Store, open_store
from elasticctr_common.versions import DELETED, parse_deleted_keys
from numpy.typing import NDArray

from .manifest import (
    MANIFEST,
    Manifest,
    ManifestError,
    ShardEntry,
    read_manifest,
    shard_file_name,
)
from .shardfile import (
    NAMED_KEYS,
    DuplicateKeyError,
    nonfinite_text,
    read_shard_data,
    write_shard_file,
)


class BuildError(ValueError):
    """The input cannot become a cube version; the message says which file and why."""


def input_files(store: Store) -> list[str]:
    names = [n for n in store.list() if not n.startswith(("_", "."))]
    if not names:
        raise BuildError(f"{store.uri()}: no input files (SequenceFile parts) found")
    return names


def build(
    input_uri: str,
    out_dir: str | Path,
    *,
    version: int,
    shard_num: int,
    dim: int | None = None,
    dict_name: str = DICT_NAME,
    parent: Manifest | None = None,
) -> Manifest:
    """Build every shard file of `version` into the local directory `out_dir`: a base, or
    with `parent` (the parent version's manifest, of this shard count) a delta on it."""
    if shard_num < 1:
        raise BuildError(f"shard_num must be >= 1, got {shard_num}")
    if parent is not None:
        if parent.shard_num != shard_num:
            raise BuildError(
                f"version {version}: parent {parent.version} has {parent.shard_num} shards, "
                f"not {shard_num}"
            )
        if dim is not None and dim != parent.dim:
            raise BuildError(f"version {version}: dimension {dim}, parent has {parent.dim}")
        dim = parent.dim
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = open_store(input_uri)
    with tempfile.TemporaryDirectory(prefix="cube-build-", dir=out) as tmp:
        spill = Path(tmp)
        total = 0
        for source in _export_sources(store, version, dim, deletions=parent is not None):
            dim = source.values.shape[1] if len(source.keys) else dim
            total += len(source.keys)
            _spill(spill, source, shard_num, flags=parent is not None)
        if dim is None or (total == 0 and parent is None):
            raise BuildError(f"{input_uri}: the input holds no records")
        entries = [
            _write_shard(spill, out, s, shard_num, version, dim, parent) for s in range(shard_num)
        ]
    manifest = Manifest(
        version=version,
        shard_num=shard_num,
        dim=dim,
        key_count=total,
        input=input_uri,
        dict_name=dict_name,
        built_at=_now(),
        shards=entries,
    )
    return _finish(out, manifest, parent)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Rows:
    """Keys, their values [n, dim] and which of them are deletions, from one source file."""

    keys: NDArray[np.uint64]
    values: NDArray[np.float32]
    deleted: NDArray[np.bool_]


def _export_sources(store: Store, version: int, dim: int | None, deletions: bool) -> Iterator[Rows]:
    """The rows of a model export: every SequenceFile part, then (a delta's) deletions."""
    with tempfile.TemporaryDirectory(prefix="cube-input-") as tmp:
        local = Path(tmp) / "input"
        for name in input_files(store):
            store.download(name, local)
            try:
                keys, values = read_sequence_file(local.read_bytes(), store.uri(name), dim)
            except SequenceFileError as err:
                raise BuildError(str(err)) from err
            local.unlink()
            _check_finite(keys, values, version, store.uri(name))
            dim = values.shape[1] if len(keys) else dim
            yield Rows(keys, values, np.zeros(len(keys), bool))
    if deletions and store.exists(DELETED):
        try:
            gone = parse_deleted_keys(store.read_bytes(DELETED), store.uri(DELETED))
        except ValueError as err:
            raise BuildError(str(err)) from err
        if len(gone) and dim is None:
            raise BuildError(f"{store.uri()}: deletions without the dimension of the table")
        yield Rows(gone, np.zeros((len(gone), dim or 0), np.float32), np.ones(len(gone), bool))


def export_sources(input_uri: str, version: int, dim: int | None, delta: bool) -> Iterator[Rows]:
    """A model export of `version` as a source of `merge` (a delta with its deletions)."""
    return _export_sources(open_store(input_uri), version, dim, deletions=delta)


def cube_sources(layout_store: Store, chain: list[Manifest], work: Path) -> Iterator[Rows]:
    """The shard files of a chain (base first) of one layout, as sources of `merge`; one
    file on local disk at a time."""
    for manifest in chain:
        for entry in manifest.shards:
            local = work / f"source-{manifest.version}-{entry.file}"
            layout_store.child(str(manifest.version)).download(entry.file, local)
            try:
                data = read_shard_data(local)
            finally:
                local.unlink(missing_ok=True)
            yield Rows(data.keys.copy(), data.values.copy(), data.deleted)


def merge(
    sources: Iterable[Rows],
    out_dir: str | Path,
    *,
    version: int,
    shard_num: int,
    dim: int,
    input_uri: str,
    dict_name: str = DICT_NAME,
    parent: Manifest | None = None,
) -> Manifest:
    """A base of `version` from `sources` in chain order (a base, then each delta on it):
    a key takes its row from the last source that has it, and a deletion removes it. With
    `parent`, the sources are deltas after it and the result one delta on it (a deletion
    stays a deletion): the deltas of versions the transfer skipped, in one."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="cube-merge-", dir=out) as tmp:
        spill = Path(tmp)
        for rows in sources:
            if len(rows.keys) and rows.values.shape[1] != dim:
                raise BuildError(
                    f"version {version}: a source has dimension {rows.values.shape[1]}, not {dim}"
                )
            _spill(spill, rows, shard_num, flags=True)
        entries = [
            _write_shard(spill, out, s, shard_num, version, dim, parent, last_wins=True)
            for s in range(shard_num)
        ]
    manifest = Manifest(
        version=version,
        shard_num=shard_num,
        dim=dim,
        key_count=sum(e.keys for e in entries),
        input=input_uri,
        dict_name=dict_name,
        built_at=_now(),
        shards=entries,
    )
    return _finish(out, manifest, parent)


def _finish(out: Path, manifest: Manifest, parent: Manifest | None) -> Manifest:
    """The manifest, with a delta's chain fields, written into `out`."""
    if parent is not None:
        manifest = replace(
            manifest,
            parent=parent.version,
            base=parent.version if parent.base is None else parent.base,
            depth=parent.depth + 1,
            chain_keys=parent.chain_keys + manifest.key_count,
        )
    (out / MANIFEST).write_text(manifest.to_json())
    return manifest


def _check_finite(
    keys: NDArray[np.uint64], values: NDArray[np.float32], version: int, source: str
) -> None:
    """BuildError naming the first keys of `source` whose vector is not finite."""
    if np.isfinite(values).all():  # one pass over the array the reader returned
        return
    bad = ~np.isfinite(values).all(axis=1)
    named = keys[bad][:NAMED_KEYS].tolist()
    raise BuildError(f"version {version}: {source}: {nonfinite_text(int(bad.sum()), named)}")


def _spill(spill: Path, rows: Rows, shard_num: int, flags: bool) -> None:
    shard_of = rows.keys % np.uint64(shard_num)
    for s in range(shard_num):
        mask = shard_of == s
        with open(spill / f"{s}.keys", "ab") as f:
            f.write(rows.keys[mask].astype("<u8").tobytes())
        with open(spill / f"{s}.values", "ab") as f:
            f.write(rows.values[mask].astype("<f4").tobytes())
        if flags:
            with open(spill / f"{s}.deleted", "ab") as f:
                f.write(rows.deleted[mask].astype(np.uint8).tobytes())


def _read_spill(
    spill: Path, shard: int, dim: int
) -> tuple[NDArray[np.uint64], NDArray[np.float32], NDArray[np.bool_]]:
    """A shard's spilled keys, values [n, dim] and deletion flags; the files are removed."""

    def take(part: str, dtype: str) -> NDArray[Any]:
        path = spill / f"{shard}.{part}"
        array = np.fromfile(path, dtype=dtype) if path.exists() else np.zeros(0, dtype)
        path.unlink(missing_ok=True)
        return array

    keys = take("keys", "<u8").astype(np.uint64)
    values = take("values", "<f4").astype(np.float32, copy=False).reshape(len(keys), dim)
    flags = take("deleted", "u1")
    deleted = flags.astype(bool) if len(flags) else np.zeros(len(keys), bool)
    return keys, values, deleted


def _write_shard(
    spill: Path,
    out: Path,
    shard: int,
    shard_num: int,
    version: int,
    dim: int,
    parent: Manifest | None = None,
    last_wins: bool = False,
) -> ShardEntry:
    """Write a shard's spilled rows: a base, or a delta on `parent`. With `last_wins` (a
    merge), a key takes its last row (the spill is in chain order) and, in a base, a key
    whose last row is a deletion is left out; else a key twice is a BuildError."""
    keys, values, deleted = _read_spill(spill, shard, dim)
    if last_wins:
        order = np.argsort(keys, kind="stable")  # stable: a key's rows stay in chain order
        sorted_keys = keys[order]
        last = np.ones(len(order), bool)
        last[:-1] = sorted_keys[1:] != sorted_keys[:-1]
        rows = order[last]
        if parent is None:
            rows = rows[~deleted[rows]]
        keys, values, deleted = keys[rows], values[rows], deleted[rows]
    try:
        written = write_shard_file(
            out / shard_file_name(shard),
            version=version,
            shard=shard,
            shard_num=shard_num,
            keys=keys,
            values=values,
            parent=None if parent is None else parent.version,
            deleted=None if parent is None else deleted,
        )
    except DuplicateKeyError as err:
        raise BuildError(f"shard {shard}: {err}") from err
    return ShardEntry(shard, written.path.name, len(keys), written.bytes, written.sha256)


def publish(local_dir: str | Path, manifest: Manifest, cube_store: Store) -> str:
    """Upload the shard files to `<cube_uri>/<V>/`, then the manifest (the last write)."""
    target = cube_store.child(str(manifest.version))
    for entry in manifest.shards:
        target.upload(Path(local_dir) / entry.file, entry.file)
    target.write_text(MANIFEST, manifest.to_json())
    return target.uri()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="elasticctr_cube builder", description=__doc__)
    p.add_argument("--input", required=True, help="URI of the SequenceFile directory")
    p.add_argument("--output", required=True, help="cube URI; the version goes to <output>/<V>/")
    p.add_argument("--version", required=True, type=int)
    p.add_argument("--shards", required=True, type=int)
    p.add_argument("--dim", type=int, help="expected float32 values per key")
    p.add_argument("--dict-name", default=DICT_NAME)
    p.add_argument(
        "--parent",
        type=int,
        help="build a delta on this version (published under --output): the input is a "
        "delta export (its parts and _deleted)",
    )
    args = p.parse_args(argv)
    output = open_store(args.output)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cube-builder-") as tmp:
        try:
            parent = None if args.parent is None else read_manifest(output, args.parent)
            manifest = build(
                args.input,
                tmp,
                version=args.version,
                shard_num=args.shards,
                dim=args.dim,
                dict_name=args.dict_name,
                parent=parent,
            )
        except (BuildError, ManifestError) as err:
            raise SystemExit(f"cube-builder: {err}") from None
        uri = publish(tmp, manifest, output)
    kind = "a base" if parent is None else f"a delta on {parent.version}"
    print(
        f"published version {manifest.version} ({kind}): {manifest.key_count} keys, "
        f"dim {manifest.dim}, {manifest.shard_num} shards -> {uri} "
        f"in {time.perf_counter() - started:.3f}s"
    )
    return 0
