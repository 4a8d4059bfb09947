"""The realistic profile of synthetic data: shaped like ad logs, with a known answer.

What makes real CTR data hard, and what the simple profile (generate.py) lacks:

- 20 slots whose vocabularies go from a handful to 100,000 feasigns, drawn with Zipf
  popularity: most ids of a big slot are seen once or never (a long tail of rare ids);
- multi-hot slots (1..5 ids an example), often-empty slots, one slot of slot.conf that
  never occurs, one slot of pure noise (weight 0 for every id);
- raw 64-bit feasigns; a pairwise interaction between two slots (a weight per pair of
  their ids, beyond the per-id effects); a click rate near 4%.

A profile of the synthetic engine (synth.py): the truth is logistic, every example's true
probability is known, so the Bayes-optimal AUC of a held-out set is the AUC of those
probabilities.
"""

from __future__ import annotations

import numpy as np

from .synth import PairSpec, Profile, SlotSpec, SynthModel, per_id_std

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
# as it does on real ad logs.
LOGIT_STD = 0.85
INTERACTION_STD = 0.8
TAIL_POWER = 2


def profile(max_vocab: int = MAX_VOCAB) -> Profile:
    """`max_vocab` below 100,000 shrinks the tail (a CI-sized profile)."""
    vocabs = np.geomspace(4, max_vocab, SLOT_COUNT).round().astype(int)
    slots = []
    for position, vocab in enumerate(vocabs.tolist()):
        max_hot = MAX_HOT if position in MULTI_HOT else 1
        empty = OFTEN_EMPTY.get(position, 0.05)
        mean_ids = (1 - empty) * (1 + max_hot) / 2
        std = per_id_std(LOGIT_STD, SLOT_COUNT, mean_ids, vocab, TAIL_POWER)
        slots.append(
            SlotSpec(
                vocab,
                0.0 if position == NOISE else std,
                zipf=ZIPF_EXPONENT,
                max_hot=max_hot,
                empty_prob=1.0 if position == NEVER_PRESENT else empty,
            )
        )
    pair = PairSpec(INTERACTION[0], INTERACTION[1], INTERACTION_STD)
    return Profile(slots=tuple(slots), pairs=(pair,), ctr=TARGET_CTR)


class RealisticModel(SynthModel):
    @property
    def interaction(self) -> tuple[int, int]:
        """The slot ids of the interacting pair."""
        return self.crosses[0]

    @classmethod
    def create_realistic(
        cls, seed: int, first_slot: int = 101, max_vocab: int = MAX_VOCAB
    ) -> RealisticModel:
        model = cls.create(profile(max_vocab), seed, first_slot)
        assert isinstance(model, RealisticModel)
        return model
