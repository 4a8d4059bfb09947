"""Which slot pairs to cross when the user names none: every pair of the few single-hot
slots with the fewest distinct ids in a sample of the data.

Why those: a pair of small slots has few enough id pairs for each to be seen often, so its
crossed ids learn (docs/trainer.md, "crossed ids": on the quality matrix, crossing every
pair of the 7 smallest slots gained 0.013-0.057 of held-out AUC after pass 1 in five of ten
cells and cost nothing measurable in the others); a pair of big or multi-hot slots spreads
its examples over more crossed ids than a pass can learn. The interactions of the matrix's
generator are between small single-hot slots, which is where the rule looks: data whose
interactions are elsewhere gains nothing from it (and loses little).
"""

from __future__ import annotations

from itertools import combinations

from elasticctr_common.crosses import AUTO_CROSS_SLOTS

from .lines import PADDING_KEY, Example

# A slot counts as single-hot when at most this share of the examples that have it give
# it more than one id.
MULTI_HOT_SHARE = 0.05


def auto_cross_count(slot_count: int) -> int:
    """How many crosses `auto` makes of `slot_count` slots: known before the data is."""
    chosen = min(AUTO_CROSS_SLOTS, slot_count)
    return chosen * (chosen - 1) // 2


class SlotSample:
    """What the rule needs of each slot in the first examples: its distinct keys, how many
    examples have it, how many give it more than one id."""

    def __init__(self, slot_count: int) -> None:
        self.distinct: list[set[int]] = [set() for _ in range(slot_count)]
        self.present = [0] * slot_count
        self.multi = [0] * slot_count
        self.examples = 0

    def add(self, example: Example) -> None:
        self.examples += 1
        for index, keys in enumerate(example.keys[: len(self.present)]):
            if keys == [PADDING_KEY]:
                continue
            self.present[index] += 1
            self.multi[index] += len(keys) > 1
            self.distinct[index].update(keys)

    def single_hot(self, index: int) -> bool:
        """Mostly one id where present, and more than one id in all (a slot of one id
        would cross into a copy of the other slot)."""
        present = self.present[index]
        ids = len(self.distinct[index] - {PADDING_KEY})
        return bool(present) and self.multi[index] <= MULTI_HOT_SHARE * present and ids > 1


def choose_crosses(sample: SlotSample, slots: list[int]) -> list[list[int]]:
    """Every pair (in slot.conf order) of the AUTO_CROSS_SLOTS single-hot slots with the
    fewest distinct keys in `sample` (ties: slot.conf's order). Always auto_cross_count
    pairs, which the network was built for: where fewer slots are single-hot, the others
    fill up by the same order (with no sample at all: slot.conf's first slots)."""
    order = sorted(
        range(len(slots)),
        key=lambda i: (not sample.single_hot(i), len(sample.distinct[i]), i),
    )
    chosen = sorted(order[:AUTO_CROSS_SLOTS])
    return [[slots[a], slots[b]] for a, b in combinations(chosen, 2)]
