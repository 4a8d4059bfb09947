"""The cube client library (used by serving): batched, sharded, replicated,
version-consistent seeks.

One seek routes each key to shard `key % shard`, sends one binary request per shard, to
one replica of each, over persistent per-thread connections (all requests are sent
before any answer is read, so the shards work in parallel), and assembles the answers in
key order. Missing keys come back as zero vectors and are counted.

Replicas, as cube.conf's fields say, like Paddle's brpc client does (conf.py):
- `load_balancer` picks the replica: rr (round robin), random, or la (the lowest recent
  latency); a replica that failed is tried last for a second.
- `timeout` bounds the whole seek; within it a shard whose replica fails (connection
  refused or reset, server restarting, no answer) is asked again on another replica, up
  to `retry` more times.
- `backup_request`: a shard that has not answered after that many ms is asked once more
  on another replica (a hedged request); the first answer wins.

Versions: `seek(keys, version=V)` pins every shard to V; a replica without V sends the
request on to the shard's other replicas, and only when none holds V is it an error.
Without a pin, the shards answer with their current version; if they disagree (a switch
is under way) the shards that differ are asked again pinned to the newest version seen,
then to the oldest, so one answer never mixes versions.
"""

from __future__ import annotations

import itertools
import random
import select
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import protocol
from .conf import CubeConf, CubeNode

DOWN_SECONDS = 1.0  # a replica that failed is tried last for this long
RETRY_PAUSE = 0.05  # before asking a replica again that said "not ready"


class CubeError(Exception):
    """A seek failed; subclasses say why."""


class CubeUnavailable(CubeError):
    """A shard did not answer within the timeout after the retries."""


class CubeVersionError(CubeError):
    """A shard does not hold the pinned version (or no version at all)."""


class CubeRequestError(CubeError):
    """The server refused the request: too many keys (`too_large`), or malformed."""

    def __init__(self, message: str, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


@dataclass
class SeekResult:
    values: np.ndarray[Any, np.dtype[np.float32]]  # [n, dim], zeros where missing
    found: np.ndarray[Any, np.dtype[np.bool_]]  # [n]
    version: int
    missing: int


@dataclass
class ClientStats:
    seeks: int = 0
    keys: int = 0
    missing_keys: int = 0
    retries: int = 0
    version_retries: int = 0
    hedges: int = 0


class _Answer:
    def __init__(self, header: protocol.ResponseHeader, body: memoryview):
        self.header, self.body = header, body


class Balancer:
    """Which replica of a shard to ask next (shared by the client's threads)."""

    def __init__(self, conf: CubeConf) -> None:
        self.policy = conf.load_balancer
        self.sizes = [len(group) for group in conf.replicas]
        self._turn = [itertools.count(random.randrange(max(1, n))) for n in self.sizes]
        self._down_until: dict[tuple[int, int], float] = {}
        self._latency: dict[tuple[int, int], float] = {}

    def order(self, shard: int, exclude: set[int]) -> list[int]:
        """The replicas not in `exclude`, best first: healthy ones by the policy, then
        those that failed lately."""
        n = self.sizes[shard]
        if n == 1:
            return [] if 0 in exclude else [0]
        if self.policy == "rr":
            start = next(self._turn[shard])
            candidates = [(start + i) % n for i in range(n)]
        elif self.policy == "random":
            candidates = random.sample(range(n), n)
        else:  # la: the lowest moving average of latency; untried first
            candidates = sorted(range(n), key=lambda r: self._latency.get((shard, r), 0.0))
        now = time.monotonic()
        candidates = [r for r in candidates if r not in exclude]
        healthy = [r for r in candidates if self._down_until.get((shard, r), 0.0) <= now]
        return healthy + [r for r in candidates if r not in healthy]

    def failed(self, shard: int, replica: int) -> None:
        self._down_until[(shard, replica)] = time.monotonic() + DOWN_SECONDS

    def answered(self, shard: int, replica: int, seconds: float) -> None:
        self._down_until.pop((shard, replica), None)
        old = self._latency.get((shard, replica))
        self._latency[(shard, replica)] = seconds if old is None else 0.8 * old + 0.2 * seconds


class _Inflight:
    """One request sent to one replica, its answer read as it arrives (non-blocking)."""

    def __init__(self, call: _Call, replica: int, sock: socket.socket, dim: int) -> None:
        self.call, self.replica, self.sock = call, replica, sock
        self.sent = time.monotonic()
        head = protocol.RESPONSE_HEADER.size
        keys = call.keys
        # Sized for the last dimension seen, so most answers fit without a resize.
        self.buf = bytearray(head + keys * dim * 4 + (keys + 7) // 8)
        self.got, self.total = 0, -1

    def receive(self) -> _Answer | None:
        """Read what has arrived; the answer once complete."""
        head = protocol.RESPONSE_HEADER.size
        with memoryview(self.buf) as view:
            try:
                k = self.sock.recv_into(view[self.got :])
            except BlockingIOError:
                return None
        if k == 0:
            raise ConnectionError("connection closed by the server")
        self.got += k
        if self.total < 0 and self.got >= head:
            header = protocol.decode_header(self.buf)
            self.total = head + header.body_bytes
            if self.got > self.total:
                raise protocol.ProtocolError(
                    f"{self.got - self.total} bytes more than the answer announced"
                )
            if self.total != len(self.buf):
                resized = bytearray(self.total)
                resized[: self.got] = self.buf[: self.got]
                self.buf = resized
        if self.got != self.total:
            return None
        header = protocol.decode_header(self.buf)
        return _Answer(header, memoryview(self.buf)[head:])


@dataclass
class _Call:
    """One shard's part of a seek: its request and the replicas asked so far."""

    shard: int
    request: bytes
    keys: int
    version: int | None
    asked: set[int] = field(default_factory=set)  # replicas sent this request
    no_version: set[int] = field(default_factory=set)  # replicas without the version
    inflight: list[_Inflight] = field(default_factory=list)
    failures: int = 0
    retry_at: float | None = None  # ask again (the same replica) at this time
    answer: _Answer | None = None
    error: Exception | None = None  # the call's outcome, when it failed
    last_error: CubeError | None = None


class CubeClient:
    def __init__(
        self,
        conf: CubeConf,
        *,
        timeout: float | None = None,
        retries: int | None = None,
        backup_request: float | None = None,
    ):
        """`timeout`, `retries` and `backup_request` (seconds; 0: none) default to
        cube.conf's `timeout`, `retry` and `backup_request`."""
        self.conf = conf
        self.timeout = conf.timeout_ms / 1000 if timeout is None else timeout
        self.retries = conf.retry if retries is None else retries
        self.backup_request = (
            conf.backup_request_ms / 1000 if backup_request is None else backup_request
        )
        self.balancer = Balancer(conf)
        self.stats = ClientStats()
        self.dim: int | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    @classmethod
    def from_conf_file(cls, path: str, dict_name: str | None = None, **kwargs: Any) -> CubeClient:
        return cls(CubeConf.load(path, dict_name), **kwargs)

    def close(self) -> None:
        with self._lock:
            for s in self._sockets:
                s.close()
            self._sockets.clear()
        self._local = threading.local()

    def __enter__(self) -> CubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def seek(
        self, keys: Iterable[int] | np.ndarray[Any, Any], version: int | None = None
    ) -> SeekResult:
        if isinstance(keys, np.ndarray) and keys.dtype.kind not in "ui":
            raise TypeError(f"keys must be integers, got an array of {keys.dtype}")
        keys = np.ascontiguousarray(np.asarray(keys, dtype=np.uint64).ravel())
        deadline = time.monotonic() + self.timeout
        shard_num = self.conf.shard
        if shard_num == 1:
            positions: dict[int, np.ndarray[Any, Any]] | None = None
            shard_keys = {0: keys} if len(keys) else {}
        else:
            shard_of = (keys % np.uint64(shard_num)).astype(np.intp)
            order = np.argsort(shard_of, kind="stable")
            bounds = np.searchsorted(shard_of[order], np.arange(shard_num + 1))
            positions = {s: order[bounds[s] : bounds[s + 1]] for s in range(shard_num)}
            positions = {s: p for s, p in positions.items() if len(p)}
            shard_keys = {s: keys[p] for s, p in positions.items()}
        answers = self._exchange(shard_keys, dict.fromkeys(shard_keys, version), deadline)
        if version is None and len(answers) > 1:
            answers = self._reconcile(shard_keys, answers, deadline)
        return self._assemble(len(keys), positions, answers, version)

    def _reconcile(
        self, shard_keys: dict[int, Any], answers: dict[int, _Answer], deadline: float
    ) -> dict[int, _Answer]:
        """Re-ask the shards whose version differs, pinned to the newest, then the oldest."""
        for _round in range(self.retries + 1):
            versions = {a.header.version for a in answers.values()}
            if len(versions) <= 1:
                return answers
            self._count("version_retries")
            for target in (max(versions), min(versions)):
                stale = {s: k for s, k in shard_keys.items() if answers[s].header.version != target}
                try:
                    again = self._exchange(stale, {s: target for s in stale}, deadline)
                except CubeVersionError:
                    continue
                return {**answers, **again}
            answers = self._exchange(shard_keys, {s: None for s in shard_keys}, deadline)
        raise CubeVersionError(f"shards kept answering with different versions {sorted(versions)}")

    def _assemble(
        self,
        n: int,
        positions: dict[int, np.ndarray[Any, Any]] | None,
        answers: dict[int, _Answer],
        version: int | None,
    ) -> SeekResult:
        dims = {a.header.dim for a in answers.values()}
        if len(dims) > 1:
            raise CubeError(f"shards disagree on the vector dimension: {sorted(dims)}")
        dim = self.dim = dims.pop() if dims else (self.dim or 0)
        missing = sum(a.header.missing for a in answers.values())
        served = next(iter(answers.values())).header.version if answers else version
        if positions is None and answers:  # one shard: its answer is the result, no copy
            values, found = protocol.decode_body(answers[0].header, answers[0].body)
        else:
            values = np.zeros((n, dim), dtype=np.float32)
            found = np.zeros(n, dtype=bool)
            for s, answer in answers.items():
                assert positions is not None  # several shards: positions of each
                values[positions[s]], found[positions[s]] = protocol.decode_body(
                    answer.header, answer.body
                )
        with self._lock:
            self.stats.seeks += 1
            self.stats.keys += n
            self.stats.missing_keys += missing
        return SeekResult(values, found, -1 if served is None else served, missing)

    # -- one round of requests: every shard answered, or an error ---------------------
    def _exchange(
        self, shard_keys: dict[int, Any], versions: dict[int, int | None], deadline: float
    ) -> dict[int, _Answer]:
        calls = [
            _Call(s, protocol.encode_request(k, versions[s]), len(k), versions[s])
            for s, k in shard_keys.items()
        ]
        try:
            for call in calls:
                self._ask(call, deadline)
            self._wait(calls, deadline)
        finally:  # answers not read must not be read by the next seek
            for call in calls:
                for inflight in call.inflight:
                    self._close(inflight.sock)
                call.inflight.clear()
        for call in calls:
            if call.error is not None:
                raise call.error
        return {call.shard: call.answer for call in calls if call.answer is not None}

    def _wait(self, calls: list[_Call], deadline: float) -> None:
        poller = select.poll()
        by_fd: dict[int, _Inflight] = {}
        registered: set[int] = set()
        while True:
            open_calls = [c for c in calls if c.answer is None and c.error is None]
            if not open_calls:
                return
            now = time.monotonic()
            if now >= deadline:
                for call in open_calls:
                    if call.inflight or call.failures == 0:
                        call.error = self._unavailable(call, "timed out waiting for the answer")
                    else:
                        call.error = call.last_error or self._unavailable(call, "timed out")
                return
            wake = deadline
            for call in open_calls:
                if call.retry_at is not None and call.retry_at <= now:
                    call.retry_at = None
                    self._ask(call, deadline, exclude=call.no_version)
                if call.retry_at is not None:  # (again, if that attempt failed too)
                    wake = min(wake, call.retry_at)
                elif self._may_hedge(call):
                    hedge_at = call.inflight[0].sent + self.backup_request
                    if hedge_at <= now:
                        self._count("hedges")
                        self._ask(call, deadline, exclude=call.asked | call.no_version)
                    else:
                        wake = min(wake, hedge_at)
            open_calls = [c for c in open_calls if c.answer is None and c.error is None]
            if not open_calls:
                return
            fds = {inflight.sock.fileno(): inflight for c in open_calls for inflight in c.inflight}
            for fd in registered - fds.keys():
                poller.unregister(fd)
            for fd in fds.keys() - registered:
                poller.register(fd, select.POLLIN)
            registered, by_fd = set(fds), fds
            wait_ms = max(0, int((wake - time.monotonic()) * 1000) + 1)
            for fd, _event in poller.poll(wait_ms):
                inflight = by_fd.get(fd)
                if inflight is not None and inflight in inflight.call.inflight:
                    self._receive(inflight, deadline)

    def _may_hedge(self, call: _Call) -> bool:
        return (
            self.backup_request > 0
            and len(call.inflight) == 1
            and len(call.asked) < self.balancer.sizes[call.shard]
        )

    def _receive(self, inflight: _Inflight, deadline: float) -> None:
        call = inflight.call
        try:
            answer = inflight.receive()
        except (OSError, protocol.ProtocolError) as err:
            self._failed(inflight, err, deadline)
            return
        if answer is None:
            return
        self.balancer.answered(call.shard, inflight.replica, time.monotonic() - inflight.sent)
        status = answer.header.status
        if status == protocol.OK:
            call.inflight.remove(inflight)
            self._pool()[(call.shard, inflight.replica)] = inflight.sock  # reusable again
            call.answer = answer
            for slower in call.inflight:  # a hedged request won: ask the slow one last a while
                self.balancer.failed(call.shard, slower.replica)
            return
        message = bytes(answer.body).decode("utf-8", "replace")
        call.inflight.remove(inflight)
        self._pool()[(call.shard, inflight.replica)] = inflight.sock
        node = self.conf.replicas[call.shard][inflight.replica]
        where = f"shard {call.shard} ({node.ip}:{node.port})"
        if status == protocol.UNKNOWN_VERSION:
            call.no_version.add(inflight.replica)
            if len(call.no_version) == self.balancer.sizes[call.shard]:
                call.error = CubeVersionError(f"{where}: {message}")
            elif not call.inflight:
                self._ask(call, deadline, exclude=call.no_version)
                if call.answer is None and call.error is None and not call.inflight:
                    call.error = CubeVersionError(f"{where}: {message}")
        elif status == protocol.NOT_READY:
            self.balancer.failed(call.shard, inflight.replica)
            self._retry(call, CubeUnavailable(f"{where}: {message}"), deadline)
        else:
            call.error = CubeRequestError(f"{where}: {message}", status == protocol.TOO_LARGE)

    def _failed(self, inflight: _Inflight, err: Exception, deadline: float) -> None:
        call = inflight.call
        call.inflight.remove(inflight)
        self._close(inflight.sock)
        self.balancer.failed(call.shard, inflight.replica)
        self._retry(call, err, deadline)

    def _retry(self, call: _Call, err: Exception, deadline: float) -> None:
        """Ask again after a failure, another replica first, `retries` times at most."""
        call.failures += 1
        call.last_error = err if isinstance(err, CubeError) else self._unavailable(call, err)
        if call.inflight:
            return  # a hedged request is still out
        if call.failures > self.retries:
            call.error = call.last_error
            return
        self._count("retries")
        tried = call.asked | call.no_version
        if self.balancer.order(call.shard, tried):
            self._ask(call, deadline, exclude=tried)
        else:  # every replica was asked: again, after a pause (a restart, a load)
            call.retry_at = min(deadline, time.monotonic() + RETRY_PAUSE)

    def _ask(self, call: _Call, deadline: float, exclude: Iterable[int] = ()) -> None:
        """Send the call's request to the best replica not excluded nor already asked by
        a request still out; a replica that cannot be reached counts as a failure."""
        busy = {i.replica for i in call.inflight}
        order = self.balancer.order(call.shard, set(exclude) | busy)
        if not order:
            return
        replica = order[0]
        call.asked.add(replica)
        try:
            sock = self._socket(call.shard, replica, deadline)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(call.request)
            sock.setblocking(False)
        except OSError as err:
            self._drop(call.shard, replica)
            self.balancer.failed(call.shard, replica)
            self._retry(call, err, deadline)
            return
        self._pool().pop((call.shard, replica), None)  # not shared until its answer is read
        call.inflight.append(_Inflight(call, replica, sock, self.dim or 0))

    def _unavailable(self, call: _Call, err: object) -> CubeUnavailable:
        pinned = "" if call.version is None else f" (version {call.version})"
        where = ", ".join(f"{n.ip}:{n.port}" for n in self.conf.replicas[call.shard])
        return CubeUnavailable(
            f"shard {call.shard} at {where} did not answer{pinned} after "
            f"{call.failures} failed attempts within {self.timeout}s: {err}"
        )

    # -- connections: per thread, one per replica ---------------------------------------
    def _pool(self) -> dict[tuple[int, int], socket.socket]:
        pool: dict[tuple[int, int], socket.socket] = self._local.__dict__.setdefault("sockets", {})
        return pool

    def _socket(self, shard: int, replica: int, deadline: float) -> socket.socket:
        sock = self._pool().get((shard, replica))
        if sock is None:
            node: CubeNode = self.conf.replicas[shard][replica]
            # One attempt's share of the time, so that a replica that does not accept
            # connections leaves time for another.
            share = self.timeout / (self.retries + 1)
            timeout = max(0.001, min(deadline - time.monotonic(), share))
            sock = socket.create_connection((node.ip, node.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._pool()[(shard, replica)] = sock
            with self._lock:
                self._sockets.append(sock)
        return sock

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _drop(self, shard: int, replica: int) -> None:
        pool = self._pool()
        sock = pool.pop((shard, replica), None)
        if sock is not None:
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        sock.close()
        with self._lock:
            if sock in self._sockets:
                self._sockets.remove(sock)
