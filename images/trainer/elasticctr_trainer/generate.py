"""Synthetic data with a known answer: hour directories with donefiles, a held-out set
and slot.conf, for the simple profile (below) and the profiles of synth.py (`realistic`,
`criteo`, the quality matrix's).

The simple profile: each slot has a vocabulary of random 64-bit feasigns with mildly
skewed popularity and a weight per feasign; an example takes 0..max feasigns per slot and
is clicked with probability sigmoid(bias + sum of its feasigns' weights); the model itself
goes to truth.json. The true probability of every example is known, so the Bayes-optimal
AUC of any held-out set is the AUC of those probabilities (`bayes_auc`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from elasticctr_common.lines import LineFormat
from elasticctr_common.storage import Store, open_store
from elasticctr_common.trainer_json import parse_hour
from numpy.typing import NDArray

from . import realistic, synth
from .hours import format_hour
from .metrics import auc
from .realistic import RealisticModel
from .synth import Profile, SynthModel


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


class Sampler(Protocol):
    def sample(self, count: int, rng: np.random.Generator) -> tuple[list[str], NDArray[np.float64]]:
        """`count` lines and their true click probabilities."""
        ...


@dataclass
class Generated:
    slots: list[int]
    train: list[str]  # every training line, hours in order
    heldout: list[str]
    heldout_probs: NDArray[np.float64]  # the true click probability of each held-out line
    format: LineFormat = field(default_factory=LineFormat)

    @property
    def bayes_auc(self) -> float:
        """The best AUC any model can reach on the held-out lines."""
        labels = np.array([self.format.split(line).label for line in self.heldout])
        return auc(labels, self.heldout_probs)


def write_data(
    out: Store, slots: list[int], sampler: Sampler, rng: np.random.Generator, start: str,
    hours: int, examples_per_hour: int, files_per_hour: int, heldout: int,
    missing_hours: list[str] | None = None, form: LineFormat | None = None,
) -> Generated:  # fmt: skip
    """slot.conf, the hour directories (with donefiles, except `missing_hours`) and the
    held-out set."""
    out.write_text("slot.conf", "".join(f"{s}\n" for s in slots))
    first = parse_hour(start)
    train: list[str] = []
    for offset in range(hours):
        hour = format_hour(first + timedelta(hours=offset))
        lines, _ = sampler.sample(examples_per_hour, rng)
        train.extend(lines)
        for part in range(files_per_hour):
            chunk = lines[part::files_per_hour]
            out.write_text(f"train/{hour}/part-{part:05d}", "".join(line + "\n" for line in chunk))
        if hour not in (missing_hours or []):
            out.write_text(f"train/{hour}/donefile", "")
    held, probs = sampler.sample(heldout, rng) if heldout else ([], np.zeros(0))
    if heldout:
        out.write_text("heldout/part-00000", "".join(line + "\n" for line in held))
    return Generated(slots, train, held, probs, form or LineFormat())


def generate(
    out_uri: str, slot_count: int, vocab: int, start: str, hours: int, examples_per_hour: int,
    files_per_hour: int, heldout: int, seed: int, missing_hours: list[str] | None = None,
    first_slot: int = 101,
) -> SyntheticModel:  # fmt: skip
    """The simple profile; the model itself goes to truth.json."""
    return generate_simple(
        out_uri, slot_count, vocab, start, hours, examples_per_hour, files_per_hour, heldout,
        seed, missing_hours, first_slot,
    )[0]  # fmt: skip


def generate_simple(
    out_uri: str, slot_count: int, vocab: int, start: str, hours: int, examples_per_hour: int,
    files_per_hour: int, heldout: int, seed: int, missing_hours: list[str] | None = None,
    first_slot: int = 101,
) -> tuple[SyntheticModel, Generated]:  # fmt: skip
    model = SyntheticModel.create(slot_count, vocab, seed, first_slot=first_slot)
    out = open_store(out_uri)
    out.write_text("truth.json", model.to_json())
    data = write_data(
        out, model.slots, model, np.random.default_rng(seed + 1), start, hours,
        examples_per_hour, files_per_hour, heldout, missing_hours,
    )  # fmt: skip
    return model, data


def write_profile(
    out_uri: str, model: SynthModel, start: str, hours: int, examples_per_hour: int,
    files_per_hour: int, heldout: int, seed: int,
) -> Generated:  # fmt: skip
    """Data of a synth.py model; the held-out set's true probabilities go to
    `truth/heldout-probs.txt`, beside (not in) the held-out directory."""
    out = open_store(out_uri)
    data = write_data(
        out, model.slot_ids, model, np.random.default_rng(seed + 1), start, hours,
        examples_per_hour, files_per_hour, heldout, form=model.format,
    )  # fmt: skip
    out.write_text("truth/heldout-probs.txt", "".join(f"{p:.9g}\n" for p in data.heldout_probs))
    return data


def generate_profile(
    out_uri: str, profile: Profile, start: str, hours: int, examples_per_hour: int,
    files_per_hour: int, heldout: int, seed: int, first_slot: int = 101,
) -> tuple[SynthModel, Generated]:  # fmt: skip
    model = SynthModel.create(profile, seed, first_slot)
    data = write_profile(
        out_uri, model, start, hours, examples_per_hour, files_per_hour, heldout, seed
    )
    return model, data


def generate_realistic(
    out_uri: str, start: str, hours: int, examples_per_hour: int, files_per_hour: int,
    heldout: int, seed: int, first_slot: int = 101, max_vocab: int = realistic.MAX_VOCAB,
) -> tuple[RealisticModel, Generated]:  # fmt: skip
    """The realistic profile (realistic.py)."""
    model = RealisticModel.create_realistic(seed, first_slot, max_vocab)
    data = write_profile(
        out_uri, model, start, hours, examples_per_hour, files_per_hour, heldout, seed
    )
    return model, data


# Per profile: first hour, hours, held-out examples (the realistic hours cross midnight).
PROFILE_DEFAULTS: dict[str, tuple[str, int, int]] = {
    "simple": ("20191221/00", 2, 5000),
    "realistic": ("20191221/20", 8, 60000),
    "criteo": ("20191221/00", 8, 40000),
}


def baseline_aucs(
    data: Generated, sparse_dim: int, crosses: list[tuple[int, int]]
) -> dict[str, float]:
    """Held-out AUC of the logistic regressions on the hashed ids and the dense values,
    without and with the crossed pairs (baselines.py)."""
    from .baselines import logistic_baseline, parse

    train, heldout = parse(data.train, data.format), parse(data.heldout, data.format)
    plain = logistic_baseline(train, heldout, sparse_dim)
    crossed = logistic_baseline(train, heldout, sparse_dim, crosses)
    return {"lr_auc": plain["auc"], "lr_crosses_auc": crossed["auc"]}


def run_generate(args: Any) -> dict[str, Any]:
    """`generate` of the command line: writes the data, prints (and returns) a summary
    with the held-out Bayes AUC and, with --baselines, the logistic regressions'."""
    default_start, default_hours, default_heldout = PROFILE_DEFAULTS[args.profile]
    start: str = args.start or default_start
    hours: int = args.hours if args.hours is not None else default_hours
    heldout: int = args.heldout if args.heldout is not None else default_heldout
    crosses: list[tuple[int, int]] = []
    model: SynthModel
    if args.profile == "realistic":
        model, data = generate_realistic(
            args.out, start, hours, args.examples_per_hour, args.files_per_hour, heldout,
            args.seed, args.first_slot, args.max_vocab,
        )  # fmt: skip
        crosses = model.crosses
    elif args.profile == "criteo":
        model, data = generate_profile(
            args.out, synth.criteo(), start, hours, args.examples_per_hour,
            args.files_per_hour, heldout, args.seed, first_slot=1,
        )  # fmt: skip
        crosses = model.crosses
    else:
        _, data = generate_simple(
            args.out, args.slots, args.vocab, start, hours, args.examples_per_hour,
            args.files_per_hour, heldout, args.seed, args.missing_hour, args.first_slot,
        )  # fmt: skip
    summary: dict[str, Any] = {
        "out": args.out, "profile": args.profile, "slots": data.slots,
        "format": data.format.name,
        "dense_features": [{"name": d.name, "dim": d.dim} for d in data.format.dense],
    }  # fmt: skip
    if heldout:
        summary["heldout_bayes_auc"] = data.bayes_auc
        if args.baselines:
            summary.update(baseline_aucs(data, args.sparse_dim, crosses))
    print(json.dumps(summary), flush=True)
    return summary
