"""Coordination between trainers through the shared storage (no extra service or port).

Fleet's own barriers need Gloo, which the cluster does not set up (without it
`fleet.barrier_worker()` and the barriers inside `init_worker` and `fleet.save_*` return at
once), so each trainer writes small JSON markers under `<checkpoint_uri>/sync/` and the
others poll for them.

**Joining.** A job attempt starts with a handshake that also orders the parameter
initialisation. Each trainer i > 0 writes `join/trainer-<i>.json` with a random nonce and
waits. Trainer 0 first initialises the pservers' dense parameters (`fleet.init_worker()`:
its own initial values, or the restored checkpoint), then picks a random attempt id and
answers in `join/welcome.json` with the attempt id and every nonce it has read, rewriting
it while nonces change, until every trainer has acknowledged this attempt
(`join/ack-<i>.json`) after pulling the dense parameters (`init_worker`). A trainer takes
the attempt id from a welcome that carries its own nonce, so neither a welcome nor a nonce
left by an earlier attempt of the job can be mistaken for this one, whatever the clocks
say; no trainer pulls the dense parameters before trainer 0 has written them, and trainer
0 does not train (and change them) before every trainer has pulled them.

**Passes.** Every later marker carries the attempt id; a reader ignores markers of other
attempts. Each trainer writes `pass-<N>/trainer-<i>.json` after its pass (and after its
client has flushed its pushes), trainer 0 `pass-<N>/result.json`; after a failed result
the others acknowledge it (`pass-<N>/ack-<i>.json`) once they have logged it, so the job
is not torn down before every trainer has said why.

**The offline plan.** Trainer 0 alone waits for the data, before it initialises the dense
parameters (a new model's output bias starts from that data: prior.py), so the others wait
that much longer for its welcome; after the join it writes the hours to train in
`plan.json` and the others read it, so a donefile that appears meanwhile cannot make two
trainers train different hours.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from elasticctr_common.storage import Store

WELCOME = "join/welcome.json"
PLAN = "plan.json"


class SyncTimeout(TimeoutError):
    """A peer did not report in time; the message names what was awaited."""


class PassSync:
    def __init__(
        self,
        store: Store,
        timeout: float,
        poll_seconds: float = 0.5,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        self.timeout = timeout
        self.poll_seconds = poll_seconds
        self.clock = clock
        self.sleep = sleep
        self.attempt: str | None = None
        self.model: dict[str, Any] = {}  # what trainer 0's welcome said of the model

    def _write(self, path: str, payload: dict[str, Any]) -> None:
        record = {**payload, "attempt": self.attempt, "written_at": self.clock()}
        self.store.write_text(path, json.dumps(record))

    def _read(self, path: str) -> dict[str, Any] | None:
        if not self.store.exists(path):
            return None
        try:
            payload = json.loads(self.store.read_text(path))
        except (FileNotFoundError, ValueError):  # deleted or replaced while we looked
            return None
        return payload if isinstance(payload, dict) else None

    def _read_ours(self, path: str) -> dict[str, Any] | None:
        payload = self._read(path)
        if payload is None or self.attempt is None or payload.get("attempt") != self.attempt:
            return None
        return payload

    def _wait(self, paths: list[str], what: str) -> list[dict[str, Any]]:
        deadline = self.clock() + self.timeout
        found: dict[str, dict[str, Any]] = {}
        while True:
            for path in paths:
                if path not in found and (payload := self._read_ours(path)) is not None:
                    found[path] = payload
            if len(found) == len(paths):
                return [found[p] for p in paths]
            if self.clock() > deadline:
                missing = [self.store.uri(p) for p in paths if p not in found]
                raise SyncTimeout(f"{what}: nothing after {self.timeout:.0f}s from {missing}")
            self.sleep(self.poll_seconds)

    # joining ------------------------------------------------------------------------

    def join(self, trainer: int, extra_seconds: float = 0.0) -> str:
        """Trainer i > 0: wait for trainer 0's welcome to this very process, `extra_seconds`
        longer than for a peer (trainer 0 may wait for data first); the attempt id. Then
        `joined` once the dense parameters are pulled."""
        nonce = uuid.uuid4().hex
        self.store.write_text(f"join/trainer-{trainer}.json", json.dumps({"nonce": nonce}))
        timeout = self.timeout + extra_seconds
        deadline = self.clock() + timeout
        while True:
            welcome = self._read(WELCOME)
            if welcome and welcome.get("nonces", {}).get(str(trainer)) == nonce:
                self.attempt = str(welcome["attempt"])
                self.model = dict(welcome.get("model") or {})
                return self.attempt
            if self.clock() > deadline:
                raise SyncTimeout(
                    f"joining: no welcome from trainer 0 after {timeout:.0f}s in "
                    f"{self.store.uri(WELCOME)}"
                )
            self.sleep(self.poll_seconds)

    def joined(self, trainer: int) -> None:
        """Trainer i > 0 holds trainer 0's dense parameters: trainer 0 may start training."""
        self._write(f"join/ack-{trainer}.json", {})

    def welcome(self, trainers: int, model: dict[str, Any] | None = None) -> str:
        """Trainer 0, once the pservers hold its dense parameters: admit every other trainer
        of this attempt, telling each what trainer 0 decided of the `model` (a new model's
        crosses), and wait until each has pulled them (`joined`); the attempt id."""
        self.attempt = uuid.uuid4().hex
        others = range(1, trainers)
        deadline = self.clock() + self.timeout
        answered: dict[str, str] | None = None
        while True:
            nonces = {}
            for i in others:
                joined = self._read(f"join/trainer-{i}.json")
                if joined and "nonce" in joined:
                    nonces[str(i)] = str(joined["nonce"])
            if nonces != answered:
                welcome = {"attempt": self.attempt, "nonces": nonces, "model": model or {}}
                self.store.write_text(WELCOME, json.dumps(welcome))
                answered = nonces
            missing = [i for i in others if self._read_ours(f"join/ack-{i}.json") is None]
            if not missing:
                return self.attempt
            if self.clock() > deadline:
                raise SyncTimeout(
                    f"joining: trainers {missing} did not join after {self.timeout:.0f}s "
                    f"(their markers: {self.store.uri('join')})"
                )
            self.sleep(self.poll_seconds)

    # the offline plan ---------------------------------------------------------------

    def publish_plan(self, payload: dict[str, Any]) -> None:
        """Trainer 0: the hours every trainer trains (decided once, after waiting for data,
        before the join)."""
        self._write(PLAN, payload)

    def wait_plan(self) -> dict[str, Any]:
        """Trainers i > 0: trainer 0's plan."""
        return self._wait([PLAN], "the offline plan from trainer 0")[0]

    # passes -------------------------------------------------------------------------

    def trainer_done(self, pass_id: int, trainer: int, payload: dict[str, Any]) -> None:
        self._write(f"pass-{pass_id}/trainer-{trainer}.json", payload)

    def wait_trainers(self, pass_id: int, trainers: int) -> list[dict[str, Any]]:
        paths = [f"pass-{pass_id}/trainer-{i}.json" for i in range(trainers)]
        return self._wait(paths, f"pass {pass_id}: trainers' reports")

    def publish_result(self, pass_id: int, payload: dict[str, Any]) -> None:
        self._write(f"pass-{pass_id}/result.json", payload)

    def wait_result(self, pass_id: int) -> dict[str, Any]:
        return self._wait([f"pass-{pass_id}/result.json"], f"pass {pass_id}: trainer 0's result")[0]

    def acknowledge(self, pass_id: int, trainer: int) -> None:
        self._write(f"pass-{pass_id}/ack-{trainer}.json", {})

    def wait_acknowledged(self, pass_id: int, trainers: int, timeout: float) -> list[int]:
        """Trainer 0 after a failed result: wait up to `timeout` for the others to have
        logged it; the trainers that did not."""
        deadline = self.clock() + timeout
        missing = list(range(1, trainers))
        while missing:
            missing = [i for i in missing if not self._read_ours(f"pass-{pass_id}/ack-{i}.json")]
            if not missing or self.clock() > deadline:
                break
            self.sleep(self.poll_seconds)
        return missing

    def forget(self, pass_id: int) -> None:
        """Drop the markers of a pass every trainer is past."""
        self.store.delete(f"pass-{pass_id}")

    def trainer_finished(self, trainer: int) -> None:
        self._write(f"finished/trainer-{trainer}.json", {})

    def wait_finished(self, trainers: list[int]) -> None:
        paths = [f"finished/trainer-{i}.json" for i in trainers]
        self._wait(paths, "trainers finishing")
