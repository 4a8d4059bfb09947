"""The cube client library (used by serving): batched, sharded, version-consistent seeks.

One seek routes each key to shard `key % shard`, sends one binary request per shard over
persistent per-thread connections (all requests are sent before any answer is read, so
the shards work in parallel), and assembles the answers in key order. Missing keys come
back as zero vectors and are counted.

Versions: `seek(keys, version=V)` pins every shard to V (an error if a shard does not
hold V). Without a pin, the shards answer with their current version; if they disagree
(a switch is under way) the shards that differ are asked again pinned to the newest
version seen, then to the oldest, so one answer never mixes versions.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass

import numpy as np

from . import protocol
from .cubeconf import CubeConf


class CubeError(Exception):
    """A seek failed; subclasses say why."""


class CubeUnavailable(CubeError):
    """A shard did not answer within the timeout after the retries."""


class CubeVersionError(CubeError):
    """A shard does not hold the pinned version (or no version at all)."""


class CubeRequestError(CubeError):
    """The server refused the request (too many keys, malformed)."""


@dataclass
class SeekResult:
    values: np.ndarray  # float32 [n, dim], zeros where missing
    found: np.ndarray  # bool [n]
    version: int
    missing: int


@dataclass
class ClientStats:
    seeks: int = 0
    keys: int = 0
    missing_keys: int = 0
    retries: int = 0
    version_retries: int = 0


class _Answer:
    def __init__(self, header: protocol.ResponseHeader, body: memoryview):
        self.header, self.body = header, body


class CubeClient:
    def __init__(self, conf: CubeConf, *, timeout: float = 2.0, retries: int = 2):
        self.conf = conf
        self.timeout = timeout
        self.retries = retries
        self.stats = ClientStats()
        self.dim: int | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []

    @classmethod
    def from_conf_file(cls, path: str, dict_name: str | None = None, **kwargs) -> CubeClient:
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

    def seek(self, keys, version: int | None = None) -> SeekResult:
        if isinstance(keys, np.ndarray) and keys.dtype.kind not in "ui":
            raise TypeError(f"keys must be integers, got an array of {keys.dtype}")
        keys = np.ascontiguousarray(np.asarray(keys, dtype=np.uint64).ravel())
        deadline = time.monotonic() + self.timeout
        shard_num = self.conf.shard
        if shard_num == 1:
            positions: dict[int, np.ndarray] | None = None
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

    def _reconcile(self, shard_keys, answers, deadline) -> dict[int, _Answer]:
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

    def _assemble(self, n, positions, answers, version) -> SeekResult:
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
                values[positions[s]], found[positions[s]] = protocol.decode_body(
                    answer.header, answer.body
                )
        with self._lock:
            self.stats.seeks += 1
            self.stats.keys += n
            self.stats.missing_keys += missing
        return SeekResult(values, found, -1 if served is None else served, missing)

    def _exchange(self, shard_keys, versions, deadline) -> dict[int, _Answer]:
        """Send every shard's request, then read every answer; retry broken shards."""
        requests = {s: protocol.encode_request(k, versions[s]) for s, k in shard_keys.items()}
        sent: dict[int, socket.socket | None] = {}
        for s, request in requests.items():
            try:
                sock = self._socket(s, deadline)
                sock.sendall(request)
                sent[s] = sock
            except OSError:
                self._drop(s)
                sent[s] = None
        answers: dict[int, _Answer] = {}
        try:
            for s, sock in sent.items():
                answers[s] = self._answer(
                    s, sock, requests[s], versions[s], deadline, len(shard_keys[s])
                )
        except BaseException:
            for s in sent:  # answers not read yet must not be read by the next seek
                if s not in answers:
                    self._drop(s)
            raise
        return answers

    def _answer(self, s, sock, request, version, deadline, keys) -> _Answer:
        node = self.conf.nodes[s]
        error: Exception | None = None
        resend = sock is None
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
            try:
                if sock is None:
                    sock = self._socket(s, deadline)
                if resend:
                    sock.sendall(request)
                resend = True  # every further attempt sends the request again
                answer = self._read(sock, deadline, keys)
            except (OSError, protocol.ProtocolError) as err:
                self._drop(s)
                sock, error = None, err
                if time.monotonic() >= deadline:
                    break
                continue
            status = answer.header.status
            if status == protocol.OK:
                return answer
            message = bytes(answer.body).decode("utf-8", "replace")
            where = f"shard {s} ({node.ip}:{node.port})"
            if status == protocol.UNKNOWN_VERSION:
                raise CubeVersionError(f"{where}: {message}")
            if status == protocol.NOT_READY:
                error = CubeUnavailable(f"{where}: {message}")
                time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
                continue
            raise CubeRequestError(f"{where}: {message}")
        if isinstance(error, CubeUnavailable):
            raise error
        pinned = "" if version is None else f" (version {version})"
        raise CubeUnavailable(
            f"shard {s} at {node.ip}:{node.port} did not answer{pinned} after "
            f"{self.retries + 1} attempts within {self.timeout}s: {error}"
        )

    def _read(self, sock: socket.socket, deadline: float, keys: int) -> _Answer:
        """One answer; sized for `keys` values of the last dimension seen, so that most
        answers arrive in one buffer with as few receive calls as possible."""
        head = protocol.RESPONSE_HEADER.size
        buf = bytearray(head + keys * (self.dim or 0) * 4 + (keys + 7) // 8)
        got = self._fill(sock, buf, 0, head, deadline)
        header = protocol.decode_header(buf)
        total = head + header.body_bytes
        if got > total:
            raise protocol.ProtocolError(f"{got - total} bytes more than the answer announced")
        if total != len(buf):
            resized = bytearray(total)
            resized[:got] = buf[:got]
            buf = resized
        self._fill(sock, buf, got, total, deadline)
        return _Answer(header, memoryview(buf)[head:])

    @staticmethod
    def _fill(sock: socket.socket, buf: bytearray, got: int, need: int, deadline: float) -> int:
        """Receive into buf[got:] until at least `need` bytes are there; the count."""
        with memoryview(buf) as view:
            while got < need:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("timed out waiting for the answer")
                sock.settimeout(remaining)
                k = sock.recv_into(view[got:])
                if k == 0:
                    raise ConnectionError("connection closed by the server")
                got += k
        return got

    def _socket(self, s: int, deadline: float) -> socket.socket:
        pool = self._local.__dict__.setdefault("sockets", {})
        sock = pool.get(s)
        if sock is None:
            node = self.conf.nodes[s]
            timeout = max(0.001, deadline - time.monotonic())
            sock = socket.create_connection((node.ip, node.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pool[s] = sock
            with self._lock:
                self._sockets.append(sock)
        return sock

    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def _drop(self, s: int) -> None:
        pool = self._local.__dict__.setdefault("sockets", {})
        sock = pool.pop(s, None)
        if sock is not None:
            sock.close()
            with self._lock:
                if sock in self._sockets:
                    self._sockets.remove(sock)
