"""Where a local training job's CPU goes during its pass: the trainer, the pserver and the
dataset's pipe processes, sampled from /proc while the job runs.

The pass is the window between trainer 0's `pass_start` event and its pass metrics in
its log: the trainer's and pserver's CPU seconds are counted from the first tick after
the one to the first tick after the other, the pipes' whole (they run only in the pass,
though not all of it: the dataset reads ahead of training).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def _role(pid: int) -> str | None:
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if b"elasticctr_trainer.pipe" in cmdline or cmdline[0].endswith(b"/elasticctr-pipe"):
        return "pipe"  # the Python pipe, or the native one
    if b"run" not in cmdline:
        return None
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return "pserver" if b"TRAINING_ROLE=PSERVER" in environ else "trainer"


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class JobCpu:
    """Samples the processes under `root` every `interval` seconds until stopped."""

    def __init__(self, root: int, trainer_log: Path, interval: float = 0.2) -> None:
        self.root, self.log, self.interval = root, trainer_log, interval
        self.pipes: dict[int, float] = {}  # pid -> last CPU seconds seen
        self.at_start: dict[str, float] = {}  # trainer/pserver CPU when the pass started
        self.at_end: dict[str, float] = {}  # ... when it ended
        self.window = [0.0, 0.0]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            now, servers = time.monotonic(), {}
            for pid in _descendants(self.root):
                try:
                    role, cpu = _role(pid), _cpu_seconds(pid)
                except (OSError, IndexError, ValueError):
                    continue  # gone meanwhile
                if role == "pipe":
                    self.pipes[pid] = cpu
                elif role:
                    servers[role] = cpu
            text = self.log.read_text(errors="replace") if self.log.exists() else ""
            if not self.at_start and '"event": "pass_start"' in text:
                self.at_start, self.window[0] = servers, now
            if not self.at_end and '"event": "metrics"' in text:
                self.at_end, self.window[1] = servers, now

    def stop(self) -> dict[str, float]:
        """CPU seconds per role in the pass, and its wall seconds (sampled)."""
        self._stop.set()
        self._thread.join()
        split = {r: self.at_end.get(r, 0.0) - self.at_start.get(r, 0.0) for r in self.at_end}
        return {**split, "pipe": sum(self.pipes.values()), "wall": self.window[1] - self.window[0]}
