"""slot.conf: one integer slot id per line, unique, non-empty; line order = model input order."""

from __future__ import annotations

from pathlib import Path


class SlotConfError(ValueError):
    """slot.conf is not a list of unique integer slot ids; the message names file and line."""


def parse_slot_conf(text: str, source: str = "slot.conf") -> list[int]:
    """Parse slot.conf text. Blank lines and `#` comments are ignored."""
    slots: list[int] = []
    seen: dict[int, int] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            slot = int(line)
        except ValueError:
            problems.append(f"{source}:{number}: slot id must be an integer, got {line!r}")
            continue
        if slot < 0:
            problems.append(f"{source}:{number}: slot id must be >= 0, got {slot}")
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
    return parse_slot_conf(Path(path).read_text(encoding="utf-8"), source=str(path))
