"""ElasticCTR example lines, `<show> <click> <feasign>:<slot> ...` (docs/architecture.md):
one reading for every reader of them, the trainer and the client's `predict`.

Numbers are ASCII decimal digits with an optional sign. Python's `int()` alone would
also take other Unicode digits (`'١٢'`) and underscores, fail on `'²'` (a digit that is
not decimal), and refuse numbers of more than 4300 digits; here a number is read only
when it has the form, and a longer number than any uint64 is read as out of range
without converting it. A line that is not an example raises `BadLine` with a short,
countable reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_FEASIGN = 2**64 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_BEYOND = 10**20  # > MAX_FEASIGN: what a number of more than 20 digits is read as


class BadLine(ValueError):
    """A line that is not an ElasticCTR example; `reason` is a short, countable category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse_int(text: str) -> int:
    """The integer `text` spells in ASCII decimal digits; ValueError if it is not one."""
    if not _INTEGER.match(text):
        raise ValueError(f"not a decimal integer: {text[:40]!r}")
    digits = text.lstrip("+-").lstrip("0") or "0"
    value = int(digits) if len(digits) <= 20 else _BEYOND
    return -value if text.startswith("-") else value


@dataclass(frozen=True)
class Line:
    show: int
    click: int
    features: list[tuple[int, int]]  # (feasign, slot) in line order

    @property
    def label(self) -> int:
        return 1 if self.click > 0 else 0


def split_line(line: str) -> Line:
    """show, click and the (feasign, slot) pairs of one line; BadLine if it is not one."""
    fields = line.split()
    if len(fields) < 2:
        raise BadLine("missing show/click", line[:80])
    try:
        show, click = parse_int(fields[0]), parse_int(fields[1])
    except ValueError:
        raise BadLine("non-integer show/click", " ".join(fields[:2])[:80]) from None
    if show < 0 or click < 0 or click > show:
        raise BadLine("show/click out of range", f"show={show} click={click}")
    if len(fields) == 2:
        raise BadLine("no feasigns")
    features = []
    for token in fields[2:]:
        feasign_text, sep, slot_text = token.partition(":")
        if not sep:
            raise BadLine("feasign without slot", token[:80])
        try:
            feasign, slot = parse_int(feasign_text), parse_int(slot_text)
        except ValueError:
            raise BadLine("non-integer feasign or slot", token[:80]) from None
        if not 0 <= feasign <= MAX_FEASIGN:
            raise BadLine("feasign out of uint64 range", token[:80])
        features.append((feasign, slot))
    return Line(show, click, features)
