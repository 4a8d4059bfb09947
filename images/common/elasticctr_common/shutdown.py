"""SIGTERM for the images' long-running processes.

In a container the entry point is PID 1, and the kernel delivers no signal to PID 1 whose
action is the default: a Python process that installs no handler ignores the SIGTERM of
`kubectl delete pod` or a rolling update, and is killed by SIGKILL when the grace period
ends (30 s later, whatever it was doing). Each long-running process therefore turns
SIGTERM (and SIGINT) into an event its main loop waits on, then stops accepting, lets the
requests in flight finish and exits.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

# How long a stopping process waits for its requests in flight: well inside Kubernetes'
# default grace period of 30 s.
DRAIN_SECONDS = 10.0


class StopSignal:
    """Set once SIGTERM or SIGINT arrives; `wait` sleeps until then (or `seconds`)."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def install(self) -> StopSignal:
        """Handle SIGTERM and SIGINT from now on (call from the main thread)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._received)
        return self

    def _received(self, signum: int, frame: FrameType | None) -> None:
        self._event.set()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float | None = None) -> bool:
        """True once stopping; else False after `seconds`."""
        return self._event.wait(seconds)
