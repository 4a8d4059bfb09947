"""The realistic profile of synthetic data: shaped like ad logs, with a known answer.

What makes real CTR data hard, and what the simple profile (generate.py) lacks:

- 20 slots whose vocabularies go from a handful to 100,000 feasigns, drawn with Zipf
  popularity: most ids of a big slot are seen once or never (a long tail of rare ids);
- multi-hot slots (1..5 ids an example), often-empty slots, one slot of slot.conf that
  never occurs, one slot of pure noise (weight 0 for every id);
- raw 64-bit feasigns; a pairwise interaction between two slots (a weight per pair of
  their ids, beyond the per-id effects); a click rate near 4%.

The truth is logistic: logit = bias + sum of the example's per-id weights + the pair's
weight. Every example's true probability is known, so the Bayes-optimal AUC of a held-out
set is the AUC of those probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

SLOT_COUNT = 20
TARGET_CTR = 0.04
ZIPF_EXPONENT = 1.1
MAX_VOCAB = 100_000
MAX_HOT = 5  # a multi-hot slot has 1..MAX_HOT ids
# Slot positions (0-based, in slot.conf order) with a role of their own. Vocabularies grow
# with the position, geometrically from 4 to 100,000.
MULTI_HOT = (9, 13, 16)
OFTEN_EMPTY = {7: 0.6, 12: 0.75, 17: 0.5}  # position: probability the slot is empty
NEVER_PRESENT = 5
NOISE = 15
INTERACTION = (1, 4)  # the pair whose ids interact (vocabularies 7 and 34 at 100,000)
# The per-id part of the logit: its spread over slots. A slot's weight std falls with the
# square of the log of its vocabulary, so that the tail carries signal without being most
# of it: a logistic regression of the true form comes within about 0.02 of Bayes-optimal,
# as on the ad logs of issue 16.
LOGIT_STD = 0.85
INTERACTION_STD = 0.8
TAIL_POWER = 2


@dataclass
class Slot:
    slot: int
    feasigns: NDArray[np.uint64]
    weights: NDArray[np.float64]
    popularity: NDArray[np.float64]  # probability of each id
    empty_prob: float
    max_hot: int


@dataclass
class RealisticModel:
    slots: list[Slot]
    pair_weights: NDArray[np.float64]  # [vocab of INTERACTION[0], vocab of INTERACTION[1]]
    bias: float = 0.0
    never_present: list[int] = field(default_factory=list)

    @property
    def slot_ids(self) -> list[int]:
        return [s.slot for s in self.slots]

    @property
    def interaction(self) -> tuple[int, int]:
        """The slot ids of the interacting pair."""
        return self.slots[INTERACTION[0]].slot, self.slots[INTERACTION[1]].slot

    @classmethod
    def create(cls, seed: int, first_slot: int = 101, max_vocab: int = MAX_VOCAB) -> RealisticModel:
        """`max_vocab` below 100,000 shrinks the tail (a CI-sized profile)."""
        rng = np.random.default_rng(seed)
        vocabs = np.geomspace(4, max_vocab, SLOT_COUNT).round().astype(int)
        slots = []
        for position, vocab in enumerate(vocabs):
            popularity = 1.0 / np.arange(1, vocab + 1) ** ZIPF_EXPONENT
            max_hot = MAX_HOT if position in MULTI_HOT else 1
            empty = OFTEN_EMPTY.get(position, 0.05)
            mean_ids = (1 - empty) * (1 + max_hot) / 2
            std = (
                LOGIT_STD
                / np.sqrt(SLOT_COUNT * mean_ids)
                * (3 / (1 + np.log10(vocab))) ** TAIL_POWER
            )
            std = 0.0 if position == NOISE else std
            slots.append(
                Slot(
                    slot=first_slot + position,
                    feasigns=rng.integers(1, 2**64 - 1, vocab, dtype=np.uint64),
                    weights=rng.normal(0.0, std, vocab),
                    popularity=popularity / popularity.sum(),
                    empty_prob=1.0 if position == NEVER_PRESENT else empty,
                    max_hot=max_hot,
                )
            )
        first, second = (int(vocabs[p]) for p in INTERACTION)
        model = cls(slots, rng.normal(0.0, INTERACTION_STD, (first, second)))
        model.never_present = [slots[NEVER_PRESENT].slot]
        # The bias that gives the target click rate, on a sample of this model's logits.
        logits = model.draw(50_000, np.random.default_rng(seed + 2))[1]
        low, high = -10.0, 0.0
        for _ in range(40):
            mid = (low + high) / 2
            low, high = (mid, high) if np.mean(_sigmoid(logits + mid)) < TARGET_CTR else (low, mid)
        model.bias = (low + high) / 2
        return model

    def draw(
        self, count: int, rng: np.random.Generator
    ) -> tuple[list[list[str]], NDArray[np.float64]]:
        """Per example its `feasign:slot` tokens, and its logit without the bias."""
        logits = np.zeros(count)
        tokens: list[list[str]] = [[] for _ in range(count)]
        first_ids = np.full(count, -1)
        second_ids = np.full(count, -1)
        for position, slot in enumerate(self.slots):
            sizes = rng.integers(1, slot.max_hot + 1, count)
            sizes[rng.random(count) < slot.empty_prob] = 0
            picks = rng.choice(len(slot.feasigns), size=int(sizes.sum()), p=slot.popularity)
            owner = np.repeat(np.arange(count), sizes)
            np.add.at(logits, owner, slot.weights[picks])
            if position in INTERACTION:  # single-hot slots: one id or none per example
                (first_ids if position == INTERACTION[0] else second_ids)[owner] = picks
            suffix = f":{slot.slot}"
            for example, feasign in zip(owner.tolist(), slot.feasigns[picks].tolist(), strict=True):
                tokens[example].append(f"{feasign}{suffix}")
        both = (first_ids >= 0) & (second_ids >= 0)
        logits[both] += self.pair_weights[first_ids[both], second_ids[both]]
        return tokens, logits

    def sample(self, count: int, rng: np.random.Generator) -> tuple[list[str], NDArray[np.float64]]:
        """`count` lines and their true click probabilities."""
        tokens, logits = self.draw(count, rng)
        probs = _sigmoid(logits + self.bias)
        clicks = (rng.random(count) < probs).astype(int)
        # A line needs a feasign: an example whose every slot came out empty gets none of
        # its own, which real logs do not have either; give it the first slot's head id.
        head = f"{self.slots[0].feasigns[0]}:{self.slots[0].slot}"
        pairs = zip(clicks.tolist(), tokens, strict=True)
        lines = [f"1 {c} {' '.join(t) if t else head}" for c, t in pairs]
        return lines, probs


def _sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))
