"""Request bodies -> parsed instances: sparse keys with the (slot, instance) each belongs to,
and each instance's dense feature values when the model has dense features.

Two request forms (docs/serving.md):

- ElasticCTR's: {"instances": [{"slots": [{"slot_name": "101", "feasigns": [...]}, ...],
  "dense": {"dense_feature": [0.05, ...]}}]}
- plain /predict: {"instances": [{"101": [...], "102": [...], "dense_feature": [...]}, ...]}

A model's dense features (meta.json `dense_features`) are required in every instance, each
with exactly its `dim` JSON numbers, finite as float32; a model without them refuses any.

A feasign becomes the sparse key `feasign % sparse_dim` (docs/architecture.md). Key 0 is
the padding key, whose vector is zero: it is never looked up. A slot given twice in one
instance is summed, as repeated `feasign:slot` tokens are in training lines. Errors are
`BadRequest` with a message that names the instance, the slot and the value.

A model trained with crosses (meta.json `crosses`, pairs of its slots) has one more sparse
input per cross, after its slots: serving forms its keys from the feasigns sent for the
two slots by the trainer's rule (elasticctr_common.crosses), in `parsed_keys`, where every
request form ends. A request names slots only, never a cross; what it sent (`Parsed.raw`,
which impressions record) holds no crossed id: the trainer forms them again.

Three paths, one answer: the native parser (native.py) reads well-formed bodies without
creating Python objects; a body it does not take is loaded with orjson and parsed by the
quick path, which collects every feasign into one list and converts it with one numpy
call; only when that fails does the careful path walk the values again to name the bad
one. Property tests check that all three agree.
"""

from __future__ import annotations

import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import orjson
from elasticctr_common.crosses import GOLDEN, MAX_CROSSED_IDS, pair_seed
from elasticctr_common.lines import F32_OVERFLOW, DenseFeature
from numpy.typing import NDArray

from .native import parser

MAX_FEASIGN = 2**64 - 1
# (instance, slot index, count, slot name) of one slot's feasigns in a request
Entry = tuple[int, int, int, str]


class BadRequest(Exception):
    """The request is malformed; `status` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Parsed:
    count: int  # instances
    # sparse keys, padding (0) removed: the feasigns sent, then the crossed ids (cross by
    # cross, each in instance order)
    keys: NDArray[np.uint64]
    slots: NDArray[np.int32]  # sparse input index (model input order) of each key
    rows: NDArray[np.int32]  # instance index of each key
    largest_feasign: int = 0  # of those sent, before the mapping (feasign_check.py)
    # [count, the dense features' dims summed] float32, in the model's order; None without
    dense: NDArray[np.float32] | None = None
    # Every feasign as sent (padding included) with its slot index and instance, in
    # instance order: what an impression record holds (feedback.py).
    raw: NDArray[np.uint64] | None = None
    raw_slots: NDArray[np.int32] | None = None
    raw_rows: NDArray[np.int32] | None = None
    crossed: int = 0  # how many of `keys` are crossed ids (not sent)


class SlotSpace:
    """What parsing needs from the model being served: its slots (input order), sparse_dim,
    its dense features (input order), its crosses (each the input indices of its two
    slots). Its sparse inputs are the slots, then one per cross."""

    def __init__(
        self,
        slots: list[int] | tuple[int, ...],
        sparse_dim: int,
        dense: tuple[DenseFeature, ...] = (),
        crosses: Sequence[tuple[int, int]] = (),
    ) -> None:
        self.slots = tuple(slots)
        self.sparse_dim = sparse_dim
        self.dense = tuple(dense)
        self.dense_dim = sum(f.dim for f in self.dense)
        self.crosses = tuple((int(first), int(second)) for first, second in crosses)
        self.inputs = len(self.slots) + len(self.crosses)  # sparse inputs
        self.crossing = Crossing(self.slots, self.crosses, sparse_dim) if self.crosses else None
        self.index = {str(s): i for i, s in enumerate(self.slots)}  # what a request may name
        self.dense_index = {f.name: f for f in self.dense}
        self.names = "\n".join(str(s) for s in self.slots).encode()  # for the native parser

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SlotSpace):
            return NotImplemented
        mine, theirs = (
            (self.slots, self.sparse_dim, self.dense, self.crosses),
            (other.slots, other.sparse_dim, other.dense, other.crosses),
        )
        return mine == theirs

    def __hash__(self) -> int:
        return hash((self.slots, self.sparse_dim, self.dense, self.crosses))

    @property
    def cross_slots(self) -> list[list[int]]:
        """The crosses as meta.json writes them: [[slot, slot], ...]."""
        return [[self.slots[first], self.slots[second]] for first, second in self.crosses]

    def describe_input(self, index: int) -> str:
        """Sparse input `index` as messages name it: "slot 101" or "cross [101, 102]"."""
        if index < len(self.slots):
            return f"slot {self.slots[index]}"
        return f"cross {self.cross_slots[index - len(self.slots)]}"

    def describe_dense(self) -> str:
        return ", ".join(f"{f.name}[{f.dim}]" for f in self.dense) or "none"


class Crossing:
    """A model's crosses, ready to form their keys for a request's instances: for every
    cross and instance, elasticctr_common.crosses.crossed_keys of the pair's seed and the
    two slots' feasigns, in whole-array operations (no Python loop per cross or key)."""

    def __init__(
        self, slots: tuple[int, ...], crosses: tuple[tuple[int, int], ...], sparse_dim: int
    ) -> None:
        crossed = sorted({index for cross in crosses for index in cross})
        # Each slot's place in the table of first ids (_first_ids), -1: no cross uses it.
        self.place = np.full(len(slots), -1, dtype=np.int64)
        self.place[crossed] = np.arange(len(crossed))
        self.crossed_slots = len(crossed)
        self.first = self.place[[first for first, _ in crosses]]
        self.second = self.place[[second for _, second in crosses]]
        seeds = [pair_seed(slots[first], slots[second]) for first, second in crosses]
        self.seeds = np.array(seeds, dtype=np.uint64)
        self.first_input = len(slots)  # the crosses' inputs follow the slots'
        self.sparse_dim = np.uint64(sparse_dim)

    def keys(
        self,
        count: int,
        feasigns: NDArray[np.uint64],
        slots: NDArray[np.int32],
        rows: NDArray[np.int32],
    ) -> tuple[NDArray[np.uint64], NDArray[np.int32], NDArray[np.int32]]:
        """(keys, input index, instance) of the crosses' keys, cross by cross, each in
        instance order. `feasigns`: those whose key is not the padding key, in instance
        order (each slot's in the order sent), with their slot index and instance."""
        ids, given = self._first_ids(count, feasigns, slots, rows)
        # Every (cross, instance, x, y) with both ids, in that order: crossed_keys' x-major.
        both = given[self.first][:, :, :, None] & given[self.second][:, :, None, :]
        cross, row, x, y = np.nonzero(both)
        xs, ys = ids[self.first[cross], row, x], ids[self.second[cross], row, y]
        crossed = crossed_feasigns(self.seeds[cross], xs, ys) % self.sparse_dim
        real = crossed != 0
        inputs = (cross[real] + self.first_input).astype(np.int32)
        return crossed[real], inputs, row[real].astype(np.int32)

    def _first_ids(
        self,
        count: int,
        feasigns: NDArray[np.uint64],
        slots: NDArray[np.int32],
        rows: NDArray[np.int32],
    ) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
        """The first MAX_CROSSED_IDS feasigns of each crossed slot in each instance, as a
        [crossed slots, count, width] table, and which of its cells hold one. The width is
        the most ids any of them has, up to MAX_CROSSED_IDS: 1 when the crossed slots are
        single-hot, as `auto` chooses them, which keeps the tables of `keys` small."""
        place = self.place[slots]
        mine = np.flatnonzero(place >= 0)
        mine = mine[np.argsort(place[mine], kind="stable")]  # by slot, each in instance order
        cell = place[mine] * count + rows[mine]  # (slot, instance): sorted
        order = np.arange(len(cell)) - np.searchsorted(cell, cell)  # among the cell's ids
        first = order < MAX_CROSSED_IDS
        cell, order, mine = cell[first], order[first], mine[first]
        width = int(order.max()) + 1 if len(order) else 1
        ids = np.zeros((self.crossed_slots * count, width), dtype=np.uint64)
        given = np.zeros((self.crossed_slots * count, width), dtype=bool)
        ids[cell, order] = feasigns[mine]
        given[cell, order] = True
        shape = (self.crossed_slots, count, width)
        return ids.reshape(shape), given.reshape(shape)


def parse_request(body: bytes, space: SlotSpace, max_instances: int, plain: bool) -> Parsed:
    """A request body of ElasticCTR's form (or the plain one): natively when the native
    parser takes it, else with orjson and the Python code."""
    native = parser()
    if native is not None and not space.dense:  # dense values: the Python code reads them
        got = native.parse(body, space.names, plain, max_instances)
        if got is not None:
            count, raw, slots, rows = got
            return parsed_keys(count, raw, slots, rows, space)
    quick = b"true" not in body and b"false" not in body  # booleans need the careful path
    parse = parse_plain if plain else parse_elasticctr
    return parse(load_json(body), space, max_instances, quick)


def load_json(body: bytes) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise BadRequest(f"malformed JSON: {err}") from None


def instances_of(request: object, max_instances: int) -> list[Any]:
    if not isinstance(request, dict) or "instances" not in request:
        raise BadRequest('the body must be a JSON object with an "instances" list')
    instances = request["instances"]
    if not isinstance(instances, list):
        raise BadRequest(f'"instances" must be a list, got {type(instances).__name__}')
    if not instances:
        raise BadRequest('"instances" is empty: nothing to predict')
    if len(instances) > max_instances:
        raise BadRequest(
            f"{len(instances)} instances in one request, more than the limit {max_instances}", 413
        )
    return instances


def parse_elasticctr(
    request: object, space: SlotSpace, max_instances: int, quick: bool = True
) -> Parsed:
    """`quick=False` when the body may hold JSON booleans (which pass as integers in the
    quick path): the careful loop checks every value's type."""
    instances = instances_of(request, max_instances)
    # Dense values (or a "dense" member the model has no use for: refused) take the loop.
    if (
        quick
        and not space.dense
        and not any(isinstance(i, dict) and "dense" in i for i in instances)
    ):
        try:
            return _parse_elasticctr_quickly(instances, space)
        except (KeyError, TypeError, AttributeError, OverflowError, BadRequest):
            pass  # something is off: the careful loop below finds and names it
    index = space.index
    feasigns: list[Any] = []  # JSON values, checked when converted
    entries: list[Entry] = []  # (instance, slot index, count, slot name)
    dense = _DenseValues(space, len(instances))
    for i, instance in enumerate(instances):
        slots = instance.get("slots") if isinstance(instance, dict) else None
        if not isinstance(slots, list):
            raise BadRequest(f'instance {i}: expected an object with a "slots" list')
        before = len(feasigns)
        for entry in slots:
            if not isinstance(entry, dict) or "slot_name" not in entry:
                raise BadRequest(f'instance {i}: each slot must be an object with "slot_name"')
            name = entry["slot_name"]
            _add(feasigns, entries, index, i, name, entry.get("feasigns"), space)
        given = instance.get("dense")
        if given is not None or space.dense:
            if not isinstance(given, dict):
                raise BadRequest(
                    f'instance {i}: expected "dense", an object of dense feature -> values '
                    f"(the model's dense features: {space.describe_dense()})"
                )
            for name, values in given.items():
                dense.add(i, name, values)
        dense.complete(i)
        if len(feasigns) == before and not space.dense:
            raise BadRequest(f"instance {i} is empty: no slot has a feasign")
    return _finish(len(instances), feasigns, entries, space, dense.values)


def _parse_elasticctr_quickly(instances: list[Any], space: SlotSpace) -> Parsed:
    """The usual, well-formed request with as little work per slot as Python allows: every
    pass is a C-level map, no bytecode runs per slot or feasign (~3x less time than the
    careful loop). Any exception sends the request to the careful loop."""
    slot_lists = list(map(_SLOTS, instances))
    per_instance = list(map(len, slot_lists))
    entries = list(chain.from_iterable(slot_lists))
    values = list(map(_FEASIGNS, entries))
    if not set(map(type, values)) <= {list}:
        raise TypeError  # "" or {} would pass as empty lists
    slots = list(map(space.index.__getitem__, map(_SLOT_NAME, entries)))
    counts = np.fromiter(map(len, values), np.int64, len(values))
    # array('Q') refuses floats, strings, negatives and values >= 2**64, quickly.
    raw = np.frombuffer(array.array("Q", chain.from_iterable(values)), dtype=np.uint64)
    count = len(instances)
    entry_rows = np.repeat(np.arange(count, dtype=np.int32), per_instance)
    if np.bincount(entry_rows, weights=counts, minlength=count).min() == 0:
        raise BadRequest("empty instance")  # the careful loop says which
    rows = np.repeat(entry_rows, counts)
    slot_of = np.repeat(np.array(slots, dtype=np.int32), counts)
    return parsed_keys(count, raw, slot_of, rows, space)


_SLOTS = itemgetter("slots")
_FEASIGNS = itemgetter("feasigns")
_SLOT_NAME = itemgetter("slot_name")


def parse_plain(
    request: object, space: SlotSpace, max_instances: int, quick: bool = True
) -> Parsed:
    instances = instances_of(request, max_instances)
    index = space.index
    feasigns: list[Any] = []  # JSON values, checked when converted
    entries: list[Entry] = []
    dense = _DenseValues(space, len(instances))
    for i, instance in enumerate(instances):
        if not isinstance(instance, dict):
            raise BadRequest(f"instance {i}: expected an object of slot -> feasign list")
        before = len(feasigns)
        for name, values in instance.items():
            if name in space.dense_index:
                dense.add(i, name, values)
            else:
                _add(feasigns, entries, index, i, name, values, space)
        dense.complete(i)
        if len(feasigns) == before and not space.dense:
            raise BadRequest(f"instance {i} is empty: no slot has a feasign")
    return _finish(len(instances), feasigns, entries, space, dense.values)


class _DenseValues:
    """The dense feature values of a request's instances, checked as they are added."""

    def __init__(self, space: SlotSpace, count: int) -> None:
        self.space = space
        self.values = np.zeros((count, space.dense_dim), dtype=np.float32) if space.dense else None
        self.offsets: dict[str, int] = {}
        offset = 0
        for feature in space.dense:
            self.offsets[feature.name] = offset
            offset += feature.dim
        self.given: set[str] = set()

    def add(self, i: int, name: object, values: object) -> None:
        feature = self.space.dense_index.get(name) if isinstance(name, str) else None
        if feature is None or self.values is None:
            raise BadRequest(
                f"instance {i}: unknown dense feature {name!r} (the model's dense features: "
                f"{self.space.describe_dense()})"
            )
        if not isinstance(values, list) or len(values) != feature.dim:
            got = f"{len(values)} values" if isinstance(values, list) else type(values).__name__
            raise BadRequest(
                f"instance {i}, dense feature {feature.name}: expected a list of "
                f"{feature.dim} numbers, got {got}"
            )
        for value in values:
            if type(value) not in (int, float):
                raise BadRequest(
                    f"instance {i}, dense feature {feature.name}: value {value!r} is not a number"
                )
            if not abs(value) < F32_OVERFLOW:
                raise BadRequest(
                    f"instance {i}, dense feature {feature.name}: value {value!r} is not finite "
                    "as a float32"
                )
        start = self.offsets[feature.name]
        self.values[i, start : start + feature.dim] = values
        self.given.add(feature.name)

    def complete(self, i: int) -> None:
        """Every dense feature was given for instance i (then the next instance's start)."""
        missing = [f.name for f in self.space.dense if f.name not in self.given]
        if missing:
            raise BadRequest(
                f"instance {i}: dense feature(s) {', '.join(missing)} missing (every instance "
                f"needs the model's dense features: {self.space.describe_dense()})"
            )
        self.given = set()


def _add(
    feasigns: list[Any],
    entries: list[Entry],
    index: dict[str, int],
    i: int,
    name: object,
    values: object,
    space: SlotSpace,
) -> None:
    slot = index.get(name if isinstance(name, str) else str(name))
    if slot is None:
        known = ", ".join(str(s) for s in space.slots)
        raise BadRequest(f"instance {i}: unknown slot {name!r} (the model's slots: {known})")
    if not isinstance(values, list):
        raise BadRequest(f"instance {i}, slot {name}: feasigns must be a list of integers")
    feasigns += values
    entries.append((i, slot, len(values), str(name)))


def _finish(
    count: int,
    feasigns: list[Any],
    entries: list[Entry],
    space: SlotSpace,
    dense: NDArray[np.float32] | None = None,
) -> Parsed:
    raw = _as_uint64(feasigns) if feasigns else np.zeros(0, dtype=np.uint64)
    if raw is None:
        raw = _convert_slowly(feasigns, entries)
    counts = np.fromiter((e[2] for e in entries), np.int64, len(entries))
    slots = np.repeat(np.fromiter((e[1] for e in entries), np.int32, len(entries)), counts)
    rows = np.repeat(np.fromiter((e[0] for e in entries), np.int32, len(entries)), counts)
    parsed = parsed_keys(count, raw, slots, rows, space)
    parsed.dense = dense
    return parsed


def parsed_keys(
    count: int,
    raw: NDArray[np.uint64],
    slots: NDArray[np.int32],
    rows: NDArray[np.int32],
    space: SlotSpace,
) -> Parsed:
    """Raw feasigns (with their slot index and instance, in instance order as every request
    form gives them) -> a Parsed: sparse keys, the padding key dropped, and the crossed ids
    after them when the model has crosses. Every request form ends here."""
    keys = raw % np.uint64(space.sparse_dim)
    real = keys != 0
    kept_slots, kept_rows = slots, rows
    if not real.all():
        keys, kept_slots, kept_rows = keys[real], slots[real], rows[real]
    largest = int(raw.max()) if raw.size else 0
    parsed = Parsed(
        count, keys, kept_slots, kept_rows, largest, raw=raw, raw_slots=slots, raw_rows=rows
    )
    if space.crossing is not None:
        sent = raw[real] if len(keys) < len(raw) else raw
        crossed_keys, crossed_inputs, crossed_rows = space.crossing.keys(
            count, sent, kept_slots, kept_rows
        )
        parsed.keys = np.concatenate([keys, crossed_keys])
        parsed.slots = np.concatenate([kept_slots, crossed_inputs])
        parsed.rows = np.concatenate([kept_rows, crossed_rows])
        parsed.crossed = len(crossed_keys)
    return parsed


_GOLDEN = np.uint64(GOLDEN)
_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SHIFT_1, _SHIFT_2, _SHIFT_3 = np.uint64(30), np.uint64(27), np.uint64(31)


def splitmix64_array(values: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """elasticctr_common.crosses.splitmix64 of each value: uint64 array arithmetic wraps
    as its `& MASK` does (and silently, unlike numpy's scalars: keep these arrays)."""
    z = values + _GOLDEN
    z ^= z >> _SHIFT_1
    z *= _MIX_1
    z ^= z >> _SHIFT_2
    z *= _MIX_2
    z ^= z >> _SHIFT_3
    return z


def crossed_feasigns(
    seeds: NDArray[np.uint64], xs: NDArray[np.uint64], ys: NDArray[np.uint64]
) -> NDArray[np.uint64]:
    """elasticctr_common.crosses.crossed_feasign of each (seed, x, y), elementwise."""
    return splitmix64_array(splitmix64_array(seeds ^ xs) ^ ys)


def _as_uint64(feasigns: list[Any]) -> NDArray[np.uint64] | None:
    """The feasigns as uint64 if all are ints in range (no bool, float or str), else None."""
    if not all(type(f) is int for f in feasigns):
        return None
    try:
        array = np.array(feasigns, dtype=np.int64)
        return None if (array < 0).any() else array.view(np.uint64)
    except OverflowError:  # some >= 2**63 (or >= 2**64, or < -2**63)
        try:
            return np.array(feasigns, dtype=np.uint64) if min(feasigns) >= 0 else None
        except OverflowError:
            return None


def _convert_slowly(feasigns: list[Any], entries: list[Entry]) -> NDArray[np.uint64]:
    """The feasigns as uint64, accepting decimal strings (protobuf's JSON form of uint64);
    a BadRequest naming the first value that is not an unsigned 64-bit integer."""
    out = np.empty(len(feasigns), dtype=np.uint64)
    position = 0
    for instance, _slot, n, name in entries:
        for value in feasigns[position : position + n]:
            number = _feasign(value)
            if number is None:
                raise BadRequest(
                    f"instance {instance}, slot {name}: feasign {value!r} is not an "
                    f"unsigned 64-bit integer"
                )
            out[position] = number
            position += 1
    return out


def _feasign(value: object) -> int | None:
    if type(value) is int:
        return value if 0 <= value <= MAX_FEASIGN else None
    if isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value)
        return number if number <= MAX_FEASIGN else None
    return None


def merge(parts: list[Parsed]) -> Parsed:
    """One batch of several requests (parsed for the same model), rows renumbered."""
    if len(parts) == 1:
        return parts[0]
    offsets = np.cumsum([0] + [p.count for p in parts[:-1]])
    rows = np.concatenate([p.rows + np.int32(o) for p, o in zip(parts, offsets, strict=True)])
    keys = np.concatenate([p.keys for p in parts])
    slots = np.concatenate([p.slots for p in parts])
    dense = [p.dense for p in parts if p.dense is not None]
    return Parsed(
        int(sum(p.count for p in parts)),
        keys,
        slots,
        rows,
        max(p.largest_feasign for p in parts),
        np.concatenate(dense) if dense else None,
        crossed=sum(p.crossed for p in parts),
    )
