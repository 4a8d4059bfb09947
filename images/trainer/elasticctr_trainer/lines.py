"""Example lines (docs/architecture.md): ElasticCTR's `<show> <click> <feasign>:<slot> ...`
or PaddleRec's slot format with dense features (elasticctr_common.lines reads both).

A feasign becomes the sparse key `feasign % sparse_dim`; a slot with no feasign in an
example gets the padding key 0. Each configured cross of two slots is one more input after
the slots, its keys formed from theirs (elasticctr_common.crosses). Malformed lines raise
`BadLine` with a short reason that the per-file report counts.

A data file's lines (text, or compressed text) come from `elasticctr_common.datafiles`,
which raises `BadFile` for a file that is not lines of text: a bad file, not a file with
some bad lines.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass

from elasticctr_common.crosses import cross_indices, crossed_keys, pair_seed
from elasticctr_common.datafiles import data_lines
from elasticctr_common.lines import MAX_FEASIGN, MAX_SHOW, BadLine, LineFormat
from elasticctr_common.storage import Store

__all__ = [
    "MAX_FEASIGN",
    "MAX_SHOW",
    "PADDING_KEY",
    "BadLine",
    "Example",
    "LineParser",
    "file_examples",
    "is_blank",
    "multislot_line",
]
PADDING_KEY = 0


@dataclass(frozen=True)
class Example:
    show: int
    click: int
    # per slot, in slot.conf order, then per cross; [PADDING_KEY] for an empty one
    keys: list[list[int]]
    dense: tuple[str, ...] = ()  # the dense features' values as written, in format order

    @property
    def label(self) -> int:
        return 1 if self.click > 0 else 0


def is_blank(line: str) -> bool:
    return not line.strip(" \t")


class LineParser:
    """Parses lines of one format for one slot.conf, sparse_dim and crosses (pairs of
    slot.conf's slots)."""

    def __init__(
        self,
        slots: list[int],
        sparse_dim: int,
        form: LineFormat | None = None,
        crosses: list[list[int]] | None = None,
    ) -> None:
        if sparse_dim < 2:
            raise ValueError(f"sparse_dim must be >= 2 (key 0 is padding), got {sparse_dim}")
        self.slots = slots
        self.sparse_dim = sparse_dim
        self.slot_index = {slot: i for i, slot in enumerate(slots)}
        self.form = form or LineFormat()
        self.dense_dims = [feature.dim for feature in self.form.dense]
        crosses = crosses or []
        # (first slot's index, second's, the pair's seed) of each cross
        self.crosses = [
            (i, j, pair_seed(a, b))
            for (i, j), (a, b) in zip(cross_indices(crosses, slots), crosses, strict=True)
        ]

    def parse(self, line: str) -> Example:
        """The example of one line (the shared reading, elasticctr_common.lines)."""
        parsed = self.form.split(line)
        keys: list[list[int]] = [[] for _ in self.slots]
        feasigns: list[list[int]] = [[] for _ in self.slots] if self.crosses else []
        for feasign, slot in parsed.features:
            index = self.slot_index.get(slot)
            if index is None:  # named as the line's format writes it
                named = (
                    f"{slot}:{feasign}" if self.form.name == "paddlerec" else f"{feasign}:{slot}"
                )
                raise BadLine("unknown slot", named)
            keys[index].append(feasign % self.sparse_dim)
            if feasigns:
                feasigns[index].append(feasign)
        for i, j, seed in self.crosses:
            keys.append(crossed_keys(seed, feasigns[i], feasigns[j], self.sparse_dim))
        return Example(parsed.show, parsed.click, [k or [PADDING_KEY] for k in keys], parsed.dense)

    def multislot(self, example: Example) -> str:
        return multislot_line(example, self.dense_dims)


def file_examples(data: Store, name: str, parser: LineParser) -> Iterator[Example]:
    """The examples of one data file's valid lines, in order; blank and bad lines are
    skipped (the training pipe counts them, these readers need only the examples).
    BadFile when the file is not lines of text."""
    for _, line in data_lines(io.BytesIO(data.read_bytes(name))):
        if is_blank(line):
            continue
        try:
            yield parser.parse(line)
        except BadLine:
            continue


def multislot_line(example: Example, dense_dims: list[int] | None = None) -> str:
    """The example in Paddle's MultiSlot text format, vars in the order of `model.feed_order`:
    label, show, click, one variable-length id list per slot, then each dense feature's
    `dim` values (as written: Paddle reads them with strtof)."""
    parts = [f"1 {example.label} 1 {example.show} 1 {example.click}"]
    for keys in example.keys:
        parts.append(f"{len(keys)} {' '.join(map(str, keys))}")
    start = 0
    for dim in dense_dims or []:
        parts.append(f"{dim} {' '.join(example.dense[start : start + dim])}")
        start += dim
    return " ".join(parts)
