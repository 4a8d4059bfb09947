"""Benchmark: cube-server vs Redis MGET, same keys and values, same load generator.

    .venv/bin/python bench/cube_vs_redis.py            # 1M keys, 40-byte values, c=1,4,8,16
    .venv/bin/python bench/cube_vs_redis.py --baseline-bin /tmp/old/cube-server --json-seek

Loads N random uint64 keys with float32 values (40 bytes = 10 floats) into one
cube-server (built from a SequenceFile by the real builder) and into a redis-server
(persistence off, keys as their 8 raw bytes), both on loopback. Then, for each
concurrency, drives both with bench/cube_loadgen.py (batches of 1000 keys; cube via its
client library, Redis via redis-py + hiredis MGET) and prints keys/s, p50/p99 latency,
CPU per request and the ratio. `--baseline-bin` measures another build of cube-server
(say, main's, to compare a change) on the same shard file in the same alternation;
`--json-seek` adds rows for the HTTP/JSON seek (Paddle's Python client's path). Also
prints the cube-server's resident memory against the
raw key + value bytes. Needs `redis-server` (Debian: apt-get install -y redis-server)
and cargo. Results and their reading are in docs/cube.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [
    str(HERE),
    str(HERE.parent / "images" / "cube"),
    str(HERE.parent / "images" / "common"),
]

import cube_loadgen  # noqa: E402
import cube_servers  # noqa: E402


def table(n: int, dim: int, seed: int = 0) -> tuple[cube_loadgen.Keys, cube_loadgen.Values]:
    rng = np.random.default_rng(seed)
    keys = np.unique(
        rng.integers(0, 2**64 - 1, int(n * 1.001) + 16, dtype=np.uint64, endpoint=True)
    )
    keys = rng.permutation(keys)[:n]
    return keys, rng.standard_normal((n, dim)).astype(np.float32)


def check_same_answers(
    targets: Iterable[cube_loadgen.Target], keys: cube_loadgen.Keys, values: cube_loadgen.Values
) -> None:
    sample = np.random.default_rng(9).choice(len(keys), 1000, replace=False)
    for target in targets:
        got = cube_loadgen.fetcher(target)(cube_loadgen.batch_for(target, keys[sample]))
        if not np.array_equal(got, values[sample]):
            raise SystemExit(f"{target.kind} does not return the loaded values")


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=40, help="a multiple of 4 (float32)")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--concurrency", default="1,4,8,16")
    p.add_argument("--seconds", type=float, default=5.0, help="measured time per run")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=1, help="sweeps; then medians are printed")
    p.add_argument("--json", help="also write the results to this file")
    p.add_argument("--baseline-bin", help="another cube-server build, measured alike")
    p.add_argument("--json-seek", action="store_true", help="also measure the JSON seek")
    args = p.parse_args()
    dim = args.value_bytes // 4
    keys, values = table(args.keys, dim)
    raw_bytes = args.keys * (8 + args.value_bytes)
    cube_proc = redis_proc = base_proc = None
    with tempfile.TemporaryDirectory(prefix="cube-bench-") as tmp:
        try:
            cube_proc, cube_port, cube_info = cube_servers.start_cube(Path(tmp), keys, values)
            redis_proc, redis_port, redis_info = cube_servers.start_redis(keys, values)
            redis_t = cube_loadgen.Target("redis", "127.0.0.1", redis_port, dim)
            variants = {"": (cube_port, cube_proc)}
            if args.baseline_bin:
                base_proc, base_port, _ = cube_servers.start_cube(
                    Path(tmp), keys, values, args.baseline_bin
                )
                variants["baseline"] = (base_port, base_proc)
            # (label, target, process): the binary protocol, then the JSON seek if asked
            cubes = [
                (f"{'json ' if kind == 'cube-json' else ''}{build}".strip(), target, proc)
                for kind in ["cube", *(["cube-json"] if args.json_seek else [])]
                for build, (port, proc) in variants.items()
                for target in [cube_loadgen.Target(kind, "127.0.0.1", port, dim)]
            ]
            check_same_answers([t for _, t, _ in cubes] + [redis_t], keys, values)
            rss = cube_servers.rss_bytes(cube_proc.pid)
            print(
                f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
                f"redis {redis_info['version']}"
            )
            print(
                f"{args.keys} keys x {args.value_bytes}-byte values, batches of {args.batch}, "
                f"{args.seconds:g}s measured per run after {args.warmup:g}s warm-up"
            )
            print(
                f"cube: build {cube_info['build_s']:.2f}s, load {cube_info['load_s']:.3f}s, "
                f"shard file {cube_info['file_bytes'] / 1e6:.1f} MB"
            )
            runs = []
            levels = [int(x) for x in args.concurrency.split(",")]
            for repeat in range(args.repeat):
                for c in levels:
                    # cube variants first, then Redis, then the rows (each against that Redis)
                    measured = [
                        (label, measure(t, proc, keys, c, args)) for label, t, proc in cubes
                    ]
                    redis_result = measure(redis_t, redis_proc, keys, c, args)
                    for label, result in measured:
                        row: dict[str, Any] = {
                            "concurrency": c,
                            "variant": label,
                            "repeat": repeat,
                            "cube": result,
                            "redis": redis_result,
                            "ratio": result["keys_per_s"] / redis_result["keys_per_s"],
                        }
                        runs.append(row)
                        print_row(row, header=len(runs) == 1)
            if args.repeat > 1:
                print(f"\nmedians of {args.repeat} runs:")
                for n, (c, (label, _, _)) in enumerate((c, v) for c in levels for v in cubes):
                    print_row(
                        median_row(
                            [r for r in runs if r["concurrency"] == c and r["variant"] == label]
                        ),
                        header=n == 0,
                    )
            rss_after = cube_servers.rss_bytes(cube_proc.pid)
            print(
                f"cube-server resident memory: {rss / 1e6:.1f} MB after load, "
                f"{rss_after / 1e6:.1f} MB after the runs; "
                f"raw keys + values {raw_bytes / 1e6:.1f} MB -> "
                f"{max(rss, rss_after) / raw_bytes:.2f}x"
            )
            print(
                f"redis used_memory after load: {redis_info['used_memory'] / 1e6:.1f} MB "
                f"({redis_info['used_memory'] / raw_bytes:.2f}x raw)"
            )
        finally:
            cube_servers.stop(cube_proc)
            cube_servers.stop(redis_proc)
            cube_servers.stop(base_proc)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "runs": runs,
                    "cube": cube_info,
                    "cube_rss": max(rss, rss_after),
                    "raw_bytes": raw_bytes,
                    "redis": redis_info,
                },
                indent=1,
            )
        )
    return 0


def measure(
    target: cube_loadgen.Target,
    proc: subprocess.Popen[bytes],
    keys: cube_loadgen.Keys,
    concurrency: int,
    args: argparse.Namespace,
) -> dict[str, float]:
    cpu0 = cube_servers.cpu_seconds(proc.pid)
    result = cube_loadgen.run(
        target,
        keys,
        concurrency=concurrency,
        batch=args.batch,
        seconds=args.seconds,
        warmup=args.warmup,
    )
    # the server's CPU covers the warm-up too: spread it over every request of the run
    total = max(1.0, result["requests"] * (args.seconds + args.warmup) / args.seconds)
    result["server_cpu_us_per_req"] = (cube_servers.cpu_seconds(proc.pid) - cpu0) / total * 1e6
    result["client_cpu_us_per_req"] = result["client_cpu_s"] / total * 1e6
    return result


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"concurrency": rows[0]["concurrency"], "variant": rows[0]["variant"]}
    for name in ("cube", "redis"):
        out[name] = {k: float(np.median([r[name][k] for r in rows])) for k in rows[0][name]}
    out["ratio"] = out["cube"]["keys_per_s"] / out["redis"]["keys_per_s"]
    return out


def print_row(row: dict[str, Any], header: bool) -> None:
    if header:
        print(
            "| concurrency | cube keys/s | cube p50 / p99 ms | cube CPU µs/req server+client "
            "| redis keys/s | redis p50 / p99 ms | redis CPU µs/req server+client | cube / redis |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    cells = [" ".join(str(x) for x in (row["concurrency"], row["variant"]) if x)]
    for name in ("cube", "redis"):
        r = row[name]
        cells += [
            f"{r['keys_per_s'] / 1e6:.2f} M",
            f"{r['p50_ms']:.2f} / {r['p99_ms']:.2f}",
            f"{r['server_cpu_us_per_req']:.0f} + {r['client_cpu_us_per_req']:.0f}",
        ]
    cells.append(f"{row['ratio']:.1f}x")
    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
