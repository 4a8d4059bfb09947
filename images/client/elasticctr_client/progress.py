"""A one-line progress bar on stderr (a terminal), or a line every 10% (a log file)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    WIDTH = 30

    def __init__(
        self, total: int | None, unit: str, enabled: bool = True, stream: TextIO | None = None
    ) -> None:
        self.total, self.unit, self.done = total, unit, 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.enabled and self.stream.isatty()
        self.started = time.monotonic()
        self._last_decile = -1

    def update(self, count: int) -> None:
        self.done += count
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\r" + self._line())
            self.stream.flush()
        elif self.total:
            decile = 10 * self.done // self.total
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(self._line() + "\n")

    def _line(self) -> str:
        seconds = max(time.monotonic() - self.started, 1e-9)
        rate = f"{self.done / seconds:,.0f} {self.unit}/s"
        if not self.total:
            return f"{self.done:,} {self.unit} {rate}"
        filled = min(self.WIDTH, self.WIDTH * self.done // self.total)
        bar = "#" * filled + "." * (self.WIDTH - filled)
        return f"[{bar}] {self.done:,}/{self.total:,} {self.unit} {rate}"

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
