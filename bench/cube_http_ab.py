"""A/B of cube-server's HTTP/JSON seek path between two builds, server side only.

    git worktree add --detach /tmp/wt-before main   # then cargo build --release there
    .venv/bin/python bench/cube_http_ab.py \
        --baseline-bin /tmp/wt-before/images/cube/server/target/release/cube-server

Both builds serve the same shard file (1M keys, 40-byte values, built as in
bench/cube_vs_redis.py); one raw HTTP/1.1 client on a kept-alive connection sends
pre-encoded `POST /DictService/seek` requests of 1000 keys and reads each answer by its
Content-Length without decoding it, so the client costs little and the server's work
(parse the head and the JSON keys, look up, base64 and write the answer) is what is
timed. The builds take turns, `--rounds` times, each for `--seconds`; prints requests/s
and the server's CPU per request (from /proc), median, min and max. cube_vs_redis.py
--json-seek measures the same path through a real client, whose JSON and base64
decoding cost more than the server and drown a change of the server in noise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [
    str(HERE),
    str(HERE.parent / "images" / "cube"),
    str(HERE.parent / "images" / "common"),
]

import cube_loadgen  # noqa: E402
import cube_servers  # noqa: E402
import cube_vs_redis  # noqa: E402


def requests(keys: cube_loadgen.Keys, batch: int, count: int) -> list[bytes]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(count):
        body = json.dumps({"keys": rng.choice(keys, batch).tolist()}).encode()
        head = (
            "POST /DictService/seek HTTP/1.1\r\nHost: cube\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        out.append(head.encode() + body)
    return out


def drive(port: int, reqs: list[bytes], seconds: float) -> int:
    """Requests answered in `seconds`, one at a time on one connection."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answers = sock.makefile("rb")
        done, stop_at = 0, time.monotonic() + seconds
        while time.monotonic() < stop_at:
            sock.sendall(reqs[done % len(reqs)])
            status, length = answers.readline(), 0
            if b" 200 " not in status:
                raise RuntimeError(f"cube-server answered {status!r}")
            while (line := answers.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            answers.read(length)
            done += 1
        return done


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--baseline-bin", required=True, help="the other cube-server build")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    keys, values = cube_vs_redis.table(args.keys, 10)
    reqs = requests(keys, args.batch, 32)
    results: dict[str, list[tuple[float, float]]] = {"this checkout": [], "baseline": []}
    procs = []
    with tempfile.TemporaryDirectory(prefix="cube-http-ab-") as tmp:
        try:
            servers = {}
            for name, binary in (("this checkout", None), ("baseline", args.baseline_bin)):
                proc, port, _ = cube_servers.start_cube(Path(tmp), keys, values, binary)
                procs.append(proc)
                servers[name] = (proc, port)
            print(f"load average {os.getloadavg()[0]:.2f}")
            for r in range(args.rounds):
                order = list(servers.items()) if r % 2 == 0 else list(servers.items())[::-1]
                for name, (proc, port) in order:
                    cpu0, t0 = cube_servers.cpu_seconds(proc.pid), time.monotonic()
                    done = drive(port, reqs, args.seconds)
                    cpu = cube_servers.cpu_seconds(proc.pid) - cpu0
                    results[name].append((done / (time.monotonic() - t0), cpu / done * 1e6))
        finally:
            for proc in procs:
                cube_servers.stop(proc)
    for name, rows in results.items():
        rates, cpus = [r[0] for r in rows], [r[1] for r in rows]
        rate = f"{np.median(rates):.0f} (min {min(rates):.0f}, max {max(rates):.0f})"
        cpu_us = f"{np.median(cpus):.0f} (min {min(cpus):.0f}, max {max(cpus):.0f})"
        print(f"{name}: {rate} requests/s; server CPU {cpu_us} µs/request")
    return 0


if __name__ == "__main__":
    sys.exit(main())
