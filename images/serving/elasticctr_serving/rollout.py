"""Follows cube's committed version and switches the dense model with it.

The version to serve is the one cube has committed: `committed` of the transfer's
`GET /status` (CUBE_TRANSFER_URL), or, when the transfer does not answer, the version
every cube-server that answers (one replica of each shard at least) reports as current
(`GET /control/status`). When it differs from the
version being served, dense model V is loaded and checked (model.py), cube is asked for
V once to check that it holds V with the model's embedding width, and only then does V
become active, if cube still holds V after the load (rollbacks may have dropped it
meanwhile): one reference swap. Batches that took the old model finish on it: their
cube lookups are pinned to the old version, which cube keeps loaded for a while after a
switch (`--unload-previous-after`, 60 s by default).

A canary (elasticctr_common.canary): while the transfer's status names a version on trial
(`canary`, phase serving), that version's dense model is loaded beside the active one, its
cube lookups pinned to it (every cube-server holds it as its background version), and
`model_for` gives it the canary's share of requests by request id. When the transfer rolls
it back, the candidate is dropped at the next poll (requests it was chosen for and not yet
run go to the active model); when it is promoted, it becomes the active model as loaded.

A version whose model fails to load or to validate is rejected: the error is in `/status`
and the metrics, the old version keeps serving (while cube still holds it), and the load
is tried again after `retry_seconds` (a storage hiccup heals; a broken model stays out).
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson
from elasticctr_common import canary as canary_contract
from elasticctr_common.cube.client import CubeClient, CubeError
from elasticctr_common.cube.conf import CubeConf
from elasticctr_common.storage import Store

from .metrics import ServingMetrics
from .model import DenseModel, ModelError, load_model

log = logging.getLogger("elasticctr_serving.rollout")

# Seconds a status call to the transfer or a cube-server may take. Not tied to the poll
# interval: on a busy node a slow answer is still an answer (with 0.1 s polls it was 0.5 s).
STATUS_TIMEOUT = 2.0


@dataclass
class Rejection:
    error: str
    at: float
    attempts: int


def get_json(url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body: dict[str, Any] = orjson.loads(response.read())
        return body


class ModelManager:
    def __init__(
        self,
        models: Store,
        cube_conf: CubeConf,
        cube: CubeClient,
        metrics: ServingMetrics,
        *,
        workers: int,
        transfer_url: str = "",
        slots: list[int] | None = None,
        sparse_dim: int | None = None,
        poll_seconds: float = 1.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self.models, self.cube_conf, self.cube, self.metrics = models, cube_conf, cube, metrics
        self.workers, self.transfer_url = workers, transfer_url.rstrip("/")
        self.slots, self.sparse_dim = slots, sparse_dim
        self.poll_seconds, self.retry_seconds = poll_seconds, retry_seconds
        self._active: DenseModel | None = None
        self._candidate: DenseModel | None = None
        self.canary_fraction = 0.0
        # The transfer's canary as last read: (version, share of requests), or None.
        self.canary_target: tuple[int, float] | None = None
        self.rejected: dict[int, Rejection] = {}
        self.cube_version: int | None = None
        # The transfer said no version is committed yet (a new stack): nothing to serve, and
        # nothing this pod could serve better; readiness counts it as ready (app.py).
        self.nothing_committed = False
        self.cube_source = ""
        self.last_error: str | None = None
        self.history: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, name="rollout", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def active(self) -> DenseModel | None:
        return self._active

    def candidate(self) -> DenseModel | None:
        return self._candidate

    def model_for(self, request_id: str) -> DenseModel | None:
        """The model that scores this request: the canary's for its share of ids."""
        candidate, active = self._candidate, self._active
        if candidate is not None and canary_contract.routes_to_candidate(
            request_id, self.canary_fraction
        ):
            return candidate
        return active

    def poke(self, version: int | None = None) -> None:
        """Check now (a batch found cube without the version it was pinned to)."""
        self._wake.set()

    # -- what cube serves ----------------------------------------------------------------
    def committed_version(self) -> int | None:
        """cube's committed version: the transfer's word, else the shards' agreement."""
        if self.transfer_url:
            try:
                status = get_json(f"{self.transfer_url}/status", STATUS_TIMEOUT)
                self.cube_source = "transfer"
                self.canary_target = _canary_of(status)
                committed = status.get("committed")
                self.nothing_committed = committed is None
                return None if committed is None else int(committed)
            except (OSError, ValueError, urllib.error.URLError) as err:
                self.last_error = f"transfer {self.transfer_url} did not answer: {err}"
        self.nothing_committed = False
        self.canary_target = None  # only the transfer says there is one
        versions, answered = set(), set()
        for shard, _replica, node in self.cube_conf.servers():
            try:
                status = get_json(f"{node.server_url}/control/status", STATUS_TIMEOUT)
            except (OSError, ValueError, urllib.error.URLError) as err:
                self.last_error = f"cube-server {node.server_url} did not answer: {err}"
                continue  # another replica of the shard may answer
            versions.add(status.get("cur_version"))  # None: nothing switched in
            answered.add(shard)
        if len(answered) < self.cube_conf.shard:
            return None
        self.cube_source = "cube-servers"
        (version, *others) = versions
        if others or version is None:
            return None  # a switch under way, or nothing loaded: keep what we serve
        return int(version)

    # -- the loop ------------------------------------------------------------------------
    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self.check_once()
            except Exception:  # never stop following
                log.exception("version check failed")
            self._wake.wait(self.poll_seconds)
            self._wake.clear()

    def check_once(self) -> None:
        target = self.committed_version()
        self.cube_version = target
        self.metrics.cube_version.set(-1 if target is None else target)
        self._follow_active(target)
        self._follow_canary()

    def _follow_canary(self) -> None:
        want, candidate = self.canary_target, self._candidate
        if want is None or self._active is None or want[0] == self._active.version:
            if candidate is not None:
                self._candidate = None
                self.metrics.canary_version.set(-1)
                log.info(
                    "canary %d withdrawn: all requests on the active version", candidate.version
                )
            return
        version, fraction = want
        if candidate is not None and candidate.version == version:
            self.canary_fraction = fraction
            return
        model = self._try_load(version)
        if model is None:
            return
        self.canary_fraction = fraction
        self._candidate = model
        self.metrics.canary_version.set(version)
        log.info("canary %d on %.0f%% of requests, loaded in %.2fs", version, 100 * fraction,
                 model.load_seconds)  # fmt: skip

    def _try_load(self, version: int) -> DenseModel | None:
        """Dense model `version`, loaded and checked; None while cube does not hold it yet,
        or when it is rejected (and for retry_seconds after)."""
        rejection = self.rejected.get(version)
        if rejection and time.time() - rejection.at < self.retry_seconds:
            return None
        try:
            # cube first: a load takes seconds (a child process imports Paddle), and a shard
            # still switching must cost a cheap lookup per poll, not a load.
            cube_width = self._cube_width(version)
            model = load_model(self.models, version, self.workers, self.slots, self.sparse_dim)
            _check_width(model, cube_width)
        except _CubeNotReady as err:
            self.last_error = str(err)
            return None
        except ModelError as err:
            self._reject(version, str(err))
            return None
        return model

    def _follow_active(self, target: int | None) -> None:
        active = self._active
        if target is None or (active is not None and active.version == target):
            return
        candidate = self._candidate
        if candidate is not None and candidate.version == target:
            model: DenseModel | None = candidate  # the canary promoted: loaded already
            self._candidate = None
            self.metrics.canary_version.set(-1)
        else:
            model = self._try_load(target)
        if model is None or not self._still_cubes(target):
            return
        self._active = model
        self.rejected.pop(target, None)
        self.last_error = None
        self.metrics.model_version.set(target)
        self.metrics.switches.inc()
        self.history = [
            *self.history,
            {
                "version": target,
                "switched_at": time.time(),
                "load_seconds": round(model.load_seconds, 3),
            },
        ][-50:]
        log.info(
            "serving version %d (was %s), loaded in %.2fs",
            target,
            active.version if active else None,
            model.load_seconds,
        )

    def _still_cubes(self, version: int) -> bool:
        """Whether cube still holds `version` after the load: meanwhile rollbacks may have
        committed another version and dropped this one (CI saw serving switch to a version
        cube no longer held, and 8% of requests fail until the next poll)."""
        now = self.committed_version()
        if now != version:
            log.info("version %d is no longer cube's (now %s): not switching to it", version, now)
            self._wake.set()  # follow cube's version at once
            return False
        try:
            self._cube_width(version)
        except _CubeNotReady as err:
            self.last_error = str(err)
            return False
        return True

    def _cube_width(self, version: int) -> int:
        """Width of cube's vectors of `version`; _CubeNotReady until every shard holds it."""
        try:
            # One key per shard (key k lives in shard k % shards): every shard must hold it.
            result = self.cube.seek(list(range(self.cube_conf.shard)), version=version)
        except CubeError as err:
            raise _CubeNotReady(f"cube is not ready for version {version}: {err}") from None
        return int(result.values.shape[1])

    def _reject(self, version: int, error: str) -> None:
        previous = self.rejected.get(version)
        attempts = (previous.attempts if previous else 0) + 1
        self.rejected[version] = Rejection(error, time.time(), attempts)
        self.last_error = error
        self.metrics.rejections.inc()
        active = self._active
        log.error(
            "rejected version %d (attempt %d), still serving %s: %s",
            version,
            attempts,
            active.version if active else "nothing",
            error,
        )

    def ready(self) -> bool:
        """Whether this pod serves all there is: cube's committed version, or nothing when
        nothing is committed. A pod of a new cube layout is not ready until that layout
        holds the committed version, so a rollout never trades working pods for it."""
        return self._active is not None or self.nothing_committed

    def status(self) -> dict[str, Any]:
        active = self._active
        return {
            "version": active.version if active else None,
            "slots": list(active.space.slots) if active else None,
            "crosses": active.space.cross_slots if active else None,
            "sparse_dim": active.space.sparse_dim if active else None,
            "dense_features": (
                [{"name": f.name, "dim": f.dim} for f in active.space.dense] if active else None
            ),
            "data_format": active.meta.get("data_format", "elasticctr") if active else None,
            "embedding_dim": active.embedding_dim if active else None,
            "loaded_at": active.loaded_at if active else None,
            "cube_committed": self.cube_version,
            "canary": None
            if self._candidate is None
            else {"version": self._candidate.version, "fraction": self.canary_fraction},
            "cube_source": self.cube_source,
            "rejected": {
                str(v): {"error": r.error, "at": r.at, "attempts": r.attempts}
                for v, r in sorted(self.rejected.items())
            },
            "last_error": self.last_error,
            "history": self.history,
        }


def _canary_of(status: dict[str, Any]) -> tuple[int, float] | None:
    """The transfer's canary that serving scores: (version, share), or None."""
    canary = status.get("canary")
    if not isinstance(canary, dict) or canary.get("phase") != canary_contract.SERVING:
        return None
    try:
        return int(canary["version"]), float(canary["fraction"])
    except (KeyError, TypeError, ValueError):
        log.warning("the transfer's canary is not understood: %r", canary)
        return None


def _check_width(model: DenseModel, cube_width: int) -> None:
    if cube_width != model.embedding_dim:
        raise ModelError(
            f"version {model.version}: cube holds {cube_width}-dim vectors, the dense model "
            f"expects embedding_dim {model.embedding_dim}"
        )


class _CubeNotReady(Exception):
    """cube does not hold the version yet: try again at the next poll, not a rejection."""
