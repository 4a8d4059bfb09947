"""The README's walkthroughs as a user copies them: the fenced blocks of a section."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
FENCE = "```"


def section(title: str, readme: Path = README) -> str:
    """The text under the heading `title` (e.g. "## Set up"), up to the next heading of the
    same or a higher level."""
    level = title.split(" ", 1)[0]
    lines = readme.read_text(encoding="utf-8").splitlines()
    start = lines.index(title) + 1
    end = next(
        (
            i
            for i in range(start, len(lines))
            if lines[i].startswith("#")
            and len(lines[i].split(" ", 1)[0]) <= len(level)
            and not _in_fence(lines[:i])
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def code_blocks(title: str, readme: Path = README) -> list[str]:
    """Each fenced block of the section `title`, as the text between its fences."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in section(title, readme).splitlines():
        if line.startswith(FENCE):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _in_fence(lines: list[str]) -> bool:
    return sum(1 for line in lines if line.startswith(FENCE)) % 2 == 1
