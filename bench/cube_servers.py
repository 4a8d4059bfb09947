"""Servers for bench/cube_vs_redis.py: cube-server and redis-server as child processes on
loopback, loaded with the same keys and values, stopped by PID."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from elasticctr_common.ports import free_port
from elasticctr_common.seqfile import write_sequence_file
from elasticctr_cube.builder import build
from elasticctr_cube.httpjson import call
from elasticctr_cube.manifest import shard_file_name
from elasticctr_cube.server import build_server

TICKS = os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


def start_cube(
    work: Path,
    keys: npt.NDArray[np.uint64],
    values: npt.NDArray[np.float32],
    binary: str | None = None,
) -> tuple[subprocess.Popen[bytes], int, dict[str, float]]:
    """SequenceFile -> builder (1 shard) -> cube-server; returns (process, port, timings).
    `binary`: another build of cube-server (a baseline), else this checkout's; a second
    call with the same `work` reuses the shard file."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    binary = binary or build_server()
    timings["cargo_build_s"] = time.perf_counter() - t
    sparse = work / "sparse"
    shard_file = work / "cube" / shard_file_name(0)
    if not shard_file.exists():
        sparse.mkdir(parents=True)
        t = time.perf_counter()
        write_sequence_file(sparse / "part-00000", (keys, values))
        timings["seqfile_write_s"] = time.perf_counter() - t
        t = time.perf_counter()
        build(f"file://{sparse}", work / "cube", version=1, shard_num=1)
        timings["build_s"] = time.perf_counter() - t
    port, control = free_port(), free_port()
    proc = subprocess.Popen(
        [binary, "--shard", "0", "--shard-num", "1", "--host", "127.0.0.1", "--port", str(port),
         "--control-port", str(control)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wait_port(port, proc, "cube-server")
    t = time.perf_counter()
    call(
        "POST", f"http://127.0.0.1:{control}/control/load", {"version": 1, "path": str(shard_file)}
    )
    while call("GET", f"http://127.0.0.1:{port}/control/status")[1]["bg_version"] != 1:
        time.sleep(0.01)
    call("POST", f"http://127.0.0.1:{control}/control/switch", {"version": 1})
    timings["load_s"] = time.perf_counter() - t
    timings["file_bytes"] = shard_file.stat().st_size
    return proc, port, timings


def start_redis(
    keys: npt.NDArray[np.uint64], values: npt.NDArray[np.float32]
) -> tuple[subprocess.Popen[bytes], int, dict[str, Any]]:
    """redis-server on loopback, persistence off, loaded by pipelined MSETs."""
    import redis

    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit("redis-server is not installed: apt-get install -y redis-server")
    port = free_port()
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
        ],
        stdout=subprocess.DEVNULL,
    )
    wait_port(port, proc, "redis-server")
    t = time.perf_counter()
    r = redis.Redis(port=port)
    key_blob, value_blob = keys.astype("<u8").tobytes(), values.astype("<f4").tobytes()
    width = values.shape[1] * 4
    pipe = r.pipeline(transaction=False)
    for start in range(0, len(keys), 10_000):
        end = min(start + 10_000, len(keys))
        pipe.mset(
            {
                key_blob[i * 8 : i * 8 + 8]: value_blob[i * width : (i + 1) * width]
                for i in range(start, end)
            }
        )
        if len(pipe) >= 10:
            pipe.execute()
    pipe.execute()
    if r.dbsize() != len(keys):
        raise RuntimeError(f"redis holds {r.dbsize()} keys, {len(keys)} were loaded")
    info = r.info("memory")
    version = r.info("server")["redis_version"]
    r.close()
    return (
        proc,
        port,
        {"load_s": time.perf_counter() - t, "used_memory": info["used_memory"], "version": version},
    )


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
