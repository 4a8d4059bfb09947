"""cube-builder: SequenceFile export -> per-shard files + manifest, then publish.

Input: every file under the version's `input` URI whose name does not start with `_` or
`.` (Hadoop SequenceFiles, see seqfile.py). Keys go to shard `key % shard_num`. Each
input file is parsed and partitioned into per-shard spill files, then each shard is
sorted and written (shardfile.py), so memory peaks at one input file plus one shard.

Every value must be finite: the trainer checks its export, but a damaged or foreign
export reaches the model store without that check, and a NaN embedding would otherwise
be served (as NaN scores).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from elasticctr_common.cube.conf import DICT_NAME
from elasticctr_common.seqfile import SequenceFileError, read_sequence_file
from elasticctr_common.storage import Store, open_store
from numpy.typing import NDArray

from .manifest import MANIFEST, Manifest, ShardEntry, shard_file_name
from .shardfile import NAMED_KEYS, DuplicateKeyError, nonfinite_text, write_shard_file


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
) -> Manifest:
    """Build every shard file of `version` into the local directory `out_dir`."""
    if shard_num < 1:
        raise BuildError(f"shard_num must be >= 1, got {shard_num}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    store = open_store(input_uri)
    with tempfile.TemporaryDirectory(prefix="cube-build-", dir=out) as tmp:
        spill = Path(tmp)
        total = 0
        for name in input_files(store):
            local = spill / "input"
            store.download(name, local)
            try:
                keys, values = read_sequence_file(local.read_bytes(), store.uri(name), dim)
            except SequenceFileError as err:
                raise BuildError(str(err)) from err
            local.unlink()
            _check_finite(keys, values, version, store.uri(name))
            dim = values.shape[1] if len(keys) else dim
            total += len(keys)
            _spill(spill, keys, values, shard_num)
        if total == 0 or dim is None:
            raise BuildError(f"{input_uri}: the input holds no records")
        entries = [_write_shard(spill, out, s, shard_num, version, dim) for s in range(shard_num)]
    manifest = Manifest(
        version=version,
        shard_num=shard_num,
        dim=dim,
        key_count=total,
        input=input_uri,
        dict_name=dict_name,
        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        shards=entries,
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


def _spill(
    spill: Path, keys: NDArray[np.uint64], values: NDArray[np.float32], shard_num: int
) -> None:
    shard_of = keys % np.uint64(shard_num)
    for s in range(shard_num):
        mask = shard_of == s
        with open(spill / f"{s}.keys", "ab") as f:
            f.write(keys[mask].astype("<u8").tobytes())
        with open(spill / f"{s}.values", "ab") as f:
            f.write(values[mask].astype("<f4").tobytes())


def _write_shard(
    spill: Path, out: Path, shard: int, shard_num: int, version: int, dim: int
) -> ShardEntry:
    keys_file, values_file = spill / f"{shard}.keys", spill / f"{shard}.values"
    keys = np.fromfile(keys_file, dtype="<u8") if keys_file.exists() else np.zeros(0, "<u8")
    values = np.fromfile(values_file, dtype="<f4") if values_file.exists() else np.zeros(0, "<f4")
    try:
        written = write_shard_file(
            out / shard_file_name(shard),
            version=version,
            shard=shard,
            shard_num=shard_num,
            keys=keys,
            values=values.reshape(len(keys), dim),
        )
    except DuplicateKeyError as err:
        raise BuildError(f"shard {shard}: {err}") from err
    keys_file.unlink(missing_ok=True)
    values_file.unlink(missing_ok=True)
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
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cube-builder-") as tmp:
        try:
            manifest = build(
                args.input,
                tmp,
                version=args.version,
                shard_num=args.shards,
                dim=args.dim,
                dict_name=args.dict_name,
            )
        except BuildError as err:
            raise SystemExit(f"cube-builder: {err}") from None
        uri = publish(tmp, manifest, open_store(args.output))
    print(
        f"published version {manifest.version}: {manifest.key_count} keys, dim {manifest.dim}, "
        f"{manifest.shard_num} shards -> {uri}"
    )
    return 0
