"""Synthetic ElasticCTR data with a known answer.

Each slot has a vocabulary of random 64-bit feasigns with mildly skewed popularity and a
weight per feasign; an example takes 0..max feasigns per slot and is clicked with
probability sigmoid(bias + sum of its feasigns' weights). The true probability of every
example is known, so the Bayes-optimal AUC of any held-out set is the AUC of those
probabilities (`bayes_auc`). Writes hour directories with donefiles, a held-out set,
slot.conf and the model itself (truth.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property

import numpy as np
from elasticctr_common.storage import open_store
from numpy.typing import NDArray

from .hours import format_hour, parse_hour
from .metrics import auc


@dataclass
class SyntheticModel:
    slots: list[int]
    feasigns: list[NDArray[np.uint64]]  # per slot: uint64 vocabulary
    weights: list[NDArray[np.float64]]  # per slot: float weight of each feasign
    popularity: NDArray[np.float64]  # probability of each vocabulary rank
    bias: float
    max_feasigns: int
    empty_slot_prob: float

    @classmethod
    def create(
        cls, slot_count: int, vocab: int, seed: int, logit_std: float = 1.5, bias: float = -1.0,
        max_feasigns: int = 2, empty_slot_prob: float = 0.05, first_slot: int = 101,
    ) -> SyntheticModel:  # fmt: skip
        rng = np.random.default_rng(seed)
        mean_feasigns = (1 - empty_slot_prob) * (1 + max_feasigns) / 2
        weight_std = logit_std / np.sqrt(slot_count * mean_feasigns)
        popularity = 1.0 / np.sqrt(np.arange(1, vocab + 1))
        return cls(
            slots=[first_slot + i for i in range(slot_count)],
            feasigns=[
                rng.integers(1, 2**64 - 1, vocab, dtype=np.uint64) for _ in range(slot_count)
            ],
            weights=[rng.normal(0.0, weight_std, vocab) for _ in range(slot_count)],
            popularity=popularity / popularity.sum(),
            bias=bias,
            max_feasigns=max_feasigns,
            empty_slot_prob=empty_slot_prob,
        )

    def sample(self, count: int, rng: np.random.Generator) -> tuple[list[str], NDArray[np.float64]]:
        """`count` lines and their true click probabilities."""
        logits = np.full(count, self.bias)
        tokens: list[list[str]] = [[] for _ in range(count)]
        vocab = len(self.popularity)
        for slot, feasigns, weights in zip(self.slots, self.feasigns, self.weights, strict=True):
            sizes = rng.integers(1, self.max_feasigns + 1, count)
            sizes[rng.random(count) < self.empty_slot_prob] = 0
            picks = rng.choice(vocab, size=int(sizes.sum()), p=self.popularity)
            owner = np.repeat(np.arange(count), sizes)
            np.add.at(logits, owner, weights[picks])
            for example, feasign in zip(owner.tolist(), feasigns[picks].tolist(), strict=True):
                tokens[example].append(f"{feasign}:{slot}")
        probs = 1.0 / (1.0 + np.exp(-logits))
        clicks = (rng.random(count) < probs).astype(int)
        lines = [f"1 {c} {' '.join(t)}" for c, t in zip(clicks.tolist(), tokens, strict=True)]
        return lines, probs

    def probability(self, line: str) -> float:
        logit = self.bias
        for token in line.split()[2:]:
            feasign, slot = token.split(":")
            logit += self.weight_of[(int(slot), int(feasign))]
        return float(1.0 / (1.0 + np.exp(-logit)))

    @cached_property
    def weight_of(self) -> dict[tuple[int, int], float]:
        return {
            (slot, int(f)): float(w)
            for slot, fs, ws in zip(self.slots, self.feasigns, self.weights, strict=True)
            for f, w in zip(fs, ws, strict=True)
        }

    def to_json(self) -> str:
        return json.dumps({
            "slots": self.slots, "bias": self.bias, "max_feasigns": self.max_feasigns,
            "empty_slot_prob": self.empty_slot_prob, "popularity": self.popularity.tolist(),
            "feasigns": [f.tolist() for f in self.feasigns],
            "weights": [w.tolist() for w in self.weights],
        })  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> SyntheticModel:
        data = json.loads(text)
        return cls(
            slots=data["slots"],
            feasigns=[np.array(f, dtype=np.uint64) for f in data["feasigns"]],
            weights=[np.array(w) for w in data["weights"]],
            popularity=np.array(data["popularity"]),
            bias=data["bias"],
            max_feasigns=data["max_feasigns"],
            empty_slot_prob=data["empty_slot_prob"],
        )


def bayes_auc(model: SyntheticModel, lines: list[str]) -> float:
    """The best AUC any model can reach on `lines`: that of the true probabilities."""
    labels = np.array([int(line.split()[1]) > 0 for line in lines])
    return auc(labels, np.array([model.probability(line) for line in lines]))


def generate(
    out_uri: str, slot_count: int, vocab: int, start: str, hours: int, examples_per_hour: int,
    files_per_hour: int, heldout: int, seed: int, missing_hours: list[str] | None = None,
    first_slot: int = 101,
) -> SyntheticModel:  # fmt: skip
    model = SyntheticModel.create(slot_count, vocab, seed, first_slot=first_slot)
    rng = np.random.default_rng(seed + 1)
    out = open_store(out_uri)
    out.write_text("slot.conf", "".join(f"{s}\n" for s in model.slots))
    out.write_text("truth.json", model.to_json())
    first = parse_hour(start)
    for offset in range(hours):
        hour = format_hour(first + timedelta(hours=offset))
        lines, _ = model.sample(examples_per_hour, rng)
        for part in range(files_per_hour):
            chunk = lines[part::files_per_hour]
            out.write_text(f"train/{hour}/part-{part:05d}", "".join(line + "\n" for line in chunk))
        if hour not in (missing_hours or []):
            out.write_text(f"train/{hour}/donefile", "")
    if heldout:
        lines, _ = model.sample(heldout, rng)
        out.write_text("heldout/part-00000", "".join(line + "\n" for line in lines))
    return model
