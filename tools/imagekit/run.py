"""Running the build commands: niced (two cores are shared with other builds), output
through to the terminal, failures as exceptions that say which command failed."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


class CommandFailed(RuntimeError):
    pass


def run(
    command: Sequence[str | Path],
    *,
    capture: bool = False,
    nice: bool = False,
) -> str:
    """Run `command`; return its stdout when `capture`, else stream it to stderr."""
    argv = [str(part) for part in command]
    if nice:
        argv = ["nice", "-n", "10", *argv]
    result = subprocess.run(
        argv,
        text=True,
        stdout=subprocess.PIPE if capture else sys.stderr,
        stderr=subprocess.PIPE if capture else None,
        check=False,
    )
    if result.returncode != 0:
        detail = f": {result.stderr.strip()[-2000:]}" if capture and result.stderr else ""
        raise CommandFailed(f"{' '.join(argv)} exited {result.returncode}{detail}")
    return result.stdout if capture else ""


def say(message: str) -> None:
    print(f"[images {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Stopwatch:
    """Seconds since creation, for the per-step timings the tool prints."""

    def __init__(self) -> None:
        self._start = time.monotonic()

    def seconds(self) -> float:
        return time.monotonic() - self._start
