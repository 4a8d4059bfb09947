"""The two-phase, all-or-nothing switch of a cube version over the agent of every replica
of every shard (the participants; one per cube-server).

Phase 1 (prepare): every agent fetches, verifies and loads version V beside the one it
serves. Any failure (fetch, checksum, load, an agent or server that stops answering, a
timeout) aborts: every agent drops V, and the previous version never stopped serving.
Phase 2 (switch): every server switches to V, an instant pointer swap on each. If one
fails to switch, those that did are switched back and V is dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from elasticctr_common.cube.conf import CubeConf

from .httpjson import HttpCallError, call

log = logging.getLogger("cube-transfer")
UNREACHABLE_POLLS = 3  # consecutive failed status polls before an agent counts as lost
# Seconds a reader's look at the servers (`servers`) waits for one agent: the agent asks its
# server within 2 s.
SERVERS_TIMEOUT = 5.0


ROLLOUT = "rollout"  # the key of an error of the rollout as a whole


@dataclass
class Rollout:
    """One attempt to switch every server to `version`; `shards` holds each participant's
    state by its name ("shard 1", or "shard 1 replica 0" with replicas)."""

    version: int
    previous: int | None
    phase: str = "preparing"
    shards: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    drained: float = 0.0  # seconds spent waiting for readers to leave a held version
    drain_warning: str | None = None

    def error_text(self) -> str:
        return "; ".join(f"{name}: {e}" for name, e in sorted(self.errors.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "previous": self.previous,
            "phase": self.phase,
            "shards": dict(sorted(self.shards.items())),
            "errors": dict(sorted(self.errors.items())),
            "seconds": round(time.monotonic() - self.started, 3),
            "drained_seconds": self.drained,
            "drain_warning": self.drain_warning,
        }


class RolloutRunner:
    def __init__(
        self,
        conf: CubeConf,
        *,
        prepare_timeout: float = 600.0,
        rollout_timeout: float = 900.0,
        request_timeout: float = 10.0,
        hold_before_switch: float = 0.0,
        reader_quiet: float = 2.0,
        drain_timeout: float = 60.0,
    ) -> None:
        self.conf = conf
        self.prepare_timeout = prepare_timeout
        # The whole rollout, before its abort (which takes at most one request_timeout):
        # how long it can hold the transfer's lock (no other rollout nor rollback meanwhile).
        self.rollout_timeout = rollout_timeout
        self.request_timeout = request_timeout
        self.hold_before_switch = hold_before_switch
        # A held version read within `reader_quiet` seconds has readers (serving pinned to
        # it): it is not dropped, for at most `drain_timeout` seconds (docs/cube.md).
        self.reader_quiet, self.drain_timeout = reader_quiet, drain_timeout
        replicated = conf.dup > 1
        # Every cube-server by name, with the URL of its agent.
        self.agents: dict[str, str] = {}
        self.shard_of: dict[str, int] = {}  # each cube-server's shard, by name
        for s, r, node in conf.servers():
            name = f"shard {s} replica {r}" if replicated else f"shard {s}"
            self.agents[name], self.shard_of[name] = node.agent_url, s
        self._pool = ThreadPoolExecutor(
            max_workers=min(32, len(self.agents)), thread_name_prefix="agent"
        )
        # Readers' looks (`servers`) do not queue behind a rollout's calls.
        self._look_pool = ThreadPoolExecutor(
            max_workers=min(32, len(self.agents)), thread_name_prefix="look"
        )

    def agent(self, name: str, method: str, path: str, body: Any = None) -> Any:
        url = self.agents[name] + path
        code, answer = call(method, url, body, self.request_timeout)
        if code >= 400:
            raise HttpCallError(f"{url}: HTTP {code}: {(answer or {}).get('error', answer)}")
        return answer

    def each(self, fn: Callable[[str], object]) -> dict[str, Exception | None]:
        """Run fn(name) on every participant in parallel; the exception of each, or None."""

        def guarded(name: str) -> Exception | None:
            try:
                fn(name)
            except Exception as err:  # collected and reported per participant
                return err
            return None

        names = list(self.agents)
        return dict(zip(names, self._pool.map(guarded, names), strict=True))

    def servers(self) -> dict[str, dict[str, Any]]:
        """What every cube-server serves now, by participant name: `ready`, `cur_version`
        and `bg_version` of its status (read through its agent), or the `error` of an agent
        or server that does not answer."""

        def look(name: str) -> dict[str, Any]:
            url = self.agents[name] + "/agent/status"
            try:
                code, answer = call("GET", url, None, SERVERS_TIMEOUT)
            except HttpCallError as err:
                return {"error": f"agent: {err}"}
            server = (answer or {}).get("server") if code < 400 else None
            if not isinstance(server, dict):
                return {"error": f"agent: {url}: HTTP {code}: {answer}"}
            if "error" in server:
                return {"error": f"server: {server['error']}"}
            return {k: server.get(k) for k in ("ready", "cur_version", "bg_version")}

        names = list(self.agents)
        return dict(zip(names, self._look_pool.map(look, names), strict=True))

    def ready_shards(self, versions: set[int]) -> int:
        """Shards with a server that is ready and serves one of `versions` (the committed
        one, and during a rollout the one it switches to), asking every agent."""
        looks = self.servers()
        return len(
            {
                self.shard_of[name]
                for name, look in looks.items()
                if look.get("ready") and look.get("cur_version") in versions
            }
        )

    def run(self, r: Rollout) -> bool:
        """Drain, prepare, hold, switch; True when every server serves r.version."""
        if not self.stage(r):
            return False
        if self.hold_before_switch > 0:
            r.phase = "holding"
            time.sleep(min(self.hold_before_switch, max(0.0, self._left(r))))
        return self.switch(r)

    def stage(self, r: Rollout) -> bool:
        """Drain and prepare: True when every server holds r.version beside the one it
        serves (a canary's state); else r.version is dropped everywhere."""
        self._drain(r)
        if not self._prepare(r):
            self._abort(r)
            return False
        return True

    def switch(self, r: Rollout) -> bool:
        """Switch every server to the staged r.version; on any failure those that switched
        go back and r.version is dropped."""
        if self._left(r) <= 0:
            r.errors[ROLLOUT] = f"rollout not done within --rollout-timeout {self.rollout_timeout}s"
            self._abort(r)
            return False
        r.phase = "switching"
        failures = self.each(
            lambda s: self.agent(s, "POST", "/agent/switch", {"version": r.version})
        )
        for s, err in failures.items():
            r.shards[s] = "switched" if err is None else "switch failed"
            if err is not None:
                r.errors[s] = f"switch failed: {err}"
        if r.errors:
            self._revert(r)
            self._abort(r)
            return False
        r.phase = "committed"
        return True

    def withdraw(self, r: Rollout) -> None:
        """Drop the staged r.version everywhere once no reader has read it for
        reader_quiet seconds (at most drain_timeout): a canary rolled back."""
        r.phase = "draining"
        self._wait_unread(r, lambda: {v: s for v, s in self._busy(None).items() if v == r.version},
                          self.drain_timeout)  # fmt: skip
        self._abort(r)

    def _prepare(self, r: Rollout) -> bool:
        r.phase = "preparing"
        started = self.each(
            lambda s: self.agent(s, "POST", "/agent/prepare", {"version": r.version})
        )
        pending = set()
        for s, err in started.items():
            if err is None:
                pending.add(s)
                r.shards[s] = "preparing"
            else:
                r.shards[s], r.errors[s] = "failed", f"prepare not accepted: {err}"
        misses = dict.fromkeys(pending, 0)
        timeout = min(self.prepare_timeout, self._left(r))
        deadline = time.monotonic() + timeout
        while pending and not r.errors and time.monotonic() < deadline:
            time.sleep(0.05)
            for s in sorted(pending):
                try:
                    status = self.agent(s, "GET", "/agent/status")
                except HttpCallError as err:
                    misses[s] += 1
                    if misses[s] >= UNREACHABLE_POLLS:
                        r.shards[s], r.errors[s] = "failed", f"agent unreachable: {err}"
                        pending.discard(s)
                    continue
                misses[s] = 0
                state = (status.get("prepares") or {}).get(str(r.version)) or {}
                r.shards[s] = state.get("state", "unknown")
                if r.shards[s] == "ready":
                    pending.discard(s)
                elif r.shards[s] in ("failed", "aborted"):
                    r.errors[s] = state.get("error") or r.shards[s]
                    pending.discard(s)
                elif state.get("active") is False:  # a stale state: nobody is preparing it
                    r.errors[s] = f"the agent reports {r.shards[s]} but no longer prepares it"
                    pending.discard(s)
        for s in pending:
            r.errors.setdefault(s, f"not ready after {timeout:.0f}s (state {r.shards[s]})")
        return not r.errors

    def read_versions(self) -> dict[int, float | None]:
        """The held versions that are not current, with the seconds since any server last
        read each (None: never read); a server that does not answer is skipped."""
        idle: dict[int, float | None] = {}
        lock = threading.Lock()

        def look(name: str) -> None:
            server = self.agent(name, "GET", "/agent/status").get("server") or {}
            held = server.get("background")
            if not held or held.get("version") is None:
                return
            version, seconds = int(held["version"]), held.get("idle_seconds")
            with lock:
                old = idle.get(version)
                if seconds is None:
                    idle.setdefault(version, None)
                else:
                    idle[version] = seconds if old is None else min(old, seconds)

        self.each(look)
        return idle

    def _busy(self, keep: int | None) -> dict[int, float]:
        """Background versions (other than `keep`) read within reader_quiet seconds."""
        return {
            v: s
            for v, s in self.read_versions().items()
            if v != keep and s is not None and s < self.reader_quiet
        }

    def _drain(self, r: Rollout) -> None:
        """Loading r.version replaces each server's background version: first wait until
        no reader has read it for reader_quiet seconds (serving has moved to the current
        one), at most drain_timeout. Paddle's cube drops it at once; see docs/cube.md."""
        r.phase = "draining"
        timeout = min(self.drain_timeout, max(0.0, self._left(r)))
        busy = self._wait_unread(r, lambda: self._busy(r.version), timeout)
        if busy:
            r.drain_warning = (
                f"version(s) {sorted(busy)} still read after {self.drain_timeout}s: "
                "dropped while readers may use them"
            )
            log.warning("rollout of %s: %s", r.version, r.drain_warning)

    def _wait_unread(
        self, r: Rollout, busy: Callable[[], dict[int, float]], timeout: float
    ) -> dict[int, float]:
        """Wait until busy() (held versions read within reader_quiet seconds) is empty, at
        most `timeout` seconds; what is still read then. Sets r.drained."""
        deadline = time.monotonic() + timeout
        while (still := busy()) and time.monotonic() < deadline:
            time.sleep(min(0.2, self.reader_quiet / 4))
        r.drained = round(time.monotonic() - r.started, 3)
        return still

    def unload_idle(self, version: int) -> bool:
        """Unload `version` where it is the background version, unless a reader read it
        within reader_quiet seconds; True when no server holds it any more."""
        if version in self._busy(None):
            return False
        self.unload_all(version)
        return True

    def _left(self, r: Rollout) -> float:
        return r.started + self.rollout_timeout - time.monotonic()

    def _revert(self, r: Rollout) -> None:
        """Switch every shard back to the previous version (a no-op where it never left)."""
        if r.previous is None:
            return
        r.phase = "reverting"
        for attempt in range(3):
            failures = self.each(
                lambda s: self.agent(s, "POST", "/agent/switch", {"version": r.previous})
            )
            lost = {s: e for s, e in failures.items() if e is not None}
            if not lost:
                return
            time.sleep(0.2 * (attempt + 1))
        for s, err in lost.items():
            r.errors[s] = f"{r.errors.get(s, '')}; switching back failed: {err}".lstrip("; ")
            log.error("shard %s could not be switched back to %s: %s", s, r.previous, err)

    def _abort(self, r: Rollout) -> None:
        r.phase = "aborting"
        failures = self.each(
            lambda s: self.agent(s, "POST", "/agent/abort", {"version": r.version})
        )
        for s, err in failures.items():
            if err is not None:
                log.warning("shard %s: abort of %s not acknowledged: %s", s, r.version, err)
        r.phase = "aborted"

    def current_versions(self) -> dict[str, int | None]:
        """The version each server serves (None: none, or its agent did not answer)."""
        current: dict[str, int | None] = dict.fromkeys(self.agents)

        def look(name: str) -> None:
            server = self.agent(name, "GET", "/agent/status").get("server") or {}
            current[name] = server.get("cur_version")

        self.each(look)
        return current

    def switch_all(self, version: int) -> dict[str, Exception | None]:
        return self.each(lambda s: self.agent(s, "POST", "/agent/switch", {"version": version}))

    def unload_all(self, version: int) -> dict[str, Exception | None]:
        return self.each(lambda s: self.agent(s, "POST", "/agent/unload", {"version": version}))
