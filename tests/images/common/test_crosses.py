"""The crossing rule every parser shares (elasticctr_common.crosses): its fixed points,
which ids a cross takes, and what a list of crosses may be."""

from __future__ import annotations

import pytest
from elasticctr_common.crosses import (
    CROSS_VECTORS,
    MAX_CROSSED_IDS,
    MAX_CROSSES,
    cross_indices,
    cross_problems,
    crossed_feasign,
    crossed_keys,
    pair_seed,
    splitmix64,
)


def test_splitmix64_is_the_published_generator():
    # The first outputs of splitmix64 seeded with 0 (Vigna's reference implementation).
    state, outputs = 0, []
    for _ in range(3):
        outputs.append(splitmix64(state))
        state = (state + 0x9E3779B97F4A7C15) % 2**64
    assert outputs == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


@pytest.mark.parametrize(("a", "b", "x", "y", "crossed"), CROSS_VECTORS)
def test_the_fixed_points(a: int, b: int, x: int, y: int, crossed: int):
    assert crossed_feasign(pair_seed(a, b), x, y) == crossed


def test_the_pair_and_the_order_of_its_slots_matter():
    assert pair_seed(101, 102) != pair_seed(102, 101)
    assert pair_seed(101, 102) != pair_seed(101, 103)
    seed = pair_seed(101, 102)
    assert crossed_feasign(seed, 1, 2) != crossed_feasign(seed, 2, 1)


def test_keys_are_every_pair_of_the_first_ids_without_padding():
    seed, dim = pair_seed(1, 2), 1000
    xs = [1000, 5, 6, 7, 8, 9]  # 1000 is the padding key; 9 is past the cap
    ys = [3, 2000, 4]
    expected = [crossed_feasign(seed, x, y) % dim for x in (5, 6, 7, 8) for y in (3, 4)]
    assert crossed_keys(seed, xs, ys, dim) == [k for k in expected if k]
    assert len(crossed_keys(seed, xs, ys, dim)) <= MAX_CROSSED_IDS * 2


def test_a_cross_with_an_empty_side_is_empty():
    seed = pair_seed(1, 2)
    assert crossed_keys(seed, [], [5], 1000) == []
    assert crossed_keys(seed, [5], [0, 1000], 1000) == []


def test_repeated_ids_repeat_their_crossed_keys():
    seed = pair_seed(1, 2)
    keys = crossed_keys(seed, [5, 5], [7], 10**9)
    assert len(keys) == 2 and keys[0] == keys[1]


@pytest.mark.parametrize(
    ("crosses", "problem"),
    [
        ([[101, 101]], "a slot crossed with itself"),
        ([[101, 102], [102, 101]], "given twice"),
        ([[101]], "expected a pair of slot ids"),
        ([[101, "102"]], "expected a pair of slot ids"),
        ([[101, True]], "expected a pair of slot ids"),
        ([[101, -1]], "expected a pair of slot ids"),
        ([101], "expected a pair of slot ids"),
        ([[101, 109]], "slot 109 is not in slot.conf"),
        ([[i, i + 1] for i in range(MAX_CROSSES + 1)], f"at most {MAX_CROSSES} pairs"),
    ],
)
def test_bad_crosses_are_named(crosses: list[object], problem: str):
    found = cross_problems(crosses, [101, 102, 103] if "slot.conf" in problem else None)
    assert any(problem in line for line in found), found


def test_cross_indices_are_slot_conf_positions():
    assert cross_indices([[103, 101], [101, 102]], [101, 102, 103]) == [(2, 0), (0, 1)]
    assert cross_problems([[103, 101], [101, 102]], [101, 102, 103]) == []
    with pytest.raises(ValueError, match=r"slot 7 is not in slot\.conf"):
        cross_indices([[7, 101]], [101, 102])
