"""cube-transfer: follows the model donefile, builds and publishes cube versions, rolls
them out to every shard all-or-nothing (rollout.py), keeps the last K versions.

Two ports: status and history for readers (serving, the client's `status`), and rollback
on a control port that listens on loopback by default (an operator reaches it with
`kubectl port-forward`), so that no reader can change the version served.

State lives in the cube store: `<cube_uri>/transfer-state.json` (the committed version,
history, the last donefile id handled, attempts), so a restarted transfer carries on.
Versions are built for the shard count of cube.conf, under `<cube_uri>/shards-<N>/`
(manifest.py), with `shards-<N>/current`, which the agents of that layout read to restore
a restarted server.

A new shard count (or new shard pods) starts a new transfer with a new cube.conf while the
old servers still serve: before anything else, it builds the committed version for its
own layout and rolls it out there (a rollout like any other, all-or-nothing), retrying
until every server of the layout holds it; serving's pods of the new layout become ready
only then, and the old layout is removed after them (docs/cube.md, "Reshaping").

A donefile version with a parent (a delta export) is built as a delta on the parent's cube
version, unless the chain is due for compaction: every `base_every` versions, or when its
deltas hold more than `max_chain_fraction` of its base's keys, the version is built as a
base by merging the chain with the delta (docs/cube.md, "Deltas"). A delta on a version
this layout has not built (say, rejected) is built as a base from the model exports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from elasticctr_common import canary as canary_contract
from elasticctr_common.canary import Decision
from elasticctr_common.contract import (
    CUBE_BASE_EVERY,
    CUBE_CONF,
    CUBE_KEEP_VERSIONS,
    CUBE_MAX_CHAIN_FRACTION,
    CUBE_TRANSFER_CONTROL_PORT,
    CUBE_TRANSFER_PORT,
    DATA_DIR,
    CubeEnv,
)
from elasticctr_common.cube.conf import CubeConf
from elasticctr_common.exposition import CONTENT_TYPE, Exposition
from elasticctr_common.metrics import (
    CUBE_TRANSFER,
    ROLLOUT_KINDS,
    ROLLOUT_PHASES,
    ROLLOUT_RESULTS,
    TRANSFER_FAILURE_CAUSES,
)
from elasticctr_common.registry import SERVING_ALIAS, ModelRegistry, RegistryError
from elasticctr_common.shutdown import DRAIN_SECONDS, StopSignal
from elasticctr_common.storage import StorageError, open_store
from elasticctr_common.versions import (
    MODEL_META,
    DonefileError,
    Version,
    dense_beside,
    read_versions,
)

from .builder import (
    BuildError,
    Rows,
    build,
    cube_sources,
    export_sources,
    merge,
    publish,
)
from .canary import CanaryPolicy, add_options, policy_from_args, record_in_mlflow
from .cliargs import env_option
from .httpjson import ApiError, Handler, Text, drain_all, serve
from .manifest import (
    LAYOUT_PREFIX,
    MANIFEST,
    Manifest,
    ManifestError,
    layout_dir,
    read_chain,
    read_manifest,
    write_current,
)
from .rollout import Rollout, RolloutRunner

log = logging.getLogger("cube-transfer")
STATE = "transfer-state.json"
HISTORY_LIMIT = 200
# Seconds between tries to move the registry's serving alias that failed (not registered yet).
ALIAS_RETRY_SECONDS = 10.0
# A rollout whose result is recorded may hold the lock a little longer (old versions
# pruned from storage): a rollback asked for then waits this long before it is refused.
WRAP_UP_SECONDS = 10.0
ENDED_PHASES = frozenset({"committed", "aborted"})


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
        base_every: int = CUBE_BASE_EVERY,
        max_chain_fraction: float = CUBE_MAX_CHAIN_FRACTION,
        runner: RolloutRunner,
        registry: ModelRegistry | None = None,
        canary: CanaryPolicy | None = None,
    ) -> None:
        self.model_store, self.root = open_store(model_uri), open_store(cube_uri)
        # Versions of this shard count; the state (committed version, history) is shared.
        self.layout = layout_dir(conf.shard)
        self.cube_store = self.root.child(self.layout)
        self.conf, self.runner, self.work_dir = conf, runner, Path(work_dir)
        self.keep, self.max_attempts, self.retry_seconds = max(1, keep), max_attempts, retry_seconds
        self.unload_previous_after = unload_previous_after
        # MLflow's registry: its serving alias follows the committed version (sync_alias).
        self.registry = registry
        # A new version first serves a share of requests and is judged online (canary.py).
        self.canary_policy = canary
        self.alias: dict[str, Any] = {
            "version": None,
            "target": None,
            "tried_at": 0.0,
            "error": None,
        }
        if base_every < 1 or max_chain_fraction < 0:
            raise ValueError(
                f"base_every must be >= 1 and max_chain_fraction >= 0, got {base_every} "
                f"and {max_chain_fraction}"
            )
        self.base_every, self.max_chain_fraction = base_every, max_chain_fraction
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
            "layouts": [],  # layout directories in the order they were first used
            "canary": None,  # the version on trial beside the committed one (canary.py)
        }
        if self.root.exists(STATE):
            self.state.update(json.loads(self.root.read_text(STATE)))
        # This layout is the newest, whether new or back again (prune keeps the one before).
        others = [name for name in self.state["layouts"] if name != self.layout]
        self.state["layouts"] = [*others, self.layout]
        # Whether every server of this layout serves the committed version; until then
        # the layout is made to (ensure_layout) before any new version is rolled out.
        self.layout_ready = self.state["committed"] is None
        self.layout_tried_at = 0.0
        self.metrics = m = Exposition(CUBE_TRANSFER)
        for kind in ROLLOUT_KINDS:  # every series from the start, at 0
            for result in ROLLOUT_RESULTS:
                m["rollouts_total"].labels(kind, result)
        for cause in TRANSFER_FAILURE_CAUSES:
            m["failures_total"].labels(cause)
        for kind in ("base", "delta"):
            m["versions_built_total"].labels(kind)
        m.gauge_function("committed_version", lambda: _or_minus_1(self.state["committed"]))
        m.gauge_function("canary_version", lambda: _or_minus_1(self._canary_version()))
        m["kept_versions"].set(len(self.kept_versions()))

    # -- the donefile ---------------------------------------------------------------------
    def poll_once(self) -> str | None:
        """Bring this layout to the committed version, else roll out the newest donefile
        version if it is new; the result, or None."""
        with self._lock:
            if not self.layout_ready:
                return self.ensure_layout()
            if self.state["canary"] is not None:
                return self.judge_canary()
            return self._poll()

    def sync_alias(self) -> None:
        """Point the registry's serving alias at the committed version. Trainer 0 registers
        a version after publishing it, so cube may commit it first: retried every
        ALIAS_RETRY_SECONDS until it is there. A registry down never holds a rollout."""
        committed = self.state["committed"]
        a = self.alias
        if self.registry is None or committed is None or committed == a["version"]:
            return
        if a["target"] == committed and time.time() - a["tried_at"] < ALIAS_RETRY_SECONDS:
            return
        a.update(target=committed, tried_at=time.time())
        try:
            number = self.registry.set_alias(committed)
        except RegistryError as err:
            if a["error"] != str(err):
                log.warning("registry: %s alias not moved to %s: %s", SERVING_ALIAS, committed, err)
            a["error"] = str(err)
            return
        a.update(version=committed, error=None)
        log.info(
            "registry: %s of %s -> version %s (MLflow version %s)",
            SERVING_ALIAS, self.registry.model_name, committed, number,
        )  # fmt: skip

    # -- the layout ---------------------------------------------------------------------
    def ensure_layout(self) -> str | None:
        """Build the committed version for this layout unless it is, and roll it out to
        every server of the layout that does not serve it; retried every retry_seconds."""
        committed = self.state["committed"]
        if committed is None or self._serves(committed):
            self.layout_ready = True
            return None
        if time.time() - self.layout_tried_at < self.retry_seconds:
            return None
        self.layout_tried_at = time.time()
        with self._rolling():
            entry = {"version": committed, "kind": "layout", "layout": self.layout}
            entry["started"] = time.time()
            try:
                self._publish_layout(committed)
                read_manifest(self.cube_store, committed)
            except Exception as err:  # the model export gone, a build error, storage trouble
                error = f"layout {self.layout}: cannot build committed version {committed}: {err}"
                return self._record(entry, "aborted", error, "layout")
            self.rollout = rollout = Rollout(committed, None)
            ok = self.runner.run(rollout)
            entry["shards"] = dict(rollout.shards)
            if not ok:
                error = f"layout {self.layout}: {rollout.error_text()}"
                return self._record(entry, "aborted", error, "rollout")
            write_current(self.cube_store, committed)
            self.layout_ready = True
            self._prune()
            return self._record(entry, "committed", None)

    def _serves(self, version: int) -> bool:
        """Whether every server of this layout serves `version` (a server that does not
        answer does not)."""
        current = self.runner.current_versions()
        return bool(current) and all(v == version for v in current.values())

    def _publish_layout(self, version: int) -> None:
        """Build `version` for this layout unless it is: a base from the files of the newest
        other layout that has it (base + deltas, repartitioned), else from the model
        exports (its own, or its chain's)."""
        if self.cube_store.exists(f"{version}/{MANIFEST}"):
            return
        for name in reversed(self.state["layouts"]):
            other = self.root.child(name)
            if name == self.layout or not other.exists(f"{version}/{MANIFEST}"):
                continue
            chain = read_chain(other, version)
            self._merge_publish(version, chain[-1].dim, chain[-1].input, chain, None)
            return
        self._publish(self._model_version(version))

    def _model_version(self, version: int) -> Version:
        for candidate in read_versions(self.model_store):
            if candidate.id == version:
                return candidate
        raise ManifestError(
            f"version {version} is not in {self.model_store.uri('donefile')} (its export is "
            "needed to build it for this shard count)"
        )

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
        if result in ("committed", "rejected", "canary") or count >= self.max_attempts:
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
                return self._record(entry, "rejected", f"build failed: {err}", "build")
            except Exception as err:  # storage trouble (any client's type): retryable
                error = f"build or publish failed: {type(err).__name__}: {err}"
                return self._record(entry, "aborted", error, "storage")
            if self.canary_policy is not None and self.state["committed"] is not None:
                return self._stage_canary(version.id, entry)
            return self._roll(version.id, entry)

    def rollback(self, version: int) -> str:
        with self._rolling():
            if self.state["canary"] is not None:  # the operator's word ends the trial
                self._end_canary(None, "an operator's rollback ended the canary")
            entry = {"version": version, "kind": "rollback", "started": time.time()}
            return self._roll(version, entry)

    def wrapped_up(self) -> bool:
        """Not busy, or busy only with the wrap-up of a rollout that has ended (its result
        recorded, old versions being pruned): then wait for its lock, up to
        WRAP_UP_SECONDS. A rollback asked for right after a result is seen is not refused
        for that."""
        if not self.busy:
            return True
        r = self.rollout
        if r is None or r.phase not in ENDED_PHASES:
            return False
        if not self._lock.acquire(timeout=WRAP_UP_SECONDS):
            return False
        self._lock.release()
        return True

    @contextlib.contextmanager
    def _rolling(self) -> Iterator[None]:
        with self._lock:
            self.busy = True
            try:
                yield
            finally:
                self.busy = False

    def _publish(self, version: Version) -> None:
        """Build and publish `version` for this layout unless it is: a base; a delta on the
        newest version of its model chain this layout has built (its parent, or, when the
        versions between were skipped, an earlier one: their deltas merged into one); or a
        base merged from the chain (compaction; none of it built here)."""
        if self.cube_store.exists(f"{version.id}/{MANIFEST}"):
            return
        self.rollout = Rollout(version.id, self.state["committed"], phase="building")
        exports = [version]  # the model versions after the built ancestor, oldest first
        while exports[0].parent is not None:
            if self.cube_store.exists(f"{exports[0].parent}/{MANIFEST}"):
                break
            exports.insert(0, self._model_version(exports[0].parent))
        if exports[0].parent is None:  # a base export, or a chain none of which is built
            if len(exports) == 1:
                self._build_publish(version, None)
            else:
                self._publish_from_model_chain(exports)
            return
        parent = read_manifest(self.cube_store, exports[0].parent)
        delta = self._build_publish(version, parent, exports, publish_it=False)
        if not self._compaction_due(delta):
            return
        chain = read_chain(self.cube_store, parent.version)
        log.info(
            "version %s: compacting the chain of %s deltas on base %s into a base",
            version.id,
            delta.depth,
            delta.base,
        )
        self._merge_publish(version.id, parent.dim, version.input, chain, exports)

    def _build_publish(
        self,
        version: Version,
        parent: Manifest | None,
        exports: list[Version] | None = None,
        publish_it: bool = True,
    ) -> Manifest:
        """Build `version` (a base, or a delta on `parent` from `exports`, the model deltas
        after it) and publish it, unless `publish_it` is false and compaction is due."""
        local = self.work_dir / f"build-{version.id}"
        try:
            dim = self._expected_dim(version)
            if parent is None or exports is None or len(exports) == 1:
                manifest = build(
                    version.input,
                    local,
                    version=version.id,
                    shard_num=self.conf.shard,
                    dim=dim,
                    dict_name=self.conf.dict_name,
                    parent=parent,
                )
            else:
                manifest = merge(
                    self._export_sources(exports, parent.dim),
                    local,
                    version=version.id,
                    shard_num=self.conf.shard,
                    dim=parent.dim,
                    input_uri=version.input,
                    dict_name=self.conf.dict_name,
                    parent=parent,
                )
            if publish_it or not self._compaction_due(manifest):
                self._publish_built(local, manifest)
            return manifest
        finally:
            shutil.rmtree(local, ignore_errors=True)

    @staticmethod
    def _export_sources(exports: list[Version], dim: int | None) -> Iterator[Rows]:
        for v in exports:
            yield from export_sources(v.input, v.id, dim, delta=v.parent is not None)

    def _compaction_due(self, delta: Manifest) -> bool:
        """Whether the delta's chain is due to become a base: `base_every` versions since its
        base, or deltas holding more than `max_chain_fraction` of the base's keys."""
        if delta.depth >= self.base_every:
            return True
        assert delta.base is not None  # a delta's manifest names its base
        base = read_manifest(self.cube_store, delta.base)
        return delta.chain_keys > self.max_chain_fraction * base.key_count

    def _merge_publish(
        self,
        version: int,
        dim: int,
        input_uri: str,
        chain: list[Manifest],
        exports: list[Version] | None,
    ) -> None:
        """Publish a base of `version` merged from `chain` (cube files of the layout of
        `chain`, any shard count) and, if given, the model `exports` on top of it."""
        local = self.work_dir / f"merge-{version}"
        source_store = self.root.child(layout_dir(chain[0].shard_num))
        try:

            def sources() -> Iterator[Rows]:
                yield from cube_sources(source_store, chain, local)
                yield from self._export_sources(exports or [], dim)

            local.mkdir(parents=True, exist_ok=True)
            manifest = merge(
                sources(),
                local / "out",
                version=version,
                shard_num=self.conf.shard,
                dim=dim,
                input_uri=input_uri,
                dict_name=self.conf.dict_name,
            )
            self._publish_built(local / "out", manifest)
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def _publish_from_model_chain(self, chain: list[Version]) -> None:
        """A base of the last version of `chain` (a base export and the deltas on it) from
        its model exports: no version of it is built here (rejected, or pruned)."""
        version = chain[-1]
        dim = self._expected_dim(version)
        local = self.work_dir / f"merge-{version.id}"
        try:
            manifest = merge(
                self._export_sources(chain, dim),
                local,
                version=version.id,
                shard_num=self.conf.shard,
                dim=dim if dim is not None else self._chain_dim(chain),
                input_uri=version.input,
                dict_name=self.conf.dict_name,
            )
            self._publish_built(local, manifest)
        finally:
            shutil.rmtree(local, ignore_errors=True)

    def _publish_built(self, local: Path, manifest: Manifest) -> None:
        publish(local, manifest, self.cube_store)
        kind = "delta" if manifest.is_delta else "base"
        self.metrics["versions_built_total"].labels(kind).inc()

    @staticmethod
    def _chain_dim(chain: list[Version]) -> int:
        """The dimension of the first record of the chain's exports."""
        for v in chain:
            for rows in export_sources(v.input, v.id, None, delta=False):
                if len(rows.keys):
                    return int(rows.values.shape[1])
        raise BuildError(f"version {chain[-1].id}: its chain of exports holds no records")

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
            return self._record(entry, "aborted", rollout.error_text(), "rollout")
        write_current(self.cube_store, version)
        self.state.update(committed=version, previous=previous)
        self.layout_ready = True
        self._record(entry, "committed", None)
        self._prune()
        if previous is not None and self.unload_previous_after >= 0:
            self._schedule_unload(self.unload_previous_after, version, previous)
        return "committed"

    # -- the canary (canary.py) -----------------------------------------------------------
    def _canary_version(self) -> int | None:
        canary = self.state["canary"]
        return None if canary is None else int(canary["version"])

    def _stage_canary(self, version: int, entry: dict[str, Any]) -> str:
        """Have every server hold `version` beside the committed one; serving then scores
        the policy's share of requests with it until judge_canary decides."""
        policy, baseline = self.canary_policy, self.state["committed"]
        assert policy is not None
        if version == baseline:
            return self._record(entry, "committed", None)
        read_manifest(self.cube_store, version)  # ManifestError: not published
        self.rollout = rollout = Rollout(version, baseline)
        if not self.runner.stage(rollout):
            entry["shards"] = dict(rollout.shards)
            return self._record(entry, "aborted", rollout.error_text(), "rollout")
        entry["kind"] = "canary"
        self.state["canary"] = {
            "version": version,
            "baseline": baseline,
            "fraction": policy.fraction,
            "started": time.time(),
            "phase": canary_contract.SERVING,
            "last": None,
            "entry": entry,
        }
        self._save()
        log.info(
            "version %s: canary on %.0f%% of requests beside %s",
            version, 100 * policy.fraction, baseline,
        )  # fmt: skip
        return "canary"

    def judge_canary(self) -> str | None:
        """Ask the joiner's figures and promote or roll back the canary when they say so;
        a staged version a server lost (a restart) is staged again meanwhile."""
        canary, policy = self.state["canary"], self.canary_policy
        if policy is None:  # restarted without a canary: the trial cannot be judged
            return self._end_canary(None, "the transfer runs without a canary policy now")
        if canary["phase"] == canary_contract.DRAINING:
            return self._end_canary(None, canary.get("reason") or "rolled back")
        self._restage_where_lost(canary)
        decision = policy.judge(canary)
        canary["last"] = decision.as_json()
        if decision.decision == canary_contract.PROMOTE:
            return self._promote_canary(decision)
        if decision.decision == canary_contract.ROLLBACK:
            return self._end_canary(decision, decision.reason)
        return None

    def _restage_where_lost(self, canary: dict[str, Any]) -> None:
        version = int(canary["version"])
        looks = self.runner.servers()
        lost = [
            name
            for name, look in looks.items()
            if "error" not in look
            and version not in (look.get("cur_version"), look.get("bg_version"))
        ]
        if lost:
            log.warning("canary %s: %s no longer hold it; staging it again", version, lost)
            with self._rolling():
                self.rollout = Rollout(version, canary["baseline"])
                self.runner.stage(self.rollout)

    def _promote_canary(self, decision: Decision) -> str:
        canary = self.state["canary"]
        version, entry = int(canary["version"]), dict(canary["entry"])
        entry["canary"] = self._canary_record(canary, decision)
        with self._rolling():
            previous = self.state["committed"]
            self.rollout = rollout = Rollout(version, previous)
            ok = self.runner.switch(rollout)
            entry["shards"] = dict(rollout.shards)
            self.state["canary"] = None
            if not ok:
                return self._record(entry, "aborted", rollout.error_text(), "rollout")
            write_current(self.cube_store, version)
            self.state.update(committed=version, previous=previous)
            self._record(entry, "committed", None)
            self._prune()
        self._canary_to_mlflow(entry, version, decision, promoted=True)
        if previous is not None and self.unload_previous_after >= 0:
            self._schedule_unload(self.unload_previous_after, version, previous)
        return "committed"

    def _end_canary(self, decision: Decision | None, reason: str) -> str:
        """Roll the canary back: serving has left it (phase DRAINING), so every server
        drops it once no reader reads it; the committed version never stopped serving."""
        canary = self.state["canary"]
        version, entry = int(canary["version"]), dict(canary["entry"])
        canary.update(phase=canary_contract.DRAINING, reason=reason)
        self._save()  # serving stops scoring it before it is unloaded
        entry["canary"] = self._canary_record(canary, decision)
        with self._rolling():
            self.rollout = rollout = Rollout(version, self.state["committed"])
            self.runner.withdraw(rollout)
            entry["drained_seconds"] = rollout.drained
            self.state["canary"] = None
            self._record(entry, "rolled_back", f"canary rolled back: {reason}", "canary")
        if decision is not None:
            self._canary_to_mlflow(entry, version, decision, promoted=False)
        return "rolled_back"

    @staticmethod
    def _canary_record(canary: dict[str, Any], decision: Decision | None) -> dict[str, Any]:
        return {
            "baseline": canary["baseline"],
            "fraction": canary["fraction"],
            "seconds": round(time.time() - canary["started"], 3),
            "decision": decision.as_json() if decision is not None else canary.get("last"),
        }

    def _canary_to_mlflow(
        self, entry: dict[str, Any], version: int, decision: Decision, promoted: bool
    ) -> None:
        if self.registry is None:
            return
        seconds = entry["canary"]["seconds"]
        error = record_in_mlflow(self.registry, version, decision, promoted, seconds)
        if error is not None:
            self.last_error = f"canary of version {version} not recorded in MLflow: {error}"

    def _schedule_unload(self, after: float, committed: int, previous: int) -> None:
        timer = threading.Timer(after, self._unload_previous, (committed, previous))
        timer.daemon = True
        timer.start()

    def _record(
        self, entry: dict[str, Any], result: str, error: str | None, cause: str | None = None
    ) -> str:
        """Record a rollout's end in the history and the metrics; `cause`: why it did not
        commit (metrics.TRANSFER_FAILURE_CAUSES)."""
        finished = time.time()
        entry.update(
            result=result,
            error=error,
            finished=finished,
            seconds=round(finished - entry["started"], 3),
        )
        m = self.metrics
        m["rollouts_total"].labels(entry["kind"], result).inc()
        m["rollout_seconds"].labels(result).observe(entry["seconds"])
        if result == "committed":
            m["last_success_timestamp_seconds"].set(finished)
        elif cause is not None:
            m["failures_total"].labels(cause).inc()
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
        """Delete published versions older than the last `keep` committed ones, and the
        layouts older than the one before this (that one may still serve: its pods go only
        once the new layout serves everywhere)."""
        committed = [h["version"] for h in self.state["history"] if h["result"] == "committed"]
        keep = set(sorted(set(committed))[-self.keep :]) | {self.state["committed"]}
        # A kept delta needs its chain down to its base.
        for version in list(keep):
            with contextlib.suppress(ManifestError):
                keep |= {m.version for m in read_chain(self.cube_store, version)}
        for name in self.cube_store.list():
            if name.isdigit() and int(name) not in keep and int(name) < self.state["committed"]:
                self.cube_store.delete(name)
        recent = self.state["layouts"][-2:]
        for name in self.root.list():
            # Versions of the layout before layouts had directories count as one.
            old_layout = name.startswith(LAYOUT_PREFIX) and name not in recent
            unlayered = name.isdigit() and len(self.state["layouts"]) > 1
            if old_layout or unlayered:
                self.root.delete(name)
        self.state["layouts"] = recent
        self.metrics["kept_versions"].set(len(self.kept_versions()))

    def kept_versions(self) -> list[int]:
        return sorted(int(n) for n in self.cube_store.list() if n.isdigit())

    def _save(self) -> None:
        self.root.write_text(STATE, json.dumps(self.state))

    def reconcile(self) -> None:
        """At start: put every shard on the committed version (after a crash mid-switch)."""
        committed = self.state["committed"]
        # A layout that never had it (new shard count) gets it from ensure_layout instead.
        if committed is not None and self.cube_store.exists(f"{committed}/{MANIFEST}"):
            for s, err in self.runner.switch_all(committed).items():
                if err is not None:
                    log.warning("shard %s: not switched to committed %s: %s", s, committed, err)
        # A canary on trial stays on trial: judge_canary stages it again where it is lost.

    def render_metrics(self) -> bytes:
        """The exposition, with the phase as it is now."""
        phase = self.status_phase()
        self.metrics.set_enum("rollout_phase", phase, ROLLOUT_PHASES)
        committed, r = self.state["committed"], self.rollout
        self.metrics["shards"].set(self.conf.shard)
        # Asked of every agent at each scrape (a look, never queued behind a rollout). None
        # is missing with nothing committed yet (nothing to serve), nor while a new layout
        # is brought to the committed version (serving reads the old one meanwhile; a
        # failure there is a rollout failure). A server a rollout has switched serves its
        # version before it is committed.
        if committed is None or not self.layout_ready:
            ready = self.conf.shard
        else:
            switching = {r.version} if r is not None and self.busy else set()
            ready = self.runner.ready_shards({committed, *switching})
        self.metrics["ready_shards"].set(ready)
        return self.metrics.render()

    def status_phase(self) -> str:
        r = self.rollout
        if r and self.busy:
            return r.phase
        return "canary" if self.state["canary"] is not None else "idle"

    def status(self) -> dict[str, Any]:
        r = self.rollout
        return {
            "phase": self.status_phase(),
            "committed": self.state["committed"],
            # The trial without its pending history entry (the transfer's own bookkeeping).
            "canary": None
            if self.state["canary"] is None
            else {k: v for k, v in self.state["canary"].items() if k != "entry"},
            "previous": self.state["previous"],
            "rollout": r.to_json() if r else None,
            "last_error": self.last_error,
            "last_seen_donefile_id": self.state["last_seen"],
            "kept_versions": self.kept_versions(),
            "shards": self.conf.shard,
            "replicas": self.conf.dup,
            # Whether this layout's servers serve the committed version (false while a new
            # shard count is being built and loaded).
            "layout": {"dir": self.layout, "ready": self.layout_ready},
            "registry": None
            if self.registry is None
            else {
                "model": self.registry.model_name,
                SERVING_ALIAS: self.alias["version"],
                "error": self.alias["error"],
            },
        }


def routes(t: Transfer, control: bool = False) -> dict[tuple[str, str], Handler]:
    """The read endpoints; with `control`, the rollback too (the control port's)."""

    def rollback(body: dict[str, Any]) -> tuple[int, Any]:
        try:
            version = int(body["version"])
            read_manifest(t.cube_store, version)
        except (KeyError, TypeError, ValueError) as err:
            raise ApiError(400, f'rollback needs "version" of a kept version ({err})') from None
        if t.busy and not t.wrapped_up():
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
        ("GET", "/metrics"): lambda _: (200, Text(CONTENT_TYPE, t.render_metrics())),
    }
    return {**reads, ("POST", "/rollback"): rollback if control else elsewhere}


def _or_minus_1(version: int | None) -> float:
    return -1.0 if version is None else float(version)


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
    env_option(
        p,
        "--base-every",
        CubeEnv.BASE_EVERY,
        type=int,
        default=CUBE_BASE_EVERY,
        help="a delta version is built as a base once its chain would hold this many deltas",
    )
    env_option(
        p,
        "--max-chain-fraction",
        CubeEnv.MAX_CHAIN_FRACTION,
        type=float,
        default=CUBE_MAX_CHAIN_FRACTION,
        help="... or once the chain's deltas hold more than this fraction of its base's keys",
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
    add_options(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s cube-transfer %(message)s")
    conf = CubeConf.load(args.cube_conf)
    try:
        canary = policy_from_args(args)
    except ValueError as err:
        log.error("%s", err)
        return 2
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
            base_every=args.base_every,
            max_chain_fraction=args.max_chain_fraction,
            runner=runner,
            registry=ModelRegistry.from_env(os.environ),
            canary=canary,
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
            transfer.sync_alias()
        except Exception:  # e.g. the cube store is unreachable: log, keep following
            log.exception("poll failed")
        stop.wait(args.poll_seconds)
    log.info("stopping: draining requests in flight")
    drain_all(servers, DRAIN_SECONDS)
    return 0
