"""Crossed ids: the one rule by which the trainer's parsers (Python and native) and
serving's request parser form an id for a pair of slots (docs/architecture.md, "Crossed
ids").

A cross names two slots of slot.conf, `[a, b]`. For every example it is one more sparse
input of the model, after slot.conf's slots (in the order the crosses are configured):
its feasigns are `crossed_feasign(pair_seed(a, b), x, y)` for each x of slot a's ids and
each y of slot b's (x-major, each slot's ids in the order the line or request gives
them), and its keys are those feasigns % sparse_dim, as any slot's. A slot's ids here are
its feasigns whose key is not the padding key 0, the first MAX_CROSSED_IDS of them; a
cross with no id on either side is empty (the padding key).

Why: a click that depends on a pair of ids (an ad on a site, a hour on a weekday) is a
weight per pair, which sum-pooled embeddings and the layers above learn slowly; as an id
of its own it is learnt like any other (docs/trainer.md, "crossed ids").

The mixing is SplitMix64's output function (Steele, Lea and Flood, 2014) over uint64: what
the native pipe (images/trainer/pipe) and serving (elasticctr_serving.instances, in numpy)
compute too, each checked against CROSS_VECTORS.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MASK = 2**64 - 1
GOLDEN = 0x9E3779B97F4A7C15
MAX_CROSSED_IDS = 4  # of each slot: a cross adds at most 16 keys to an example
MAX_CROSSES = 64
# crosses "auto" (elasticctr_trainer.auto_crosses): every pair of this many slots.
AUTO_CROSS_SLOTS = 7


def splitmix64(value: int) -> int:
    z = (value + GOLDEN) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def pair_seed(a: int, b: int) -> int:
    """What distinguishes the cross of slots a and b from every other pair's."""
    return splitmix64(splitmix64(a) ^ b)


def crossed_feasign(seed: int, x: int, y: int) -> int:
    """The crossed id of feasigns x (of the pair's first slot) and y (of its second)."""
    return splitmix64(splitmix64(seed ^ x) ^ y)


def crossed_keys(seed: int, xs: Sequence[int], ys: Sequence[int], sparse_dim: int) -> list[int]:
    """A cross's keys for its two slots' feasigns as given (padding keys dropped, the first
    MAX_CROSSED_IDS of each side kept); empty when a side has none."""
    left = [x for x in xs if x % sparse_dim][:MAX_CROSSED_IDS]
    right = [y for y in ys if y % sparse_dim][:MAX_CROSSED_IDS]
    keys = (crossed_feasign(seed, x, y) % sparse_dim for x in left for y in right)
    return [key for key in keys if key]


def cross_problems(crosses: Iterable[object], slots: Sequence[int] | None = None) -> list[str]:
    """What is wrong with a list of crosses (empty: nothing): each a pair of two different
    slots (of `slots`, slot.conf's, when given), no pair twice in either order, at most
    MAX_CROSSES."""
    problems = []
    seen: set[frozenset[int]] = set()
    known = set(slots) if slots is not None else None
    crosses = list(crosses)
    if len(crosses) > MAX_CROSSES:
        problems.append(f"crosses: at most {MAX_CROSSES} pairs, got {len(crosses)}")
    for cross in crosses:
        if not (
            isinstance(cross, list | tuple)
            and len(cross) == 2
            and all(type(s) is int and 0 <= s <= MASK for s in cross)
        ):
            problems.append(f"cross {cross!r}: expected a pair of slot ids, e.g. [101, 102]")
            continue
        a, b = cross
        if a == b:
            problems.append(f"cross {[a, b]}: a slot crossed with itself")
        elif frozenset(cross) in seen:
            problems.append(f"cross {[a, b]}: this pair is given twice")
        seen.add(frozenset(cross))
        missing = [s for s in (a, b) if known is not None and s not in known]
        if missing:
            problems.append(
                f"cross {[a, b]}: slot {', '.join(map(str, missing))} is not in slot.conf"
            )
    return problems


def cross_indices(crosses: Sequence[Sequence[int]], slots: Sequence[int]) -> list[tuple[int, int]]:
    """Each cross as the input indices of its two slots in `slots` (slot.conf's order);
    ValueError naming the problems when they are not valid crosses of those slots."""
    problems = cross_problems(crosses, slots)
    if problems:
        raise ValueError("; ".join(problems))
    index = {slot: i for i, slot in enumerate(slots)}
    return [(index[a], index[b]) for a, b in crosses]


# (a, b, x, y, crossed feasign): the contract's fixed points, checked by this rule's tests,
# the native pipe's (images/trainer/pipe) and serving's (tests/images/serving).
CROSS_VECTORS: tuple[tuple[int, int, int, int, int], ...] = (
    (101, 102, 1, 2, 5749521250910205319),
    (101, 102, 2, 1, 15789894203959822817),
    (0, 0, 0, 0, 2391539541053276776),
    (2**64 - 1, 5, 2**64 - 1, 2**64 - 1, 14880215314564804982),
    (7, 3, 123456789012345678, 987654321, 3475289505882875014),
    (26, 1, 18446744073709551557, 42, 13249862372824029802),
)
