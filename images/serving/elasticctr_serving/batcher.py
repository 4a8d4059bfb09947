"""Dynamic batching: requests queued by the HTTP handlers are merged into batches, and each
batch does one cube lookup (one binary request per shard, pinned to the model's version)
and one predictor run.

A worker takes the oldest request, then every request already queued, up to
`max_batch` instances and `max_keys` keys (cube's keys per lookup, from cube.conf: a
batch's lookup never exceeds what a cube-server takes). It waits for more, at most
`max_wait` after the oldest was queued, only while requests are known to be arriving (an
HTTP handler has started one and not queued it yet): a lone request never waits, and
under load batches fill up.

One request must not fail the others: a batch of several requests that fails for any
reason but cube being unavailable runs again one request at a time, so that each gets
its own answer or its own error.

Each batch takes the active model once (`models.active()`) and uses its version for the
cube lookup and its predictor for the run, so no response mixes versions. If cube no
longer holds that version and the active model changed meanwhile, the batch runs again
on the new one.

An instance whose pooled inputs are not finite (a NaN or inf vector from cube, or a sum
that overflows float32) or whose score is not finite gets an InstanceFailure instead of a
prediction (the answer says why, app.py); the other instances of the batch are answered.
The check is one `np.isfinite` over the pooled inputs and one over the output.

The answers of a batch go back to the event loop in one hand-off (one
`call_soon_threadsafe`, one wake-up of the loop), not one per request. Keys are
deduplicated and pooled by the native library when it is there (native.py: the same
results bit for bit as `np.unique` and `pool` below, ~5x faster).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from elasticctr_common.cube.client import CubeClient, CubeError, CubeRequestError, CubeVersionError
from numpy.typing import NDArray

from .instances import BadRequest, Parsed, merge
from .metrics import NONFINITE_EMBEDDING, NONFINITE_POOLED, NONFINITE_SCORE, ServingMetrics
from .model import DenseModel
from .native import parser
from .recent import CUBE_UNAVAILABLE, CUBE_VERSION, CUBE_WIDTH, NO_MODEL

log = logging.getLogger("elasticctr_serving.batcher")


def _deliver(outcomes: list[tuple[_Pending, Prediction | BaseException]]) -> None:
    """Answer the requests of a batch (on their event loop)."""
    for pending, outcome in outcomes:
        if pending.future.done():  # the client went away and its handler was cancelled
            continue
        if isinstance(outcome, BaseException):
            pending.future.set_exception(outcome)
        else:
            pending.future.set_result(outcome)


class Unavailable(Exception):
    """The request cannot be served now (no model yet, cube down): HTTP 503; `cause` is one
    of recent.py's causes."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class InstanceFailure:
    """Why one instance has no prediction; the others of its request have theirs."""

    cause: str  # metrics.FAILURE_CAUSES: the label of failed_instances_total
    message: str  # without the instance's index (the answer adds it)


@dataclass
class Prediction:
    version: int
    probabilities: NDArray[np.float32]  # [n, 2]; rows of failed instances are meaningless
    failures: dict[int, InstanceFailure] = field(default_factory=dict)  # by instance index


@dataclass
class _Pending:
    parsed: Parsed
    model: DenseModel  # the model the request was parsed for (its slots and crosses)
    future: asyncio.Future[Prediction]  # of the event loop that queued it
    queued: float = field(default_factory=time.monotonic)


def pool(
    keys_values: NDArray[np.float32],
    slots: NDArray[np.int32],
    rows: NDArray[np.int32],
    slot_count: int,
    count: int,
) -> NDArray[np.float32]:
    """Sum the vectors of each (sparse input, instance): float32 [slot_count, count, dim]
    (slot_count: the sparse inputs, slots and crosses), each input's block contiguous, as
    the predictor's inputs want them."""
    dim = keys_values.shape[1]
    cells = slot_count * count
    index = slots.astype(np.int64) * count + rows
    pooled = np.empty((dim, cells), dtype=np.float64)
    for d in range(dim):  # bincount sums in key order, in float64: as exact as float32 order
        pooled[d] = np.bincount(index, weights=keys_values[:, d], minlength=cells)
    return np.ascontiguousarray(pooled.T, dtype=np.float32).reshape(slot_count, count, dim)


class Batcher:
    """`workers` threads run the batches; the event loop queues requests and gets the
    answers back, one hand-off per batch."""

    def __init__(
        self,
        cube: CubeClient,
        active: Callable[[], DenseModel | None],
        on_version_error: Callable[[int], None],
        metrics: ServingMetrics,
        *,
        workers: int = 1,
        max_batch: int = 512,
        max_wait: float = 0.002,
        candidate: Callable[[], DenseModel | None] = lambda: None,
    ) -> None:
        self.cube, self.active, self.on_version_error = cube, active, on_version_error
        self.candidate = candidate  # the canary's version, while one is on trial
        self.metrics = metrics
        self.max_batch, self.max_wait = max_batch, max_wait
        self.max_keys = cube.conf.max_keys  # per request (app.py) and per batch
        self.arriving = 0  # requests being received or parsed by the HTTP handlers
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._stopped = False
        self.threads = [
            threading.Thread(target=self._work, args=(w,), name=f"batch-{w}", daemon=True)
            for w in range(workers)
        ]
        for t in self.threads:
            t.start()

    # -- the HTTP side (on the event loop) ------------------------------------------------
    def arrive(self) -> None:
        with self._cond:
            self.arriving += 1

    def leave(self) -> None:
        """A request that arrived will not be queued (bad input)."""
        with self._cond:
            self.arriving -= 1
            self._cond.notify_all()

    def submit(self, parsed: Parsed, model: DenseModel) -> asyncio.Future[Prediction]:
        """Queue a request parsed for `model` (the handler called arrive() before); the
        future is the event loop's and gets the Prediction or the error."""
        pending = _Pending(parsed, model, asyncio.get_running_loop().create_future())
        with self._cond:
            self.arriving -= 1
            self._queue.append(pending)
            self._cond.notify_all()
        return pending.future

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    # -- the workers ------------------------------------------------------------------------
    def _take(self) -> list[_Pending]:
        with self._cond:
            while not self._queue:
                if self._stopped:
                    return []
                self._cond.wait()
            batch = [self._queue.popleft()]
            size, keys = batch[0].parsed.count, len(batch[0].parsed.keys)
            deadline = batch[0].queued + self.max_wait
            while size < self.max_batch:
                if self._queue:
                    more = self._queue[0].parsed
                    if size + more.count > self.max_batch or keys + len(more.keys) > self.max_keys:
                        break
                    batch.append(self._queue.popleft())
                    size, keys = size + more.count, keys + len(more.keys)
                    continue
                remaining = deadline - time.monotonic()
                if self.arriving <= 0 or remaining <= 0 or self._stopped:
                    break
                self._cond.wait(remaining)
            return batch

    def _work(self, worker: int) -> None:
        while True:
            batch = self._take()
            if not batch:
                return
            outcomes = self._execute(worker, batch)
            # One hand-off to the event loop per batch, not one per request.
            loop = batch[0].future.get_loop()
            try:
                loop.call_soon_threadsafe(_deliver, outcomes)
            except RuntimeError:  # the loop is closed: the server is stopping
                return

    def _execute(
        self, worker: int, batch: list[_Pending]
    ) -> list[tuple[_Pending, Prediction | BaseException]]:
        """Each request's Prediction, or the exception it must raise."""
        outcomes: list[tuple[_Pending, Prediction | BaseException]] = []
        try:
            # A request parsed for another model's slots (a switch in between) runs alone,
            # on the model it was parsed for, if that one can still be served. A request
            # the canary's version was chosen for runs on it while it is on trial.
            model = self.active()
            if model is None:
                raise Unavailable("no model version is loaded yet", NO_MODEL)
            candidate = self.candidate()
            groups: dict[int, list[_Pending]] = {}
            for p in batch:
                same = p.model.space == model.space and p.model is not candidate
                groups.setdefault(model.version if same else p.model.version, []).append(p)
            for version, pending in groups.items():
                chosen = model if version == model.version else pending[0].model
                outcomes += self._isolated(worker, chosen, pending)
        except Exception as err:  # never lose a worker; every request gets an answer
            if not isinstance(err, Unavailable):
                log.exception("batch failed")
            answered = {id(p) for p, _ in outcomes}
            outcomes += [(p, err) for p in batch if id(p) not in answered]
        return outcomes

    def _isolated(
        self, worker: int, model: DenseModel, pending: list[_Pending]
    ) -> list[tuple[_Pending, Prediction | BaseException]]:
        """The requests' outcomes; if they fail together for a reason that may be one
        request's (not cube being unavailable), each runs again alone."""
        try:
            return self._predict(worker, model, pending)
        except Unavailable as err:
            return [(p, err) for p in pending]
        except Exception as err:
            if len(pending) == 1:
                if not isinstance(err, BadRequest):
                    log.exception("request failed")
                return [(pending[0], err)]
        self.metrics.isolated.inc(len(pending))
        outcomes: list[tuple[_Pending, Prediction | BaseException]] = []
        for p in pending:
            outcomes += self._isolated(worker, model, [p])
        return outcomes

    def _predict(
        self, worker: int, model: DenseModel, pending: list[_Pending]
    ) -> list[tuple[_Pending, Prediction | BaseException]]:
        now = time.monotonic()
        self.metrics.stage_seconds.inc(sum(now - p.queued for p in pending), "queue")
        batch = merge([p.parsed for p in pending])
        count = batch.count
        for attempt in range(2):
            try:
                probabilities, failures = self._infer(worker, model, batch)
                break
            except CubeVersionError as err:
                self.on_version_error(model.version)
                newer = self.active()
                if attempt or newer is None or newer is model or newer.space != model.space:
                    raise Unavailable(
                        f"cube does not hold version {model.version} of the dense model: {err}",
                        CUBE_VERSION,
                    ) from None
                model = newer
            except CubeRequestError as err:  # this batch's keys, not cube's state
                status = 413 if err.too_large else 400
                raise BadRequest(f"cube refused the lookup: {err}", status) from None
            except CubeError as err:
                raise Unavailable(f"cube lookup failed: {err}", CUBE_UNAVAILABLE) from None
        m = self.metrics
        m.batches.inc()
        m.examples.inc(count)
        if model is self.candidate():
            m.canary_examples.inc(count)
        m.batch_size.observe(count)
        for failure in failures.values():
            m.failed_instances.inc(1, failure.cause)
        outcomes: list[tuple[_Pending, Prediction | BaseException]] = []
        start = 0
        for p in pending:
            end = start + p.parsed.count
            mine = {row - start: f for row, f in failures.items() if start <= row < end}
            outcomes.append((p, Prediction(model.version, probabilities[start:end], mine)))
            start = end
        return outcomes

    def _infer(
        self, worker: int, model: DenseModel, batch: Parsed
    ) -> tuple[NDArray[np.float32], dict[int, InstanceFailure]]:
        """[count, 2] probabilities, and the instances (rows) that have none."""
        count, keys, slots, rows = batch.count, batch.keys, batch.slots, batch.rows
        stage = self.metrics.stage_seconds
        started = time.perf_counter()
        native = parser()
        if native is not None:
            unique, inverse = native.unique(keys)
        else:
            unique, inverse = np.unique(keys, return_inverse=True)
        result = self.cube.seek(unique, version=model.version)
        looked_up = time.perf_counter()
        stage.inc(looked_up - started, "cube")
        if result.values.shape[1] != model.embedding_dim and len(unique):
            raise Unavailable(
                f"cube version {model.version} has {result.values.shape[1]}-dim vectors, "
                f"the dense model expects {model.embedding_dim}",
                CUBE_WIDTH,
            )
        self.metrics.cube_keys.inc(len(unique))
        self.metrics.missing_keys.inc(result.missing)
        slot_count = model.space.inputs  # the slots, then the crosses
        if not len(unique):
            pooled = np.zeros((slot_count, count, model.embedding_dim), dtype=np.float32)
        elif native is not None:
            pooled = native.pool(result.values, inverse, slots, rows, slot_count, count)
        else:
            pooled = pool(result.values[inverse], slots, rows, slot_count, count)
        failures: dict[int, InstanceFailure] = {}
        # A NaN or inf vector makes its sums non-finite, as does a sum that overflows.
        if not np.isfinite(pooled).all():
            failures = _nonfinite_inputs(model, pooled, result.values, unique, inverse, slots, rows)
        pooled_at = time.perf_counter()
        stage.inc(pooled_at - looked_up, "pool")
        probabilities = model.predict(worker, pooled, batch.dense)
        stage.inc(time.perf_counter() - pooled_at, "predict")
        if not np.isfinite(probabilities).all():  # finite inputs that overflow in the model
            for row in np.flatnonzero(~np.isfinite(probabilities).all(axis=1)).tolist():
                failures.setdefault(
                    row,
                    InstanceFailure(
                        NONFINITE_SCORE,
                        f"the model's score is not finite (NaN or infinite) at version "
                        f"{model.version}",
                    ),
                )
        return probabilities, failures


def _nonfinite_inputs(
    model: DenseModel,
    pooled: NDArray[np.float32],
    values: NDArray[np.float32],
    unique: NDArray[np.uint64],
    inverse: NDArray[np.int64],
    slots: NDArray[np.int32],
    rows: NDArray[np.int32],
) -> dict[int, InstanceFailure]:
    """A failure for each instance whose pooled inputs are not finite, naming its first
    non-finite vector's key, else the slot (or cross) whose sum overflows float32; their
    inputs are zeroed in `pooled`, never fed to the model: with oneDNN's matrix product,
    ReLU made a NaN input a finite, meaningless score (only the batch-1 predictor gave NaN)."""
    finite = np.isfinite(pooled).all(axis=2)  # [sparse input, instance]
    bad_rows = ~finite.all(axis=0)
    failures: dict[int, InstanceFailure] = {}
    bad_keys = ~np.isfinite(values).all(axis=1)
    for at in np.flatnonzero(bad_keys[inverse]).tolist():
        row = int(rows[at])
        if row not in failures:
            named = model.space.describe_input(int(slots[at]))
            failures[row] = InstanceFailure(
                NONFINITE_EMBEDDING,
                f"the embedding of sparse key {int(unique[inverse[at]])} ({named}) in cube "
                f"version {model.version} is not finite (NaN or infinite)",
            )
    for row in np.flatnonzero(bad_rows).tolist():
        if row not in failures:  # finite vectors whose sum is not
            named = model.space.describe_input(int(np.argmin(finite[:, row])))
            failures[row] = InstanceFailure(
                NONFINITE_POOLED,
                f"the sum of the embeddings of {named} in cube version {model.version} "
                "overflows float32",
            )
    pooled[:, bad_rows] = 0
    return failures
