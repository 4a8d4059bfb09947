"""What users saw lately: prediction requests of the last minute with their failures by
cause (`/status`'s `requests`), and a log line per cause of 5xx answers, at most one per
cause per period (docs/serving.md, "What users see").

A cause is a short name of why serving answered 5xx (`Failure`); the HTTP layer records
every prediction request's outcome here once (app.py), on the event loop.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

WINDOW_SECONDS = 60
LOG_PERIOD_SECONDS = 30.0

# Why a prediction request was answered 5xx.
NO_MODEL = "no_model"  # no model version loaded yet
CUBE_VERSION = "cube_version"  # cube does not hold the served version
CUBE_UNAVAILABLE = "cube_unavailable"  # a cube lookup failed (a shard did not answer)
CUBE_WIDTH = "cube_width"  # cube's vectors are not the dense model's width
INTERNAL = "internal"  # a bug: serving's own error


@dataclass(frozen=True)
class Failure:
    """Why a request was answered 5xx: its cause and the message it was answered with."""

    cause: str
    message: str


@dataclass
class _Second:
    at: int
    requests: int = 0
    client_errors: int = 0
    failures: Counter[str] = field(default_factory=Counter)


class RecentRequests:
    """Prediction requests of the last `seconds`, counted per second: how many, how many
    were refused as bad input (4xx), how many failed (5xx) by cause; and the last failure."""

    def __init__(
        self, seconds: int = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds, self.clock = seconds, clock
        self._seconds: deque[_Second] = deque()
        self.last_failure: dict[str, Any] | None = None

    def record(self, status: int, failure: Failure | None = None) -> None:
        now = self.clock()
        second = self._current(int(now))
        second.requests += 1
        if status >= 500:
            cause = failure.cause if failure else INTERNAL
            second.failures[cause] += 1
            self.last_failure = {
                "status": status,
                "cause": cause,
                "message": failure.message if failure else "",
                "at": time.time(),
                "_monotonic": now,
            }
        elif status >= 400:
            second.client_errors += 1

    def _current(self, at: int) -> _Second:
        self._expire(at)
        if not self._seconds or self._seconds[-1].at != at:
            self._seconds.append(_Second(at))
        return self._seconds[-1]

    def _expire(self, at: int) -> None:
        while self._seconds and self._seconds[0].at <= at - self.seconds:
            self._seconds.popleft()

    def snapshot(self) -> dict[str, Any]:
        """`/status`'s `requests`: the window's counts, and the last failure (ever) with
        how long ago it was."""
        now = self.clock()
        self._expire(int(now))
        causes: Counter[str] = Counter()
        for second in self._seconds:
            causes.update(second.failures)
        last = None
        if self.last_failure is not None:
            last = {k: v for k, v in self.last_failure.items() if not k.startswith("_")}
            last["seconds_ago"] = round(now - self.last_failure["_monotonic"], 1)
        return {
            "window_seconds": self.seconds,
            "requests": sum(s.requests for s in self._seconds),
            "client_errors": sum(s.client_errors for s in self._seconds),
            "failed": sum(causes.values()),
            "failure_causes": dict(causes.most_common()),
            "last_failure": last,
        }


class FailureLog:
    """Logs a 5xx answer with its cause, at most once per cause per `period` seconds: under
    an outage every request fails alike, and one line says it. The answers of a cause not
    logged meanwhile are counted, and its next line says how many."""

    def __init__(
        self,
        logger: logging.Logger,
        period: float = LOG_PERIOD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger, self.period, self.clock = logger, period, clock
        self._logged: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def failed(self, status: int, what: str, failure: Failure) -> None:
        now, cause = self.clock(), failure.cause
        last = self._logged.get(cause)
        if last is not None and now - last < self.period:
            self._unlogged[cause] += 1
            return
        self._logged[cause] = now
        unlogged = self._unlogged.pop(cause, 0)
        self.logger.warning(
            "answered %d to %s: %s: %s%s",
            status,
            what,
            cause,
            failure.message,
            f" ({unlogged} more {cause} answers in the last {now - last:.0f} s not logged)"
            if unlogged and last is not None
            else "",
        )
