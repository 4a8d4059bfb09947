"""cube-transfer: follows the model donefile, builds and publishes cube versions, rolls
them out to every shard all-or-nothing (rollout.py), keeps the last K versions.

Two ports: status and history for readers (serving, the client's `status`), and rollback
on a control port that listens on loopback by default (an operator reaches it with
`kubectl port-forward`), so that no reader can change the version served.

State lives in the cube store: `<cube_uri>/current` (the committed version, read by the
agents to restore a restarted server) and `<cube_uri>/transfer-state.json` (history,
the last donefile id handled, attempts), so a restarted transfer carries on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from elasticctr_common.contract import (
    CUBE_CONF,
    CUBE_KEEP_VERSIONS,
    CUBE_TRANSFER_CONTROL_PORT,
    CUBE_TRANSFER_PORT,
    DATA_DIR,
    CubeEnv,
)
from elasticctr_common.cube.conf import CubeConf
from elasticctr_common.shutdown import DRAIN_SECONDS, StopSignal
from elasticctr_common.storage import StorageError, open_store
from elasticctr_common.versions import (
    MODEL_META,
    DonefileError,
    Version,
    dense_beside,
    read_versions,
)

from .builder import BuildError, build, publish
from .cliargs import env_option
from .httpjson import ApiError, Handler, drain_all, serve
from .manifest import MANIFEST, ManifestError, read_manifest, write_current
from .rollout import Rollout, RolloutRunner

log = logging.getLogger("cube-transfer")
STATE = "transfer-state.json"
HISTORY_LIMIT = 200


class Transfer:
    def __init__(
        self,
        *,
        model_uri: str,
        cube_uri: str,
        conf: CubeConf,
        work_dir: str,
        keep: int = 3,
        max_attempts: int = 3,
        retry_seconds: float = 30.0,
        unload_previous_after: float = 60.0,
        runner: RolloutRunner,
    ) -> None:
        self.model_store, self.cube_store = open_store(model_uri), open_store(cube_uri)
        self.conf, self.runner, self.work_dir = conf, runner, Path(work_dir)
        self.keep, self.max_attempts, self.retry_seconds = max(1, keep), max_attempts, retry_seconds
        self.unload_previous_after = unload_previous_after
        self._lock = threading.RLock()  # one rollout (and state change) at a time
        self.busy = False
        self.rollout: Rollout | None = None
        self.last_error: str | None = None
        self.state: dict[str, Any] = {
            "committed": None,
            "previous": None,
            "last_seen": None,
            "attempts": {},
            "history": [],
        }
        if self.cube_store.exists(STATE):
            self.state.update(json.loads(self.cube_store.read_text(STATE)))

    # -- the donefile ---------------------------------------------------------------------
    def poll_once(self) -> str | None:
        """Roll out the newest donefile version if it is new; the result, or None."""
        with self._lock:
            return self._poll()

    def _poll(self) -> str | None:
        try:
            versions = read_versions(self.model_store)
        except (DonefileError, OSError) as err:
            self.last_error = str(err)
            return None
        last_seen = self.state["last_seen"]
        if not versions or (last_seen is not None and last_seen >= versions[-1].id):
            return None
        newest = versions[-1]
        tried = self.state["attempts"].get(str(newest.id))
        if tried and time.time() - tried["at"] < self.retry_seconds:
            return None
        result = self.deploy(newest, kind="retry" if tried else "donefile")
        count = (tried or {}).get("count", 0) + 1
        self.state["attempts"][str(newest.id)] = {"count": count, "at": time.time()}
        if result in ("committed", "rejected") or count >= self.max_attempts:
            self.state["last_seen"] = newest.id
            self.state["attempts"] = {}
        self._save()
        return result

    def deploy(self, version: Version, kind: str = "donefile") -> str:
        """Build + publish `version` unless published, then roll it out."""
        with self._rolling():
            entry = {"version": version.id, "kind": kind, "input": version.input}
            entry["started"] = time.time()
            try:
                self._publish(version)
            except (BuildError, ManifestError, ValueError) as err:
                return self._record(entry, "rejected", f"build failed: {err}")
            except Exception as err:  # storage trouble (any client's type): retryable
                error = f"build or publish failed: {type(err).__name__}: {err}"
                return self._record(entry, "aborted", error)
            return self._roll(version.id, entry)

    def rollback(self, version: int) -> str:
        with self._rolling():
            entry = {"version": version, "kind": "rollback", "started": time.time()}
            return self._roll(version, entry)

    @contextlib.contextmanager
    def _rolling(self) -> Iterator[None]:
        with self._lock:
            self.busy = True
            try:
                yield
            finally:
                self.busy = False

    def _publish(self, version: Version) -> None:
        if self.cube_store.exists(f"{version.id}/{MANIFEST}"):
            return
        self.rollout = Rollout(version.id, self.state["committed"], phase="building")
        local = self.work_dir / f"build-{version.id}"
        try:
            manifest = build(
                version.input,
                local,
                version=version.id,
                shard_num=self.conf.shard,
                dim=self._expected_dim(version),
                dict_name=self.conf.dict_name,
            )
            publish(local, manifest, self.cube_store)
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def _expected_dim(self, version: Version) -> int | None:
        """embedding_dim of the trainer's dense/meta.json beside the sparse export, if any."""
        dense = dense_beside(version.input)
        if dense is None:
            return None
        meta = open_store(dense)
        if not meta.exists(MODEL_META):
            return None
        return int(json.loads(meta.read_text(MODEL_META))["embedding_dim"])

    def _roll(self, version: int, entry: dict[str, Any]) -> str:
        previous = self.state["committed"]
        if version == previous:
            return self._record(entry, "committed", None)
        read_manifest(self.cube_store, version)  # ManifestError: not published
        self.rollout = rollout = Rollout(version, previous)
        ok = self.runner.run(rollout)
        entry["shards"] = dict(rollout.shards)
        entry["drained_seconds"] = rollout.drained
        if rollout.drain_warning:
            entry["drain_warning"] = rollout.drain_warning
        if not ok:
            return self._record(entry, "aborted", rollout.error_text())
        write_current(self.cube_store, version)
        self.state.update(committed=version, previous=previous)
        self._record(entry, "committed", None)
        self._prune()
        if previous is not None and self.unload_previous_after >= 0:
            self._schedule_unload(self.unload_previous_after, version, previous)
        return "committed"

    def _schedule_unload(self, after: float, committed: int, previous: int) -> None:
        timer = threading.Timer(after, self._unload_previous, (committed, previous))
        timer.daemon = True
        timer.start()

    def _record(self, entry: dict[str, Any], result: str, error: str | None) -> str:
        finished = time.time()
        entry.update(
            result=result,
            error=error,
            finished=finished,
            seconds=round(finished - entry["started"], 3),
        )
        self.state["history"] = [*self.state["history"], entry][-HISTORY_LIMIT:]
        self.last_error = error
        (log.info if result == "committed" else log.error)(
            "version %s %s%s", entry["version"], result, f": {error}" if error else ""
        )
        self._save()
        return result

    def _unload_previous(self, committed: int, previous: int) -> None:
        """Unload the previous version once no reader uses it (else look again later)."""
        with self._lock:  # after a rollout in progress, if any; then committed has moved on
            if self.state["committed"] != committed:
                return
            try:
                done = self.runner.unload_idle(previous)
            except Exception as err:  # an agent down: the next rollout replaces it anyway
                log.warning("unload of previous version %s failed: %s", previous, err)
                return
        if not done:
            self._schedule_unload(self.runner.reader_quiet, committed, previous)

    def _prune(self) -> None:
        """Delete published versions older than the last `keep` committed ones."""
        committed = [h["version"] for h in self.state["history"] if h["result"] == "committed"]
        keep = set(sorted(set(committed))[-self.keep :]) | {self.state["committed"]}
        for name in self.cube_store.list():
            if name.isdigit() and int(name) not in keep and int(name) < self.state["committed"]:
                self.cube_store.delete(name)

    def kept_versions(self) -> list[int]:
        return sorted(int(n) for n in self.cube_store.list() if n.isdigit())

    def _save(self) -> None:
        self.cube_store.write_text(STATE, json.dumps(self.state))

    def reconcile(self) -> None:
        """At start: put every shard on the committed version (after a crash mid-switch)."""
        committed = self.state["committed"]
        if committed is not None:
            for s, err in self.runner.switch_all(committed).items():
                if err is not None:
                    log.warning("shard %s: not switched to committed %s: %s", s, committed, err)

    def status(self) -> dict[str, Any]:
        r = self.rollout
        return {
            "phase": r.phase if r and self.busy else "idle",
            "committed": self.state["committed"],
            "previous": self.state["previous"],
            "rollout": r.to_json() if r else None,
            "last_error": self.last_error,
            "last_seen_donefile_id": self.state["last_seen"],
            "kept_versions": self.kept_versions(),
            "shards": self.conf.shard,
            "replicas": self.conf.dup,
        }


def routes(t: Transfer, control: bool = False) -> dict[tuple[str, str], Handler]:
    """The read endpoints; with `control`, the rollback too (the control port's)."""

    def rollback(body: dict[str, Any]) -> tuple[int, Any]:
        try:
            version = int(body["version"])
            read_manifest(t.cube_store, version)
        except (KeyError, TypeError, ValueError) as err:
            raise ApiError(400, f'rollback needs "version" of a kept version ({err})') from None
        if t.busy:
            r = t.rollout
            doing = f" of version {r.version} ({r.phase}, {r.to_json()['seconds']}s)" if r else ""
            raise ApiError(
                409,
                f"a rollout{doing} is in progress; it ends within --rollout-timeout "
                f"{t.runner.rollout_timeout}s",
            )
        threading.Thread(target=t.rollback, args=(version,), daemon=True).start()
        return 202, {"result": "started", "version": version}

    def elsewhere(_: dict[str, Any]) -> tuple[int, Any]:
        raise ApiError(403, "POST /rollback is served on the control port (--control-port)")

    reads: dict[tuple[str, str], Handler] = {
        ("GET", "/healthz"): lambda _: (200, {"status": "ok"}),
        ("GET", "/status"): lambda _: (200, t.status()),
        # Asks every agent: for readers that want it (the client's `status`), not per poll.
        ("GET", "/servers"): lambda _: (
            200,
            {"committed": t.state["committed"], "servers": t.runner.servers()},
        ),
        ("GET", "/history"): lambda _: (200, {"history": t.state["history"]}),
    }
    return {**reads, ("POST", "/rollback"): rollback if control else elsewhere}


# How long start-up waits for the bucket: a new stack's storage users are made by a Job
# that may finish after this pod starts (a refused key, then a working one).
STORAGE_WAIT_SECONDS = 600.0


def _with_storage_retry(
    make: Callable[[], Transfer], uri: str, wait: float = STORAGE_WAIT_SECONDS
) -> Transfer:
    """`make()` (which reads the committed state from the bucket), retried while the
    bucket refuses us, with growing pauses up to 10 s; the last error after `wait`."""
    from botocore.exceptions import BotoCoreError, ClientError

    deadline, pause = time.monotonic() + wait, 1.0
    while True:
        try:
            return make()
        except (ClientError, BotoCoreError, StorageError, OSError) as err:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("waiting for %s (%s); again in %.0fs", uri, err, pause)
            time.sleep(pause)
            pause = min(pause * 2, 10.0)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options, defaulting to the environment the Pulumi program sets (cliargs.py)."""
    p = argparse.ArgumentParser(prog="elasticctr_cube transfer", description=__doc__)
    env_option(p, "--model-uri", CubeEnv.MODEL_URI, help="where the trainer's donefile is")
    env_option(p, "--cube-uri", CubeEnv.CUBE_URI, help="where built versions are published")
    env_option(p, "--cube-conf", CubeEnv.CUBE_CONF, default=CUBE_CONF)
    env_option(p, "--work-dir", CubeEnv.WORK_DIR, default=f"{DATA_DIR}/cube-transfer")
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=CUBE_TRANSFER_PORT)
    p.add_argument("--control-host", default="127.0.0.1", help="the control port's address")
    p.add_argument(
        "--control-port", type=int, default=CUBE_TRANSFER_CONTROL_PORT, help="POST /rollback"
    )
    env_option(
        p,
        "--keep",
        CubeEnv.KEEP_VERSIONS,
        type=int,
        default=CUBE_KEEP_VERSIONS,
        help="committed versions kept for rollback",
    )
    p.add_argument("--poll-seconds", type=float, default=10.0)
    p.add_argument("--prepare-timeout", type=float, default=600.0)
    p.add_argument(
        "--rollout-timeout",
        type=float,
        default=900.0,
        help="seconds a rollout may take in all (then it aborts): how long it can hold "
        "off the next rollout or a rollback",
    )
    p.add_argument(
        "--hold-before-switch",
        type=float,
        default=0.0,
        help="seconds every shard holds the loaded version before the switch",
    )
    p.add_argument(
        "--unload-previous-after",
        type=float,
        default=60.0,
        help="seconds the previous version stays loaded after a switch (-1: until "
        "the next rollout), for readers still pinned to it",
    )
    p.add_argument(
        "--reader-quiet",
        type=float,
        default=2.0,
        help="a held version read within this many seconds has readers: it stays loaded",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="seconds a rollout waits for readers to leave the version it replaces",
    )
    p.add_argument("--max-attempts", type=int, default=3)
    p.add_argument("--retry-seconds", type=float, default=30.0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s cube-transfer %(message)s")
    conf = CubeConf.load(args.cube_conf)
    runner = RolloutRunner(
        conf,
        prepare_timeout=args.prepare_timeout,
        rollout_timeout=args.rollout_timeout,
        hold_before_switch=args.hold_before_switch,
        reader_quiet=args.reader_quiet,
        drain_timeout=args.drain_timeout,
    )
    transfer = _with_storage_retry(
        lambda: Transfer(
            model_uri=args.model_uri,
            cube_uri=args.cube_uri,
            conf=conf,
            work_dir=args.work_dir,
            keep=args.keep,
            max_attempts=args.max_attempts,
            retry_seconds=args.retry_seconds,
            unload_previous_after=args.unload_previous_after,
            runner=runner,
        ),
        args.cube_uri,
    )
    stop = StopSignal().install()
    servers = [
        serve(args.host, args.port, routes(transfer)),
        serve(args.control_host, args.control_port, routes(transfer, control=True)),
    ]
    transfer.reconcile()
    log.info(
        "following %s/donefile, %s shards, port %s, control %s:%s",
        args.model_uri,
        conf.shard,
        args.port,
        args.control_host,
        args.control_port,
    )
    # A rollout under way when SIGTERM comes finishes first (or is cut by the grace
    # period's SIGKILL: the next transfer's reconcile repairs that).
    while not stop.is_set():
        try:
            transfer.poll_once()
        except Exception:  # e.g. the cube store is unreachable: log, keep following
            log.exception("poll failed")
        stop.wait(args.poll_seconds)
    log.info("stopping: draining requests in flight")
    drain_all(servers, DRAIN_SECONDS)
    return 0
