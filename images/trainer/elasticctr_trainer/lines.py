"""ElasticCTR example lines: `<show> <click> <feasign>:<slot> ...` (docs/architecture.md).

A feasign becomes the sparse key `feasign % sparse_dim`; a slot with no feasign in an
example gets the padding key 0. Malformed lines raise `BadLine` with a short reason that
the per-file report counts.
"""

from __future__ import annotations

from dataclasses import dataclass

PADDING_KEY = 0
MAX_FEASIGN = 2**64 - 1


class BadLine(ValueError):
    """A line that is not an ElasticCTR example; `reason` is a short, countable category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Example:
    show: int
    click: int
    keys: list[list[int]]  # per slot, in slot.conf order; [PADDING_KEY] for an empty slot

    @property
    def label(self) -> int:
        return 1 if self.click > 0 else 0


class LineParser:
    """Parses lines for one slot.conf and sparse_dim."""

    def __init__(self, slots: list[int], sparse_dim: int) -> None:
        if sparse_dim < 2:
            raise ValueError(f"sparse_dim must be >= 2 (key 0 is padding), got {sparse_dim}")
        self.slots = slots
        self.sparse_dim = sparse_dim
        self.slot_index = {slot: i for i, slot in enumerate(slots)}

    def parse(self, line: str) -> Example:
        fields = line.split()
        if len(fields) < 2:
            raise BadLine("missing show/click", line[:80])
        try:
            show, click = int(fields[0]), int(fields[1])
        except ValueError:
            raise BadLine("non-integer show/click", " ".join(fields[:2])) from None
        if show < 0 or click < 0 or click > show:
            raise BadLine("show/click out of range", f"show={show} click={click}")
        if len(fields) == 2:
            raise BadLine("no feasigns")
        keys: list[list[int]] = [[] for _ in self.slots]
        for token in fields[2:]:
            feasign_text, sep, slot_text = token.partition(":")
            if not sep:
                raise BadLine("feasign without slot", token)
            try:
                feasign, slot = int(feasign_text), int(slot_text)
            except ValueError:
                raise BadLine("non-integer feasign or slot", token) from None
            if not 0 <= feasign <= MAX_FEASIGN:
                raise BadLine("feasign out of uint64 range", token)
            index = self.slot_index.get(slot)
            if index is None:
                raise BadLine("unknown slot", token)
            keys[index].append(feasign % self.sparse_dim)
        return Example(show, click, [k or [PADDING_KEY] for k in keys])


def multislot_line(example: Example) -> str:
    """The example in Paddle's MultiSlot text format, vars in the order of `model.feed_order`:
    label, show, click, then one variable-length id list per slot."""
    parts = [f"1 {example.label} 1 {example.show} 1 {example.click}"]
    for keys in example.keys:
        parts.append(f"{len(keys)} {' '.join(map(str, keys))}")
    return " ".join(parts)
