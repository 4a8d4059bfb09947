"""ElasticCTR example lines, `<show> <click> <feasign>:<slot> ...` (docs/architecture.md):
one reading for every reader of them, the trainer and the client's `predict`.

A line is ASCII, its fields separated by spaces or tabs, with or without its line end
(`\\n`, or `\\r\\n`). Numbers are ASCII decimal digits with an optional `-`: Python's
`int()` alone would also take `+`, underscores and other Unicode digits (`'١٢'`), fail on
`'²'`, and refuse numbers of more than 4300 digits; here a number longer than any uint64 is
read as out of range without converting it. A line that is not an example raises `BadLine`
with a short, countable reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_FEASIGN = 2**64 - 1
# show and click reach Paddle as float32: above 2**24 they are no longer exact integers.
MAX_SHOW = 2**24
_BEYOND = 10**20  # > MAX_FEASIGN: what a number of more than 20 digits is read as
# ASCII control characters other than tab (a lone CR, vertical tab, form feed, NUL, DEL...).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class BadLine(ValueError):
    """A line that is not an ElasticCTR example; `reason` is a short, countable category."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def parse_int(text: str) -> int:
    """The integer `text` spells in ASCII decimal digits (an optional `-`); ValueError if
    it is not one."""
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"not a decimal integer: {text[:40]!r}")
    significant = digits.lstrip("0") or "0"
    value = int(significant) if len(significant) <= 20 else _BEYOND
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
    if line.endswith("\n"):
        line = line[:-2] if line.endswith("\r\n") else line[:-1]
    if not line.isascii():
        raise BadLine("non-ASCII character", line[:80])
    if _CONTROL.search(line):
        raise BadLine("control character", repr(line[:80]))
    fields = line.split()
    if len(fields) < 2:
        raise BadLine("missing show/click", line[:80])
    try:
        show, click = parse_int(fields[0]), parse_int(fields[1])
    except ValueError:
        raise BadLine("non-integer show/click", " ".join(fields[:2])[:80]) from None
    if show == 0:
        # The CTR accessor divides each update by the key's show count: a key seen only in
        # such lines is driven to the sparse rule's bound.
        raise BadLine("zero show", " ".join(fields[:2]))
    if show < 0 or click < 0 or click > show or show > MAX_SHOW:
        raise BadLine("show/click out of range", f"show={show} click={click}")
    if len(fields) == 2:
        raise BadLine("no feasigns")
    features = []
    for token in fields[2:]:
        feasign_text, sep, slot_text = token.partition(":")
        if not sep:
            raise BadLine("feasign without slot", token[:80])
        if feasign_text.isdigit() and slot_text.isdigit() and len(feasign_text) <= 20:
            feasign, slot = int(feasign_text), int(slot_text)  # the common case, inline
        else:
            try:
                feasign, slot = parse_int(feasign_text), parse_int(slot_text)
            except ValueError:
                raise BadLine("non-integer feasign or slot", token[:80]) from None
        if not 0 <= feasign <= MAX_FEASIGN:
            raise BadLine("feasign out of uint64 range", token[:80])
        features.append((feasign, slot))
    return Line(show, click, features)
