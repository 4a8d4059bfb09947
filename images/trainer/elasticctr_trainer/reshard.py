"""A pserver's part of a checkpoint, whatever number of pservers took it.

What Paddle 2.6.2's table save writes on pserver r of P (checkpoint.py uploads it as
`pass-<N>/pserver-<r>/<table>/`):
- a sparse table (MemorySparseTable): S = SHARDS_PER_PSERVER * P shard files
  `part-<r:03d>-<g:05d>.gz`, one text row `<key> <values...>` per key. File g holds the
  keys with `key % S == g`, on the pserver `g // ceil(S / P)`: the one the client routes
  those keys to (brpc_ps_client's `get_sparse_shard`), which keeps them in its local
  shard `g % ceil(S / P)`.
- a dense table (MemoryDenseTable): `part-<r:03d>.gz`, one line per value of the merged
  dense parameters (`<param> <moment1> <moment2>` with Adam): pserver r holds values
  `[r * B, (r + 1) * B)` of the D values, B = D // P + 1, the last one the rest.

`Table::Load` reads a directory back by position. The sparse load lists the table's
directory, refuses anything but S files (a warning, and the table stays empty) and
reads, sorted, its ceil(S / P) files from position r * ceil(S / P); the dense load takes
each listed file to hold D // n + 1 lines (n files) and reads its own span out of them.
So a pserver of a job with P' pservers loads a checkpoint of P by being handed the
directory P' pservers would have saved: its own sparse shards (the rows of every old
shard whose key it owns now, as Paddle routes the key), empty files in the places of
the others' (listed, never read), and the dense lines re-split in P' blocks. The rows and
lines are copied as they are, so the values loaded are those a load without resharding
would load.

Rows are streamed: an old shard file is decompressed in chunks, each chunk's keys parsed
with numpy, and the rows this pserver owns appended to its new shard files. When the old
shard count is a multiple of the new one, every key of an old file goes to one new shard:
the file is appended whole, unread. Otherwise every pserver reads every old shard whose
keys it may own (a fraction 1 / gcd(P, P') of the table).
"""

from __future__ import annotations

import gzip
import math
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from io import BufferedIOBase
from pathlib import Path
from typing import Any

import numpy as np
from elasticctr_common.storage import Store
from numpy.typing import NDArray

from .checkpoint import LAYOUT_CHANGED, CheckpointMismatch

SPARSE_FILE = re.compile(r"^part-(\d{3})-(\d{5})\.gz$")
DENSE_FILE = re.compile(r"^part-(\d{3})\.gz$")
CHUNK_BYTES = 8 << 20  # decompressed bytes parsed at a time
MAX_KEY_DIGITS = 20  # a uint64
UINT64_MAX = np.uint64(2**64 - 1)
NEWLINE, SPACE, ZERO = ord("\n"), ord(" "), ord("0")


@dataclass(frozen=True)
class SparseLayout:
    """How Paddle spreads a sparse table of `shards` shards over `servers` pservers."""

    shards: int
    servers: int

    @property
    def per_server(self) -> int:
        return -(-self.shards // self.servers)

    def shards_of(self, server: int) -> range:
        return range(server * self.per_server, min((server + 1) * self.per_server, self.shards))

    def file_name(self, shard: int) -> str:
        return f"part-{shard // self.per_server:03d}-{shard:05d}.gz"


def dense_spans(values: int, servers: int) -> list[range]:
    """Each pserver's values of a dense table (the_one_ps `get_shard`, MemoryDenseTable)."""
    block = values // servers + 1
    return [range(min(r * block, values), min((r + 1) * block, values)) for r in range(servers)]


@dataclass
class OldTable:
    """One table of a checkpoint: its files, as (old pserver, shard or None, store path)."""

    table: str
    sparse: bool
    files: list[tuple[int, int | None, str]] = field(default_factory=list)


@dataclass
class Restored:
    """What `build` wrote: the table ids to load, and what it cost."""

    tables: list[int]
    files_read: int = 0
    files_copied: int = 0
    rows_read: int = 0
    rows_kept: int = 0
    seconds: float = 0.0


def old_tables(store: Store, pass_id: int, pservers: int) -> list[OldTable]:
    """Every table of checkpoint `pass_id` (taken with `pservers`), checked whole."""
    tables: dict[str, OldTable] = {}
    for rank in range(pservers):
        root = f"pass-{pass_id}/pserver-{rank}"
        names = store.list(root)
        if not names:
            raise FileNotFoundError(f"{store.uri(root)}: no table files of pserver {rank}")
        if tables and set(names) != set(tables):
            raise FileNotFoundError(
                f"{store.uri(root)}: tables {sorted(names)}, pserver 0 saved {sorted(tables)}"
            )
        for table in names:
            for name in store.list(f"{root}/{table}"):
                path = f"{root}/{table}/{name}"
                sparse, dense = SPARSE_FILE.match(name), DENSE_FILE.match(name)
                if not sparse and not dense:
                    raise ValueError(f"{store.uri(path)}: not a part file of Paddle's table save")
                entry = tables.setdefault(table, OldTable(table, sparse=bool(sparse)))
                if entry.sparse != bool(sparse):
                    raise ValueError(f"{store.uri(path)}: sparse and dense files in one table")
                if sparse:
                    entry.files.append((rank, int(sparse.group(2)), path))
                else:
                    entry.files.append((rank, None, path))
    for entry in tables.values():
        entry.files.sort(key=lambda f: (f[0], f[1] or 0))
        if entry.sparse:
            shards = sorted(s for _, s, _ in entry.files if s is not None)
            if shards != list(range(len(shards))):
                raise ValueError(
                    f"{store.uri(f'pass-{pass_id}')}: table {entry.table}'s shard files are "
                    f"not 0..{len(shards) - 1}: {shards}"
                )
        elif [r for r, _, _ in entry.files] != list(range(pservers)):
            raise ValueError(
                f"{store.uri(f'pass-{pass_id}')}: table {entry.table} has no single dense file "
                f"per pserver"
            )
    return [tables[t] for t in sorted(tables)]


def build(
    store: Store,
    pass_id: int,
    pservers: int,
    rank: int,
    servers: int,
    shards_per_server: int,
    dense_values: int,
    directory: Path,
) -> Restored:
    """Write into `directory` what pserver `rank` of `servers` loads of checkpoint `pass_id`
    (taken with `pservers`): the table directories `<table>/` Paddle's load expects."""
    started = time.monotonic()
    tables = old_tables(store, pass_id, pservers)
    restored = Restored(tables=[int(t.table) for t in tables])
    scratch = directory / ".download"
    scratch.mkdir(parents=True, exist_ok=True)
    for table in tables:
        out = directory / table.table
        out.mkdir(parents=True, exist_ok=True)
        if table.sparse:
            new = SparseLayout(shards_per_server * servers, servers)
            _build_sparse(store, table, new, rank, out, scratch, restored)
        else:
            where = f"checkpoint {store.uri(f'pass-{pass_id}')}, table {table.table}"
            _build_dense(store, table, dense_values, servers, out, scratch, where)
            restored.files_read += len(table.files)
    shutil.rmtree(scratch, ignore_errors=True)
    restored.seconds = time.monotonic() - started
    return restored


def _build_sparse(
    store: Store,
    table: OldTable,
    new: SparseLayout,
    rank: int,
    out: Path,
    scratch: Path,
    restored: Restored,
) -> None:
    old_shards = len(table.files)
    own = new.shards_of(rank)
    for g in range(new.shards):
        if g not in own:  # listed by the load, never read: an empty gzip file
            gzip.open(out / new.file_name(g), "wb").close()
    step = math.gcd(old_shards, new.shards)
    wanted = {g % step for g in own}  # residues of keys this pserver may own
    whole = old_shards % new.shards == 0  # each old file goes to one new shard whole
    with ExitStack() as stack:
        # Whole old files are appended as they are: gzip members one after the other are
        # one stream to zcat, Paddle's reader.
        outputs = {g: stack.enter_context(_writer(out / new.file_name(g), whole)) for g in own}
        for _, old, path in table.files:
            shard = int(old or 0)  # a sparse table's files all have one
            if shard % step not in wanted:
                continue
            local = scratch / Path(path).name
            store.download(path, local)
            if whole:
                with open(local, "rb") as source:
                    shutil.copyfileobj(source, outputs[shard % new.shards])
                restored.files_copied += 1
            else:
                try:
                    with gzip.open(local, "rb") as source:
                        rows, kept = route_rows(source, shard, old_shards, new, rank, outputs)
                except (ValueError, OSError) as err:  # OSError: not gzip, or cut short
                    raise ValueError(f"{store.uri(path)}: {err}") from err
                restored.files_read += 1
                restored.rows_read += rows
                restored.rows_kept += kept
            local.unlink()


def _writer(path: Path, raw: bool) -> BufferedIOBase:
    if raw:
        return open(path, "wb")
    return gzip.open(path, "wb", compresslevel=1)


def route_rows(
    source: BufferedIOBase,
    shard: int,
    old_shards: int,
    new: SparseLayout,
    rank: int,
    outputs: dict[int, BufferedIOBase],
) -> tuple[int, int]:
    """Append the rows of old shard `shard` whose keys pserver `rank` owns under `new` to
    `outputs` (by new shard); return (rows read, rows kept)."""
    rows = kept = 0
    for block in _line_blocks(source):
        starts, ends, keys = parse_keys(block)
        foreign = keys % np.uint64(old_shards) != shard
        if foreign.any():
            raise ValueError(
                f"sparse shard file {shard} of {old_shards} holds key {int(keys[foreign][0])}: "
                f"not Paddle's layout (key % {old_shards} == {shard})"
            )
        target = (keys % np.uint64(new.shards)).astype(np.int64)
        mine = np.flatnonzero(target // new.per_server == rank)
        rows += len(keys)
        kept += len(mine)
        order = mine[np.argsort(target[mine], kind="stable")]  # grouped by new shard
        firsts = np.flatnonzero(np.diff(target[order], prepend=-1)).tolist()
        begins, finishes = starts[order].tolist(), (ends[order] + 1).tolist()
        for first, last in zip(firsts, [*firsts[1:], len(order)], strict=True):
            lines = zip(begins[first:last], finishes[first:last], strict=True)
            outputs[int(target[order[first]])].write(b"".join(block[a:b] for a, b in lines))
    return rows, kept


def _line_blocks(source: BufferedIOBase) -> Iterator[bytes]:
    """`source` in blocks of whole lines, each ending with a newline."""
    tail = b""
    while chunk := source.read(CHUNK_BYTES):
        data = tail + chunk
        cut = data.rfind(b"\n") + 1
        tail = data[cut:]
        if cut:
            yield data[:cut]
    if tail:
        yield tail + b"\n"


def parse_keys(block: bytes) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.uint64]]:
    """Each line's start, end (its newline) and key (its leading decimal uint64, up to the
    first space) in a block of whole lines: digit by digit, all lines at once."""
    data = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(data == NEWLINE)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    keys = np.zeros(len(ends), dtype=np.uint64)
    going = np.ones(len(ends), dtype=bool)  # lines still in their key
    bad = np.zeros(len(ends), dtype=bool)
    for digit in range(MAX_KEY_DIGITS + 1):
        chars = data[np.minimum(starts + digit, len(data) - 1)]
        if digit:  # a key has a first digit; then it ends at a space
            going &= chars != SPACE
            if not going.any():
                break
        values = chars.astype(np.int16) - ZERO
        # Not a digit: also a newline before the first space (a row without values).
        bad |= going & ((values < 0) | (values > 9) | (digit == MAX_KEY_DIGITS))
        digits = np.clip(values, 0, 9).astype(np.uint64)
        bad |= going & (keys > (UINT64_MAX - digits) // np.uint64(10))  # past a uint64
        keys = np.where(going, keys * np.uint64(10) + digits, keys)
    if bad.any():
        line = int(np.flatnonzero(bad)[0])
        text = block[starts[line] : ends[line]][:80].decode(errors="replace")
        raise ValueError(f"not a sparse row (`<key> <values...>`): {text!r}")
    return starts, ends, keys


def _build_dense(
    store: Store,
    table: OldTable,
    values: int,
    servers: int,
    out: Path,
    scratch: Path,
    where: str,
) -> None:
    """The old pservers' dense lines, in order, re-split as `servers` pservers hold them."""
    spans = dense_spans(values, servers)
    columns: int | None = None
    count = server = 0
    with ExitStack() as stack:
        outputs = [
            stack.enter_context(gzip.open(out / f"part-{r:03d}.gz", "wb", compresslevel=1))
            for r in range(servers)
        ]
        for line in _dense_lines(store, table, scratch):
            width = len(line.split())
            columns = columns or width
            if width != columns:
                raise CheckpointMismatch(
                    f"{where}: dense line {count} has {width} values, the others {columns}"
                )
            while server < servers - 1 and count >= spans[server].stop:
                server += 1
            if count < values:
                outputs[server].write(line)
            count += 1
    if count != values:
        raise CheckpointMismatch(
            f"{where}: the dense parameters hold {count} values, this job's model has "
            f"{values}: {LAYOUT_CHANGED}"
        )


def _dense_lines(store: Store, table: OldTable, scratch: Path) -> Iterator[bytes]:
    for _, _, path in table.files:
        local = scratch / Path(path).name
        store.download(path, local)
        with gzip.open(local, "rb") as source:
            for line in source:
                yield line if line.endswith(b"\n") else line + b"\n"
        local.unlink()


def describe(restored: Restored) -> dict[str, Any]:
    return {
        "tables": restored.tables,
        "files_read": restored.files_read,
        "files_copied": restored.files_copied,
        "rows_read": restored.rows_read,
        "rows_kept": restored.rows_kept,
        "seconds": round(restored.seconds, 2),
    }
