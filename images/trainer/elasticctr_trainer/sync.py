"""Coordination between trainers through the shared storage (no extra service or port).

Fleet's own barriers need Gloo, which the cluster does not set up, so each trainer writes
a small JSON marker under `<checkpoint_uri>/sync/` and the others poll for it. Markers
carry the writer's wall-clock time; a reader ignores markers written before it started
(less a small clock-skew margin), so markers left by an earlier attempt of the job never
count.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from elasticctr_common.storage import Store

CLOCK_SKEW_SECONDS = 2.0


class SyncTimeout(TimeoutError):
    """A peer did not report in time; the message names what was awaited."""


class PassSync:
    def __init__(
        self,
        store: Store,
        started_at: float,
        timeout: float,
        poll_seconds: float = 0.5,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.not_before = started_at - CLOCK_SKEW_SECONDS
        self.timeout = timeout
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.sleep = sleep

    def _write(self, path: str, payload: dict[str, Any]) -> None:
        self.store.write_text(path, json.dumps({**payload, "written_at": self.clock()}))

    def _read_fresh(self, path: str) -> dict[str, Any] | None:
        if not self.store.exists(path):
            return None
        try:
            payload = json.loads(self.store.read_text(path))
        except (FileNotFoundError, ValueError):
            return None
        return payload if payload.get("written_at", 0) >= self.not_before else None

    def _wait(self, paths: list[str], what: str) -> list[dict[str, Any]]:
        deadline = self.clock() + self.timeout
        found: dict[str, dict[str, Any]] = {}
        while True:
            for path in paths:
                if path not in found and (payload := self._read_fresh(path)) is not None:
                    found[path] = payload
            if len(found) == len(paths):
                return [found[p] for p in paths]
            if self.clock() > deadline:
                missing = [self.store.uri(p) for p in paths if p not in found]
                raise SyncTimeout(f"{what}: nothing after {self.timeout:.0f}s from {missing}")
            self.sleep(self.poll_seconds)

    def trainer_done(self, pass_id: int, trainer: int, payload: dict[str, Any]) -> None:
        self._write(f"pass-{pass_id}/trainer-{trainer}.json", payload)

    def wait_trainers(self, pass_id: int, trainers: int) -> list[dict[str, Any]]:
        paths = [f"pass-{pass_id}/trainer-{i}.json" for i in range(trainers)]
        return self._wait(paths, f"pass {pass_id}: trainers' reports")

    def publish_result(self, pass_id: int, payload: dict[str, Any]) -> None:
        self._write(f"pass-{pass_id}/result.json", payload)

    def wait_result(self, pass_id: int) -> dict[str, Any]:
        return self._wait([f"pass-{pass_id}/result.json"], f"pass {pass_id}: trainer 0's result")[0]

    def forget(self, pass_id: int) -> None:
        """Drop the markers of a pass every trainer is past."""
        self.store.delete(f"pass-{pass_id}")

    def trainer_finished(self, trainer: int) -> None:
        self._write(f"finished/trainer-{trainer}.json", {})

    def wait_finished(self, trainers: list[int]) -> None:
        paths = [f"finished/trainer-{i}.json" for i in trainers]
        self._wait(paths, "trainers finishing")
