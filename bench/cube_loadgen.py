"""The load generator of bench/cube_vs_redis.py: the same loop drives cube and Redis.

`concurrency` worker processes (one connection each, so neither side is limited by the
GIL of one client) repeat: take the next pre-generated batch of keys, fetch their values
with the target's real client library, turn the answer into a float32 matrix [batch, dim]
(what serving needs), and time the whole call. Batches are drawn at random from the
loaded keys before the clock starts. Only calls that start inside the measured window
(after a warm-up) count.

Targets: "cube" = elasticctr_common.cube.client.CubeClient.seek (binary protocol, one shard);
"cube-json" = `POST /DictService/seek` with a JSON body on one kept-alive HTTP/1.1
connection, base64 values decoded (what Paddle Serving's Python client sends: the HTTP
and base64 path of cube-server); "redis" = redis-py `mget` with the hiredis parser
(hiredis also packs the command).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Keys = npt.NDArray[np.uint64]
Values = npt.NDArray[np.float32]
# A batch as the target's client takes it: a uint64 array, or Redis's 8-byte keys.
Batch = Keys | list[bytes]
Fetch = Callable[[Any], Values]


@dataclass(frozen=True)
class Target:
    kind: str  # "cube", "cube-json" or "redis"
    host: str
    port: int
    dim: int


def fetcher(target: Target) -> Fetch:
    if target.kind == "cube":
        from elasticctr_common.cube.client import CubeClient
        from elasticctr_common.cube.conf import CubeConf, CubeNode

        client = CubeClient(CubeConf("bench", 1, (CubeNode(target.host, target.port),)), timeout=10)

        def fetch(batch: Keys) -> Values:
            return client.seek(batch).values

        return fetch
    if target.kind == "cube-json":
        return _json_fetcher(target)
    import redis

    r = redis.Redis(host=target.host, port=target.port, socket_timeout=10)

    def fetch_redis(batch: list[bytes]) -> Values:
        values: list[bytes] = r.mget(batch)  # type: ignore[assignment]
        return np.frombuffer(b"".join(values), "<f4").reshape(len(values), target.dim)

    return fetch_redis


def _json_fetcher(target: Target) -> Fetch:
    import base64
    import http.client
    import json

    conn = http.client.HTTPConnection(target.host, target.port, timeout=10)

    def fetch(batch: Keys) -> Values:
        conn.request("POST", "/DictService/seek", json.dumps({"keys": batch.tolist()}))
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"cube-json: HTTP {answer.status}: {body[:200]!r}")
        values = json.loads(body)["values"]
        raw = b"".join(base64.b64decode(v["value"]) for v in values)
        return np.frombuffer(raw, "<f4").reshape(len(values), target.dim)

    return fetch


def batch_for(target: Target, keys: npt.ArrayLike) -> Batch:
    """Keys as the target's client takes them: a uint64 array, or Redis's 8-byte keys."""
    array: Keys = np.asarray(keys, dtype="<u8")
    if target.kind != "redis":
        return array
    blob = array.tobytes()
    return [blob[i : i + 8] for i in range(0, len(blob), 8)]


def _batches(target: Target, keys: Keys, batch: int, count: int, seed: int) -> list[Batch]:
    rng = np.random.default_rng(seed)
    return [batch_for(target, rng.choice(keys, batch)) for _ in range(count)]


def _worker(
    target: Target,
    keys: Keys,
    batch: int,
    seed: int,
    start_at: float,
    measure_from: float,
    stop_at: float,
    results: mp.Queue[tuple[list[float], float]],
) -> None:
    fetch = fetcher(target)
    batches = _batches(target, keys, batch, 64, seed)
    fetch(batches[0])  # connect before the clock starts
    while time.time() < start_at:
        time.sleep(0.001)
    latencies: list[float] = []
    i = 0
    cpu0 = time.process_time()
    while True:
        t0 = time.time()
        if t0 >= stop_at:
            break
        values = fetch(batches[i % len(batches)])
        t1 = time.time()
        if values.shape[0] != batch:
            raise RuntimeError(f"{target.kind}: got {values.shape[0]} values for {batch} keys")
        if t0 >= measure_from:
            latencies.append(t1 - t0)
        i += 1
    results.put((latencies, time.process_time() - cpu0))


def run(
    target: Target, keys: Keys, *, concurrency: int, batch: int, seconds: float, warmup: float
) -> dict[str, float]:
    """Drive `target` with `concurrency` processes; throughput and latency of the window."""
    ctx = mp.get_context("fork")
    results: mp.Queue[tuple[list[float], float]] = ctx.Queue()
    start_at = time.time() + 1.0 + 0.05 * concurrency
    measure_from, stop_at = start_at + warmup, start_at + warmup + seconds
    workers = [
        ctx.Process(
            target=_worker,
            args=(target, keys, batch, 1000 + w, start_at, measure_from, stop_at, results),
        )
        for w in range(concurrency)
    ]
    for w in workers:
        w.start()
    try:
        collected = [results.get(timeout=seconds + warmup + 60) for _ in workers]
    finally:
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
    latencies = np.concatenate([np.asarray(lat) for lat, _ in collected])
    requests = len(latencies)
    client_cpu = sum(cpu for _, cpu in collected)
    return {
        "requests": requests,
        "keys_per_s": requests * batch / seconds,
        "p50_ms": float(np.percentile(latencies, 50) * 1e3) if requests else float("nan"),
        "p99_ms": float(np.percentile(latencies, 99) * 1e3) if requests else float("nan"),
        "client_cpu_s": client_cpu,
    }
