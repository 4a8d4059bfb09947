"""slot.conf: one integer slot id per line, unique, non-empty; line order = model input order."""

from __future__ import annotations

from pathlib import Path

from .lines import parse_int


class SlotConfError(ValueError):
    """slot.conf is not a list of unique integer slot ids; the message names file and line."""


# The names the stack's slot_conf may have (infra/load_config.py); upload's hint keeps to them.
SLOT_CONF_SUFFIXES = (".txt", ".conf")
# Slot ids are uint64, as the data lines' `<feasign>:<slot>` (lines.py) and the native pipe
# read them.
MAX_SLOT = 2**64 - 1


def parse_slot_conf(text: str, source: str = "slot.conf") -> list[int]:
    """Parse slot.conf text. Blank lines and `#` comments are ignored. A slot id is ASCII
    decimal digits: Python's int() would also take "+1", "1_0" (10) and other scripts'
    digits, which no data line spells."""
    slots: list[int] = []
    seen: dict[int, int] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            slot = parse_int(line)
        except ValueError:
            slot = -1
        if not 0 <= slot <= MAX_SLOT:
            shown = repr(line) if len(line) <= 40 else f"{line[:30]!r}... ({len(line)} characters)"
            problems.append(
                f"{source}:{number}: slot id must be an integer from 0 to {MAX_SLOT}, got {shown}"
            )
        elif slot in seen:
            problems.append(f"{source}:{number}: slot id {slot} repeats line {seen[slot]}")
        else:
            seen[slot] = number
            slots.append(slot)
    if not slots and not problems:
        problems.append(f"{source}: no slot ids (one integer per line expected)")
    if problems:
        raise SlotConfError("\n".join(problems))
    return slots


def read_slot_conf(path: str | Path) -> list[int]:
    # A BOM from a Windows editor is fine here as in the stack's slot_conf
    # (infra/load_config.py): the same file passes or fails on both sides.
    return parse_slot_conf(Path(path).read_text(encoding="utf-8-sig"), source=str(path))
