"""Trainer 0 exports model version V (docs/architecture.md, "Model versions").

Paddle 2.6 cannot hand trainer 0 the sparse table of an async parameter server as a file
it can read: `fleet.save_persistables`/`save_one_table` make each pserver write its own
shard (gzip text, 6 significant digits) to the pserver's local disk, and
`recv_and_save_model` only serves non-distributed tables. So the dump pulls rows with
the training program's own `distributed_lookup_table` op, for every key in
[1, sparse_dim) in chunks. A pull does not create rows (Paddle's
`pserver_create_value_when_push` defaults to true): keys never trained come back as
zeros with show == 0 and are left out. A key missing from the export therefore means
the zero vector, which is exactly what the trainer computes with for that key.

Each pulled row is `[show, click, embed_w, embedx...]`; the exported value is the part
after show/click, `embedding_dim` floats, which the `cvm` op feeds to sum pooling.

Two steps, so that the model check (modelcheck.py) reads exactly what would be published
before anything is: `prepare_version` writes the dense model locally and dumps the table
into local SequenceFile parts, chunk by chunk, the check folding over each chunk on the way
(the table is never whole in memory); `publish_version` uploads it all and appends the
donefile line last.

With a snapshot directory and a parent, the version is a delta on the parent: the parts
hold only the rows that changed since it, `<V>/sparse/_deleted` the keys deleted since
(delta.py finds both); the model check still reads the whole table.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import paddle
from elasticctr_common.seqfile import SequenceFileWriter
from elasticctr_common.storage import Store
from elasticctr_common.versions import (
    DELETED,
    DENSE,
    MODEL_FILE,
    MODEL_META,
    PARAMS_FILE,
    SPARSE,
    Version,
    append_version,
    deleted_keys_bytes,
    dense_path,
    read_versions,
    sparse_path,
)
from numpy.typing import NDArray
from paddle.base import core

from .delta import ExportDiff, Snapshot
from .feed import lod_tensor
from .model import SHOW_CLICK_COLUMNS, CtrModel
from .modelcheck import EmbeddingScan

log = logging.getLogger(__name__)
PULL_CHUNK = 100_000
RECORDS_PER_PART = 1_000_000


def pull_rows(exe: Any, dump_program: Any, net: CtrModel, keys: NDArray[Any]) -> NDArray[Any]:
    """Rows `[show, click, embed_w, embedx...]` of `keys`, pulled from the pservers."""
    feed = {v.name: lod_tensor([[0]]) for v in net.slot_ids[1:]}
    # One example holding every key, straight from the array: through lists (feed.py's
    # lod_tensor) this cost as much as the pull itself.
    ids = core.LoDTensor()
    ids.set(np.ascontiguousarray(keys, dtype=np.int64).reshape(-1, 1), core.CPUPlace())
    ids.set_lod([[0, len(keys)]])
    feed[net.slot_ids[0].name] = ids
    (rows,) = exe.run(dump_program, feed=feed, fetch_list=[net.pulled[0]], return_numpy=False)
    return np.array(rows)


class SparseParts:
    """Local SequenceFile parts of RECORDS_PER_PART records (the last one shorter; one empty
    part for an empty table), written as rows are pulled: the export holds one pulled chunk,
    not the table (10^8 keys would be ~4 GB of arrays)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.paths: list[Path] = []
        self.records = 0
        self._out: BinaryIO | None = None
        self._writer: SequenceFileWriter | None = None
        self._in_part = 0

    def add(self, keys: NDArray[Any], values: NDArray[Any]) -> None:
        start = 0
        while start < len(keys):
            if self._writer is None or self._in_part == RECORDS_PER_PART:
                self._next_part()
            assert self._writer is not None
            end = start + min(RECORDS_PER_PART - self._in_part, len(keys) - start)
            self._writer.write_arrays(keys[start:end], values[start:end])
            self._in_part += end - start
            self.records += end - start
            start = end

    def close(self) -> list[Path]:
        if not self.paths:
            self._next_part()
        if self._out is not None:
            self._out.close()
            self._out = self._writer = None
        return self.paths

    def _next_part(self) -> None:
        if self._out is not None:
            self._out.close()
        path = self.directory / f"part-{len(self.paths):05d}"
        self._out = open(path, "wb")  # noqa: SIM115 - closed by the next part or close()
        self._writer = SequenceFileWriter(self._out)
        self._in_part = 0
        self.paths.append(path)


def dump_sparse(
    exe: Any,
    dump_program: Any,
    net: CtrModel,
    sparse_dim: int,
    parts: SparseParts,
    embeddings: EmbeddingScan,
    diff: ExportDiff | None = None,
) -> tuple[float, int]:
    """Every trained key and its embedding checked by `embeddings` and written into `parts`
    (with `diff`: only those it says changed); returns the sum of their show counts and
    how many there are."""
    shows, count = 0.0, 0
    for start in range(1, sparse_dim, PULL_CHUNK):
        end = min(start + PULL_CHUNK, sparse_dim)
        keys = np.arange(start, end, dtype=np.int64)
        rows = pull_rows(exe, dump_program, net, keys)
        trained = np.any(rows != 0, axis=1)
        trained_keys = keys[trained].astype(np.uint64)
        values = rows[trained, SHOW_CLICK_COLUMNS:].astype(np.float32)
        embeddings.add(trained_keys, values)
        if diff is None:
            parts.add(trained_keys, values)
        else:
            parts.add(*diff.rows(start, end, trained_keys, values))
        shows += float(rows[trained, 0].astype(np.float64).sum())
        count += len(trained_keys)
    return shows, count


HELD_BACK = "held_back"  # JSON lines {"id": V, "reason": ...}: versions kept, not published


def held_back_versions(models: Store) -> list[dict[str, Any]]:
    if not models.exists(HELD_BACK):
        return []
    return [json.loads(line) for line in models.read_text(HELD_BACK).splitlines() if line]


def next_version(models: Store) -> int:
    """After the last published version and the last one held back."""
    ids = [v.id for v in read_versions(models)] + [v["id"] for v in held_back_versions(models)]
    return max(ids, default=0) + 1


def save_dense(exe: Any, test_program: Any, net: CtrModel, directory: Path) -> dict[str, object]:
    """The inference model whose inputs are the pooled slot embeddings, then the dense
    features."""
    prefix = str(directory / Path(MODEL_FILE).stem)
    inputs = net.inference_inputs
    paddle.static.save_inference_model(
        prefix, inputs, [net.prob], exe, program=test_program.clone()
    )
    return {
        "feed_names": [v.name for v in inputs],
        "fetch_name": net.prob.name,
        "model_file": MODEL_FILE,
        "params_file": PARAMS_FILE,
    }


@dataclass
class PreparedVersion:
    """A version written locally (`<directory>/dense/`) and dumped, not yet published: the
    model check reads it before anything is uploaded."""

    directory: Path
    dense_meta: dict[str, object]
    sparse_parts: list[Path]  # local SequenceFiles of the trained keys (SparseParts)
    sparse_keys: int  # the table's trained keys (all of them, also for a delta)
    table_shows: float
    embeddings: EmbeddingScan  # the model check's view of every exported row
    parent: int | None = None  # a delta's parent version
    written_keys: int = 0  # rows in the parts: sparse_keys for a base, the changed ones else
    diff: ExportDiff | None = None  # the comparison with the snapshot (delta.py)

    def discard(self) -> None:
        """Not published: the trainer's snapshot stays that of the last published version."""
        if self.diff is not None:
            self.diff.discard()


def prepare_version(
    exe: Any,
    test_program: Any,
    dump_program: Any,
    net: CtrModel,
    sparse_dim: int,
    directory: Path,
    max_abs_weight: float = math.inf,
    snapshot: Path | None = None,
    parent: int | None = None,
) -> PreparedVersion:
    """The dense inference model into `directory/dense/` and the sparse table's trained rows
    into `directory/sparse/`, scanned for the model check (`max_abs_weight` its bound).
    With `snapshot` (trainer 0's snapshot directory, delta.py), the table is compared with
    the snapshot of `parent` as it streams: a delta on `parent` if the snapshot holds it,
    else a base; the next snapshot is written on the way (`publish_version` keeps it)."""
    dense_meta = save_dense(exe, test_program, net, directory / DENSE)
    parts = SparseParts(directory / SPARSE)
    parts.directory.mkdir(parents=True)
    embeddings = EmbeddingScan(max_abs_weight)
    diff = None
    if snapshot is not None:
        previous = None if parent is None else Snapshot.open(snapshot, parent)
        diff = ExportDiff(snapshot, previous)
        parent = None if previous is None else parent
    try:
        shows, count = dump_sparse(exe, dump_program, net, sparse_dim, parts, embeddings, diff)
    except BaseException:
        if diff is not None:
            diff.discard()
        raise
    finally:
        paths = parts.close()
    return PreparedVersion(
        directory, dense_meta, paths, count, shows, embeddings,
        parent=None if diff is None else parent, written_keys=parts.records, diff=diff,
    )  # fmt: skip


def publish_version(
    models: Store,
    prepared: PreparedVersion,
    slots: list[int],
    sparse_dim: int,
    embedding_dim: int,
    extra_meta: dict[str, object],
    extra_files: dict[str, bytes] | None = None,
    held_back: str | None = None,
) -> Version:
    """Upload `<V>/dense/`, `<V>/sparse/part-*` (and a delta's `_deleted`) and any extra
    files, then the donefile line; a version `held_back` (the reason) is uploaded the same
    way but recorded in `held_back` instead of the donefile: cube and serving never see it,
    a user can still publish it (it must be a base: its parent need not be served)."""
    if held_back and prepared.parent is not None:
        raise ValueError(f"a version held back is exported whole, not as a delta: {held_back}")
    version = next_version(models)
    deleted = prepared.diff.deleted_keys() if prepared.diff and prepared.parent else None
    delta_meta: dict[str, object] = {}
    if deleted is not None:
        delta_meta = {
            "parent": prepared.parent,
            "delta_keys": prepared.written_keys,
            "deleted_keys": len(deleted),
        }
    meta = {
        "version": version,
        "slots": slots,
        "embedding_dim": embedding_dim,
        "sparse_dim": sparse_dim,
        **prepared.dense_meta,
        **extra_meta,
        "sparse_keys": prepared.sparse_keys,
        **delta_meta,
        "table_shows": prepared.table_shows,  # impressions the table has counted, all passes
        "published": held_back is None,
        **({"held_back": held_back} if held_back else {}),
    }
    dense_dir = prepared.directory / DENSE
    for name in (MODEL_FILE, PARAMS_FILE):
        models.upload(dense_dir / name, dense_path(version, name))
    models.write_text(dense_path(version, MODEL_META), json.dumps(meta, indent=1))
    for part, local in enumerate(prepared.sparse_parts):
        models.upload(local, sparse_path(version, part))
    if deleted is not None:
        models.write_bytes(f"{sparse_path(version)}/{DELETED}", deleted_keys_bytes(deleted))
    for name, data in (extra_files or {}).items():
        models.write_bytes(f"{version}/{name}", data)
    line = Version(
        id=version, key=version, input=models.uri(sparse_path(version)), parent=prepared.parent
    )
    if held_back:
        records = [*held_back_versions(models), {"id": version, "reason": held_back}]
        models.write_text(HELD_BACK, "".join(json.dumps(r) + "\n" for r in records))
        log.warning("version %d kept, not published: %s", version, held_back)
        prepared.discard()
        return line
    append_version(models, line)
    if prepared.diff is not None:
        prepared.diff.commit(version, embedding_dim)
    log.info(
        "exported version %d: %d sparse keys (%s) -> %s",
        version,
        prepared.sparse_keys,
        "a base"
        if prepared.parent is None
        else f"a delta on {prepared.parent}: {prepared.written_keys} changed, "
        f"{0 if deleted is None else len(deleted)} deleted",
        models.uri(str(version)),
    )
    return line
