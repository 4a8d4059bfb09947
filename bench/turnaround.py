"""Model turnaround at table size: from trainer 0's export start to every cube shard
serving the new version, per stage, for tables of N keys (embedding dim 9).

    PYTHONPATH=images/trainer:images/common:images/cube nice -n 10 .venv/bin/python \
        bench/turnaround.py [--quick] [--keys 1000000,10000000] [--shards 3]

Stages, each the project's own code in its own process:
- export: trainer 0's `prepare_version` (pull every key from a real pserver holding N
  trained keys) + `publish_version` (SequenceFiles, file://) (turnaround_export.py);
  above `--export-max` keys the SequenceFiles are written by this script instead and the
  stage is not measured (a pserver of 10^8 keys needs ~12 GiB: pass
  `--export-max 100000000` on a machine that has it);
- build: `python -m elasticctr_cube builder` (SequenceFiles -> shard files, published);
- fetch, verify, load: every shard's agent at once (`/agent/prepare`), each step's time
  from the agent's own prepare states, the slowest shard counted;
- switch: every agent's `/agent/switch`, then a seek on every shard answering at V.

Peak resident memory per process (VmHWM, or the child's rusage) and keys/s per stage.

With `--delta F` (e.g. 0.01), each size then pushes a delta of that fraction of the keys on
top of the full version, stage by stage the same way: the export is trainer 0's delta
export (the table pulled whole and compared with its snapshot; the pserver's second pass
pushes every 1/F-th key), or above `--export-max` delta SequenceFiles written here (every
1/F-th key changed, every (10/F)-th key + 1 deleted); the build is `builder --parent`; the
agents apply the delta on the version their servers hold. *push* is what follows the
export (build, fetch, verify, load, switch): the time from the delta's publication to every
shard serving it. The servers' resident memory is read after each switch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from elasticctr_common.ports import free_ports

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DIM = 9
PART_RECORDS = 1_000_000


def python_env(code: Path) -> dict[str, str]:
    """The environment of a stage's process: the images' packages of the checkout `code`."""
    paths = [str(code / "images" / p) for p in ("trainer", "common", "cube")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "TRAINING_ROLE"))}
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_child(command: list[str], code: Path) -> tuple[float, float, str]:
    """(seconds, peak RSS MiB from its own rusage, stdout) of a child process."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, env=python_env(code), stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise RuntimeError(f"{command[1:4]} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        return seconds, usage.ru_maxrss / 1024, out.read()


def write_delta_files(directory: Path, keys: int, fraction: float) -> tuple[int, int]:
    """A delta export of keys 1..`keys`: every (1/fraction)-th key with new values, every
    (10/fraction)-th key + 1 deleted; (changed, deleted)."""
    import numpy as np
    from elasticctr_common.seqfile import SequenceFileWriter
    from elasticctr_common.versions import DELETED, deleted_keys_bytes

    directory.mkdir(parents=True)
    step = max(1, round(1 / fraction))
    changed = np.arange(1, keys + 1, step, dtype=np.uint64)
    deleted = np.arange(2, keys + 1, 10 * step, dtype=np.uint64)
    values = np.random.default_rng(2).standard_normal((len(changed), DIM), dtype=np.float32)
    with open(directory / "part-00000", "wb") as out:
        SequenceFileWriter(out).write_arrays(changed, values)
    (directory / DELETED).write_bytes(deleted_keys_bytes(deleted))
    return len(changed), len(deleted)


def write_sequence_files(directory: Path, keys: int) -> None:
    """Keys 1..`keys` with random vectors, in 1M-record parts (the export's layout)."""
    import numpy as np
    from elasticctr_common.seqfile import SequenceFileWriter

    directory.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for part, start in enumerate(range(1, keys + 1, PART_RECORDS)):
        ids = np.arange(start, min(start + PART_RECORDS, keys + 1), dtype=np.uint64)
        values = rng.standard_normal((len(ids), DIM), dtype=np.float32)
        with open(directory / f"part-{part:05d}", "wb") as out:
            SequenceFileWriter(out).write_arrays(ids, values)


class Cube:
    """Native cube-servers and their agents, one per shard, on loopback."""

    def __init__(self, work: Path, shards: int, code: Path) -> None:
        from elasticctr_cube.server import build_server

        binary = build_server()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: list[tuple[int, int]] = []  # (server data port, agent port)
        for i in range(shards):
            port, control, agent = free_ports(3)
            shard = ["--shard", str(i), "--shard-num", str(shards)]
            self.procs[f"server-{i}"] = subprocess.Popen(
                [binary, *shard, "--host", "127.0.0.1", "--port", str(port),
                 "--control-port", str(control)], stderr=subprocess.DEVNULL,
            )  # fmt: skip
            self.procs[f"agent-{i}"] = subprocess.Popen(
                [sys.executable, "-m", "elasticctr_cube", "agent", *shard, "--host", "127.0.0.1",
                 "--port", str(agent), "--cube-uri", f"file://{work}/cube",
                 "--server", f"http://127.0.0.1:{control}", "--data-dir", str(work / f"shard-{i}")],
                env=python_env(code), stderr=subprocess.DEVNULL,
            )  # fmt: skip
            self.ports.append((port, agent))
        try:
            for _, agent in self.ports:
                self.wait_ok(f"http://127.0.0.1:{agent}/healthz")
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def wait_ok(url: str, timeout: float = 30.0) -> None:
        from elasticctr_cube.httpjson import HttpCallError, call

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if call("GET", url, None, 2.0)[0] == 200:
                    return
            except HttpCallError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{url} did not answer")

    def roll_out(self, version: int, previous: int | None) -> dict[str, float]:
        """Prepare on every agent at once, then switch, then seek every shard at V."""
        from elasticctr_cube.httpjson import call

        agents = [f"http://127.0.0.1:{a}" for _, a in self.ports]
        started = time.perf_counter()
        for agent in agents:
            call("POST", f"{agent}/agent/prepare", {"version": version})
        seen: list[dict[str, float]] = [{} for _ in agents]
        while not all("ready" in s for s in seen):
            for agent, states in zip(agents, seen, strict=True):
                prepare = call("GET", f"{agent}/agent/status")[1]["prepares"].get(str(version), {})
                if prepare.get("state") in ("failed", "aborted"):
                    raise RuntimeError(f"{agent}: prepare {version}: {prepare.get('error')}")
                states.setdefault(prepare.get("state", "queued"), time.perf_counter())
            time.sleep(0.02)
        prepared = time.perf_counter()
        for agent in agents:
            call("POST", f"{agent}/agent/switch", {"version": version})
        for port, _ in self.ports:
            answer = call("POST", f"http://127.0.0.1:{port}/DictService/seek", {"keys": [1]})[1]
            if answer["version"] != version:
                raise RuntimeError(f"shard on {port} answers version {answer['version']}")
        answered = time.perf_counter()
        if previous is not None:  # the server holds two versions: make room for the next
            for agent in agents:
                call("POST", f"{agent}/agent/unload", {"version": previous})

        def step(s: dict[str, float], a: str, b: str) -> float:
            return s.get(b, s["ready"]) - s.get(a, started)

        return {
            "fetch_s": max(step(s, "fetching", "verifying") for s in seen),
            "verify_s": max(step(s, "verifying", "loading") for s in seen),
            "load_s": max(step(s, "loading", "ready") for s in seen),
            "prepare_s": prepared - started,
            "switch_s": answered - prepared,
        }

    def peak_rss_mib(self) -> dict[str, float]:
        return {name: peak_rss_mib(p.pid) for name, p in self.procs.items()}

    def servers_rss_mib(self) -> float:
        """The largest resident set of the cube-servers now."""
        return max(rss_mib(p.pid) for name, p in self.procs.items() if name.startswith("server"))

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            proc.wait(timeout=30)


def measure(work: Path, cube: Cube, keys: int, version: int, export_max: int,
            shards: int, code: Path, delta: float | None) -> list[dict[str, Any]]:  # fmt: skip
    """The full push of `version`, and with `delta` the delta push of `version + 1` on it."""
    row: dict[str, Any] = {"keys": keys, "kind": "full"}
    rows = [row]
    root = work / f"size-{keys}"
    delta_row: dict[str, Any] = {"keys": keys, "kind": f"delta {delta:.0%}" if delta else ""}
    if keys <= export_max:
        extra = ["--delta", str(delta)] if delta else []
        _, _, out = run_child(
            [sys.executable, str(BENCH / "turnaround_export.py"), "--keys", str(keys),
             "--work", str(root), *extra], code,
        )  # fmt: skip
        exports = 2 if delta else 1  # the full export's line, then the delta's
        results = [json.loads(line) for line in out.strip().splitlines()[-exports:]]
        for r, result in zip([row, delta_row], results, strict=False):
            r.update(export_s=result["dump_s"] + result["write_s"], dump_s=result["dump_s"],
                     write_s=result["write_s"], export_rss_mib=result["peak_rss_kib"] / 1024,
                     pserver_rss_mib=result["pserver_rss_kib"] / 1024,
                     input=Path(result["input"].removeprefix("file://")),
                     changed=result["written_keys"])  # fmt: skip
        if delta:
            delta_row["deleted"] = len(
                (delta_row["input"] / "_deleted").read_bytes()) // 8  # fmt: skip
    else:
        row["input"] = root / "sparse"
        write_sequence_files(row["input"], keys)
        if delta:
            delta_row["input"] = root / "delta"
            delta_row["changed"], delta_row["deleted"] = write_delta_files(
                delta_row["input"], keys, delta)  # fmt: skip
    push(work, cube, row, version, shards, code, None)
    if delta:
        push(work, cube, delta_row, version + 1, shards, code, version)
        rows.append(delta_row)
    shutil.rmtree(root, ignore_errors=True)
    return rows


def push(work: Path, cube: Cube, row: dict[str, Any], version: int, shards: int, code: Path,
         parent: int | None) -> None:  # fmt: skip
    """Build `row["input"]` as `version` (a delta on `parent`), roll it out, time it."""
    extra = [] if parent is None else ["--parent", str(parent)]
    seconds, rss, out = run_child(
        [sys.executable, "-m", "elasticctr_cube", "builder", "--input", f"file://{row.pop('input')}",
         "--output", f"file://{work}/cube/shards-{shards}", "--version", str(version),
         "--shards", str(shards), "--dim", str(DIM), *extra], code,
    )  # fmt: skip
    # The build and publish as the transfer runs them (in its own process): the builder's
    # own figure, without the interpreter's start and imports (build_process_s).
    built = float(re.search(r" in ([0-9.]+)s$", out.strip()).group(1))  # type: ignore[union-attr]
    row.update(build_s=built, build_process_s=seconds, build_rss_mib=rss)
    row.update(cube.roll_out(version, version - 1 if version > 1 else None))
    row["server_rss_mib"] = cube.servers_rss_mib()
    row["push_s"] = sum(row[s] for s in ("build_s", "prepare_s", "switch_s"))
    row["total_s"] = row["push_s"] + row.get("export_s", 0.0)
    row["keys_per_s"] = row["keys"] / row["total_s"]


def main() -> None:
    args = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    args.add_argument("--quick", action="store_true", help="CI-sized: 10^5 and 10^6 keys")
    args.add_argument("--keys", default="1000000,10000000")
    args.add_argument("--shards", type=int, default=3)
    args.add_argument("--code", type=Path, default=REPO,
                      help="checkout whose images' code runs the stages")  # fmt: skip
    args.add_argument("--export-max", type=int, default=10_000_000,
                      help="largest table exported from a real pserver")  # fmt: skip
    args.add_argument("--delta", type=float,
                      help="then push a delta changing this fraction of the keys")  # fmt: skip
    opts = args.parse_args()
    sizes = [100_000, 1_000_000] if opts.quick else [int(k) for k in opts.keys.split(",")]
    work = Path(tempfile.mkdtemp(prefix="elasticctr-turnaround-"))
    os.chdir(work)  # Paddle writes <id>_train_desc.prototxt files into the working directory
    cube = Cube(work, opts.shards, opts.code)  # stopped below, also when a stage fails
    rows = []
    try:
        version = 1
        for keys in sizes:
            measured = measure(work, cube, keys, version, opts.export_max, opts.shards,
                               opts.code, opts.delta)  # fmt: skip
            version += len(measured)
            for row in measured:
                rows.append(row)
                print(json.dumps(row), flush=True)
        servers = cube.peak_rss_mib()
    finally:
        cube.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(rows, servers, opts.shards)


def report(rows: list[dict[str, Any]], servers: dict[str, float], shards: int) -> None:
    def cell(row: dict[str, Any], key: str) -> str:
        return f"{row[key]:.2f}" if key in row else "-"

    print(f"\n{shards} shards, embedding dim {DIM}; seconds (keys/s of the stage)\n")
    stages = ["dump_s", "write_s", "build_s", "fetch_s", "verify_s", "load_s", "switch_s"]
    print("| keys | push | changed / deleted | " + " | ".join(s.removesuffix("_s") for s in stages)
          + " | push (build..switch) | total | peak RSS MiB: export / pserver / builder "
          "| cube-server RSS MiB after |")  # fmt: skip
    print("|---:|---|---:|" + "---:|" * (len(stages) + 2) + "---|---:|")
    for row in rows:
        peaks = ("export_rss_mib", "pserver_rss_mib", "build_rss_mib")
        rss = " / ".join(f"{row[k]:,.0f}" if k in row else "-" for k in peaks)
        changes = f"{row['changed']:,} / {row['deleted']:,}" if "deleted" in row else "all"
        print(f"| {row['keys']:,} | {row['kind']} | {changes} | "
              + " | ".join(cell(row, s) for s in stages)
              + f" | **{row['push_s']:.2f}** | {row['total_s']:.2f} | {rss} "
              f"| {row['server_rss_mib']:,.0f} |")  # fmt: skip
    print("peak RSS MiB of the cube processes (all sizes): "
          + ", ".join(f"{k} {v:,.0f}" for k, v in servers.items()))  # fmt: skip
    last = [r for r in rows if r["kind"] == "full"][-1]
    print(f"turnaround/keys-per-second@{last['keys']:.0e}: {last['keys_per_s']:,.0f}")
    for row in rows:
        if row["kind"] != "full":
            print(f"turnaround/delta-push-seconds@{row['keys']:.0e}: {row['push_s']:.2f}")


if __name__ == "__main__":
    main()
