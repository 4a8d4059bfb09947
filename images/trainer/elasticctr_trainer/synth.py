"""Synthetic CTR data from a profile of knobs, with a known answer.

A profile says, per slot, how many ids it has (its vocabulary), how their popularity
falls (a Zipf exponent), how much one id moves the click logit (a weight std), how many
ids an example takes (1, or 1..max_hot for a multi-hot slot) and how often the slot is
empty; which pairs of single-hot slots interact (a weight per pair of their ids); the
dense features (heavy-tailed counts, written as PaddleRec's Criteo preparation writes
them: the count over a scale); the click rate; whether ids are raw 64-bit feasigns or
small pre-hashed ids (Criteo's preparation); and the line format.

The truth is logistic: logit = bias + the example's per-id weights + its pairs' weights +
per dense component, its weight x the standardised log1p of the count. Every example's
true probability is known, so the Bayes-optimal AUC of a held-out set is the AUC of those
probabilities. The realistic profile (realistic.py), the Criteo-shaped one (`criteo`) and
the quality matrix's cells (bench/model_quality.py) are profiles of this one engine.

Random draws happen in a fixed order (per slot its ids then its weights, then each pair's
weights, then the dense features'; per example batch: per slot its sizes, empties and
picks, then the dense counts), so a profile and a seed always give the same data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from elasticctr_common.lines import DenseFeature, LineFormat
from numpy.typing import NDArray

BIAS_SAMPLE = 50_000  # examples drawn to set the bias for the target click rate
SMALL_ID_SPACE = 1_000_001  # pre-hashed ids are below this (the default sparse_dim)


@dataclass(frozen=True)
class SlotSpec:
    vocab: int
    weight_std: float  # std of one id's weight in the logit
    zipf: float = 1.1  # popularity of the id of rank r: r ** -zipf
    max_hot: int = 1  # ids an example takes where the slot is present: 1..max_hot
    empty_prob: float = 0.05  # the slot has no id in an example (1.0: never present)


@dataclass(frozen=True)
class PairSpec:
    """Two single-hot slots (positions in the profile) whose ids interact."""

    first: int
    second: int
    weight_std: float


@dataclass(frozen=True)
class DenseSpec:
    """A dense feature of `dim` heavy-tailed counts (log-normal, rounded down; 0 where
    missing), written as count / scale, the scale being the count's 95th percentile."""

    name: str
    dim: int
    weight_std: float  # std of one component's weight on its standardised log1p(count)
    missing_prob: float = 0.2


@dataclass(frozen=True)
class Profile:
    slots: tuple[SlotSpec, ...]
    pairs: tuple[PairSpec, ...] = ()
    dense: tuple[DenseSpec, ...] = ()
    ctr: float = 0.04
    raw_ids: bool = True  # 64-bit feasigns; False: ids below SMALL_ID_SPACE
    format: str = "elasticctr"  # or "paddlerec" (needed for dense features)

    def line_format(self) -> LineFormat:
        return LineFormat(self.format, tuple(DenseFeature(d.name, d.dim) for d in self.dense))

    def with_(self, **changes: object) -> Profile:
        return replace(self, **changes)  # type: ignore[arg-type]


@dataclass
class Slot:
    slot: int
    feasigns: NDArray[np.uint64]
    weights: NDArray[np.float64]
    popularity: NDArray[np.float64]  # probability of each id
    empty_prob: float
    max_hot: int


@dataclass
class Pair:
    first: int  # positions in SynthModel.slots
    second: int
    weights: NDArray[np.float64]  # [vocab of first, vocab of second]


@dataclass
class Dense:
    name: str
    log_mean: NDArray[np.float64]  # per component: the count is floor(exp(N(mean, std)))
    log_std: NDArray[np.float64]
    missing_prob: float
    scale: NDArray[np.float64]  # written value = count / scale
    center: NDArray[np.float64]  # log1p(count) is standardised with these
    spread: NDArray[np.float64]
    weights: NDArray[np.float64]


@dataclass
class Drawn:
    """Examples before they are lines: per slot the ids of each example, dense counts."""

    picks: list[tuple[NDArray[np.int64], NDArray[np.int64]]]  # per slot: (owner, id index)
    counts: list[NDArray[np.float64]]  # per dense feature: [examples, dim]
    logits: NDArray[np.float64]  # without the bias


@dataclass
class SynthModel:
    slots: list[Slot]
    pairs: list[Pair]
    dense: list[Dense]
    format: LineFormat
    bias: float = 0.0
    never_present: list[int] = field(default_factory=list)

    @property
    def slot_ids(self) -> list[int]:
        return [s.slot for s in self.slots]

    @property
    def crosses(self) -> list[tuple[int, int]]:
        """The slot ids of each interacting pair (the baselines' crosses)."""
        return [(self.slots[p.first].slot, self.slots[p.second].slot) for p in self.pairs]

    @classmethod
    def create(cls, profile: Profile, seed: int, first_slot: int = 101) -> SynthModel:
        rng = np.random.default_rng(seed)
        slots = []
        for position, spec in enumerate(profile.slots):
            popularity = 1.0 / np.arange(1, spec.vocab + 1) ** spec.zipf
            if profile.raw_ids:
                feasigns = rng.integers(1, 2**64 - 1, spec.vocab, dtype=np.uint64)
            else:
                feasigns = rng.integers(1, SMALL_ID_SPACE, spec.vocab, dtype=np.uint64)
            slots.append(
                Slot(
                    slot=first_slot + position,
                    feasigns=feasigns,
                    weights=rng.normal(0.0, spec.weight_std, spec.vocab),
                    popularity=popularity / popularity.sum(),
                    empty_prob=spec.empty_prob,
                    max_hot=spec.max_hot,
                )
            )
        pairs = []
        for pair in profile.pairs:
            for position in (pair.first, pair.second):
                if profile.slots[position].max_hot != 1:
                    raise ValueError(f"slot position {position} of a pair must be single-hot")
            shape = (profile.slots[pair.first].vocab, profile.slots[pair.second].vocab)
            pairs.append(Pair(pair.first, pair.second, rng.normal(0.0, pair.weight_std, shape)))
        dense = [_dense_truth(spec, rng) for spec in profile.dense]
        model = cls(slots, pairs, dense, profile.line_format())
        model.never_present = [s.slot for s in slots if s.empty_prob >= 1.0]
        logits = model.draw(BIAS_SAMPLE, np.random.default_rng(seed + 2)).logits
        model.bias = bias_for_rate(logits, profile.ctr)
        return model

    def draw(self, count: int, rng: np.random.Generator) -> Drawn:
        logits = np.zeros(count)
        picks = []
        chosen: dict[int, NDArray[np.int64]] = {}  # single-hot slots of pairs: id or -1
        in_pairs = {p for pair in self.pairs for p in (pair.first, pair.second)}
        for position, slot in enumerate(self.slots):
            sizes = rng.integers(1, slot.max_hot + 1, count)
            sizes[rng.random(count) < slot.empty_prob] = 0
            ids = rng.choice(len(slot.feasigns), size=int(sizes.sum()), p=slot.popularity)
            owner = np.repeat(np.arange(count), sizes)
            np.add.at(logits, owner, slot.weights[ids])
            picks.append((owner, ids))
            if position in in_pairs:
                chosen[position] = np.full(count, -1)
                chosen[position][owner] = ids
        for pair in self.pairs:
            first, second = chosen[pair.first], chosen[pair.second]
            both = (first >= 0) & (second >= 0)
            logits[both] += pair.weights[first[both], second[both]]
        counts = []
        for dense in self.dense:
            raw = np.floor(
                np.exp(rng.normal(dense.log_mean, dense.log_std, (count, len(dense.scale))))
            )
            raw[rng.random(raw.shape) < dense.missing_prob] = 0.0
            logits += ((np.log1p(raw) - dense.center) / dense.spread) @ dense.weights
            counts.append(raw)
        return Drawn(picks, counts, logits)

    def sample(self, count: int, rng: np.random.Generator) -> tuple[list[str], NDArray[np.float64]]:
        """`count` lines and their true click probabilities."""
        drawn = self.draw(count, rng)
        probs = sigmoid(drawn.logits + self.bias)
        clicks = (rng.random(count) < probs).astype(int)
        return self.lines(drawn, clicks), probs

    def lines(self, drawn: Drawn, clicks: NDArray[np.int64]) -> list[str]:
        count = len(clicks)
        tokens: list[list[str]] = [[] for _ in range(count)]
        paddlerec = self.format.name == "paddlerec"
        for slot, (owner, ids) in zip(self.slots, drawn.picks, strict=True):
            feasigns = slot.feasigns[ids].tolist()
            if paddlerec:
                prefix = f"{slot.slot}:"
                for example, feasign in zip(owner.tolist(), feasigns, strict=True):
                    tokens[example].append(f"{prefix}{feasign}")
            else:
                suffix = f":{slot.slot}"
                for example, feasign in zip(owner.tolist(), feasigns, strict=True):
                    tokens[example].append(f"{feasign}{suffix}")
        # A line needs a feasign unless it has dense features: an example whose every slot
        # came out empty gets the first slot's head id, as real logs have no empty lines.
        head = self.slots[0]
        fallback = (
            f"{head.slot}:{head.feasigns[0]}" if paddlerec else f"{head.feasigns[0]}:{head.slot}"
        )
        if not paddlerec:
            pairs = zip(clicks.tolist(), tokens, strict=True)
            return [f"1 {c} {' '.join(t) if t else fallback}" for c, t in pairs]
        dense_text = self._dense_text(drawn, count)
        lines = []
        for example, (click, own) in enumerate(zip(clicks.tolist(), tokens, strict=True)):
            sparse = " ".join(own) if own or self.dense else fallback
            lines.append(
                " ".join(part for part in (f"click:{click}", dense_text[example], sparse) if part)
            )
        return lines

    def _dense_text(self, drawn: Drawn, count: int) -> list[str]:
        columns: list[list[str]] = [[] for _ in range(count)]
        for dense, raw in zip(self.dense, drawn.counts, strict=True):
            prefix = f"{dense.name}:"
            values = raw / dense.scale
            for example, row in enumerate(values.tolist()):
                columns[example].extend(f"{prefix}{v:.6g}" for v in row)
        return [" ".join(c) for c in columns]


def _dense_truth(spec: DenseSpec, rng: np.random.Generator) -> Dense:
    log_mean = rng.uniform(0.0, 4.0, spec.dim)
    log_std = rng.uniform(0.8, 2.0, spec.dim)
    scale = np.maximum(1.0, np.floor(np.exp(log_mean + 1.645 * log_std)))
    # log1p(count) of present counts is about N(mean, std) (slightly below: the floor).
    present = 1 - spec.missing_prob
    center = present * log_mean
    spread = np.sqrt(present * (log_std**2 + log_mean**2) - center**2)
    weights = rng.normal(0.0, spec.weight_std, spec.dim)
    return Dense(spec.name, log_mean, log_std, spec.missing_prob, scale, center, spread, weights)


def bias_for_rate(logits: NDArray[np.float64], rate: float) -> float:
    """The bias that gives `logits` the click rate `rate` (bisection)."""
    low, high = -15.0, 5.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if np.mean(sigmoid(logits + mid)) < rate else (low, mid)
    return (low + high) / 2


def sigmoid(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


# -- profiles -----------------------------------------------------------------------------

# Criteo's Kaggle set (45M examples): the cardinality of each of its 26 categorical
# columns, C1..C26.
CRITEO_CARDINALITIES = (
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
    27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572,
)  # fmt: skip
CRITEO_SCALE_DOWN = 100  # cardinalities above 100 are divided by this, keeping at least 100
CRITEO_CTR = 0.25  # Criteo's click rate is about 25.6%
CRITEO_DENSE = "dense_feature"  # PaddleRec's name for the 13 integer columns


def per_id_std(
    logit_std: float, slot_count: int, mean_ids: float, vocab: int, tail_power: float
) -> float:
    """One id's weight std: the per-id part of the logit spread over the slots, shrinking
    with the log of the vocabulary (tail_power 0: not at all), so that the tail of a big
    slot carries signal without being most of it."""
    shrink: float = (3 / (1 + math.log10(vocab))) ** tail_power
    return logit_std / math.sqrt(slot_count * mean_ids) * shrink


def criteo(scale_down: int = CRITEO_SCALE_DOWN) -> Profile:
    """Criteo-shaped: 13 dense count features (PaddleRec's `dense_feature`, 13 values) and
    26 single-hot categorical slots (ids 1..26, as PaddleRec's slots) with Criteo's
    cardinalities divided by `scale_down` (those above 100; at least 100 remain), Zipf 1.05,
    pre-hashed ids, C6xC9 and C22xC23 interacting, 25% clicks, PaddleRec's slot format."""
    slots = []
    for cardinality in CRITEO_CARDINALITIES:
        vocab = cardinality if cardinality <= 100 else max(100, cardinality // scale_down)
        std = per_id_std(0.9, len(CRITEO_CARDINALITIES), 0.97, vocab, tail_power=2)
        slots.append(SlotSpec(vocab, std, zipf=1.05, empty_prob=0.03))
    return Profile(
        slots=tuple(slots),
        pairs=(PairSpec(5, 8, 0.5), PairSpec(21, 22, 0.5)),
        dense=(DenseSpec(CRITEO_DENSE, 13, weight_std=0.15, missing_prob=0.2),),
        ctr=CRITEO_CTR,
        raw_ids=False,
        format="paddlerec",
    )


def knobs(
    slots: int = 20,
    max_vocab: int = 100_000,
    zipf: float = 1.1,
    multi_hot: int = 3,
    max_hot: int = 5,
    often_empty: int = 3,
    pairs: int = 1,
    ctr: float = 0.04,
    raw_ids: bool = True,
    dense: int = 0,
    tail_power: float = 1.0,
    logit_std: float = 0.9,
) -> Profile:
    """A profile from the quality matrix's knobs: `slots` slots with vocabularies growing
    geometrically from 4 to `max_vocab`, Zipf `zipf`; `multi_hot` of them (from the upper
    half) take 1..`max_hot` ids, `often_empty` are empty half the time or more; `pairs`
    pairs of small single-hot slots interact; `dense` dense count components (one feature
    `dense_feature`, PaddleRec's slot format); ids raw 64-bit or pre-hashed. `tail_power`:
    how fast one id's weight shrinks with its slot's vocabulary (0: not at all, the tail
    carries as much signal per id as the head)."""
    vocabs = np.geomspace(4, max_vocab, slots).round().astype(int).tolist()
    upper = list(range(slots // 2, slots))
    hot = set(upper[:: max(1, len(upper) // max(1, multi_hot))][:multi_hot])
    single = [p for p in range(slots) if p not in hot]
    empty_at = (
        {p: 0.5 + 0.25 * (i % 2) for i, p in enumerate(single[-often_empty:])}
        if often_empty
        else {}
    )
    specs = []
    for position, vocab in enumerate(vocabs):
        top = max_hot if position in hot else 1
        empty = empty_at.get(position, 0.05)
        mean_ids = (1 - empty) * (1 + top) / 2
        std = per_id_std(logit_std, slots, mean_ids, vocab, tail_power)
        specs.append(SlotSpec(vocab, std, zipf=zipf, max_hot=top, empty_prob=empty))
    small = [p for p in single if p not in empty_at and vocabs[p] <= 1000]
    pair_specs = tuple(PairSpec(small[2 * i], small[2 * i + 1], 0.8) for i in range(pairs))
    dense_specs = (DenseSpec(CRITEO_DENSE, dense, weight_std=0.15),) if dense else ()
    return Profile(
        slots=tuple(specs),
        pairs=pair_specs,
        dense=dense_specs,
        ctr=ctr,
        raw_ids=raw_ids,
        format="paddlerec" if dense else "elasticctr",
    )
