"""Serving latency and throughput with 3 cube shards on loopback (docs/serving.md).

    .venv/bin/python bench/serving_latency.py [--batches 1,64] [--concurrency 1,8,32]
        [--seconds 5] [--warmup 1] [--repeat 3] [--slots 26] [--fc 400,400,400]
        [--workers 1] [--max-wait-ms 2] [--variant 'LABEL[@TREE]:SERVING ARGS']...
        [--feedback [--compression none,lz4] [--broker-nice 19]] [--canary FRACTION]
        [--crosses 0,21]

Starts 3 cube-servers + agents + transfer and serving, publishes a synthetic model version
with the production architecture (26 slots, embedding_dim 9, FC 400-400-400, 100,000
trained keys) and drives `POST /ElasticCTRPredictionService/inference` with a closed-loop
load generator in its own process: `c` keep-alive connections, each sending its next
request as soon as the answer arrives; bodies pre-encoded (1-3 feasigns per slot), the
HTTP/1.1 exchange done on asyncio's protocol level (~50 µs of CPU per request, most of it
the kernel's loopback TCP; aiohttp's client took ~300). Per run: p50/p99 latency,
requests/s and examples/s, the mean predictor batch, CPU per example of serving, cube and
the load generator (from /proc and the generator's own clock), and where serving's time
went (its stage counters in /metrics).

Variants compare serving configurations, or code, in the same run: each `--variant`
starts one serving process (from TREE, another checkout, when given: `git worktree add`
or `git archive` of the old commit; its native request parser is built there first), and
every repetition runs every variant's cells in turn, so that all see the same machine.
Without `--variant`, one variant runs this tree with `--workers` and `--max-wait-ms`.
Medians over the repetitions are reported.
`--feedback` runs each variant twice, impression logging off and on (a real Kafka broker
on loopback, tools/kafka-broker.sh; every answered instance one record): the cost of the
feedback loop to serving, measured in one run (the broker at `--broker-nice`, 19 unless
given: in a stack the broker's pod has CPU limits of its own and serving its CPU request, so
the broker does not take serving's share as an equal process on these 2 cores would);
`--compression lz4,zstd` runs logging on once with each producer compression.
`--canary F` runs each variant twice too: off (serving follows the cube-servers, no
canary, nobody reads /metrics) and on (a version on trial scores the share F of requests,
its lookups pinned to it, and a scraper reads serving's /metrics every second: faster
than any stack's scrape interval), the transfer's canary kept on trial by a joiner
stand-in without figures.

References measured in each repetition, so that the figures read as ratios on a busy
machine: the bare predictor (Paddle Inference in this process, the same model and
options as serving, per call at batch 1, 8, 64) and the HTTP floor (`GET /healthz`
through the same load generator and concurrency: aiohttp alone, no work), plus the load
average.
`--crosses 0,21` runs each variant against models of that many crosses (pairs of the first 7
slots in order, as `training.crosses: auto` chooses every pair of 7 single-hot slots), each
model on a cube cluster of its own: the crossed slots get one feasign per instance, the others
1-3, and the table covers every key below sparse_dim (keys + 1 then), so that a crossed id
costs serving and cube what a found id does.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tests.support.serving import Serving

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)] + [str(REPO / "images" / p) for p in ("serving", "cube", "common")]
TICKS = os.sysconf("SC_CLK_TCK")
STAGES = ("parse", "queue", "cube", "pool", "predict")


class Scraper:
    """Reads `url`/metrics every second, as Prometheus would (faster)."""

    def __init__(self, url: str) -> None:
        import threading

        self.url, self.scrapes, self._stop = url, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from tests.support.serving import http

        while not self._stop.wait(1.0):
            http("GET", self.url + "/metrics")
            self.scrapes += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime, all threads


def scrape(url: str) -> dict[str, float]:
    from tests.support.serving import http

    text = http("GET", url + "/metrics")[1]
    found = {}
    for stage in STAGES:
        m = re.search(rf'stage_seconds_total{{stage="{stage}"}} (\S+)', text)
        found[stage] = float(m.group(1)) if m else 0.0
    for name in ("batches_total", "examples_total"):
        m = re.search(rf"^elasticctr_serving_{name} (\S+)", text, re.M)
        found[name] = float(m.group(1)) if m else 0.0
    return found


def bodies(
    slots: list[int], batch: int, keys: int, count: int = 64, single: int = 0
) -> list[bytes]:
    """Request bodies of `batch` instances: 1-3 feasigns per slot, one in the first
    `single` slots."""
    import numpy as np

    rng = np.random.default_rng(batch)
    out = []
    for _ in range(count):
        instances = []
        for _ in range(batch):
            counts = rng.integers(1, 4, len(slots))
            counts[:single] = 1
            instances.append(
                {
                    "slots": [
                        {"slot_name": str(s), "feasigns": rng.integers(1, keys * 2, n).tolist()}
                        for s, n in zip(slots, counts.tolist(), strict=True)
                    ]
                }
            )
        out.append(json.dumps({"instances": instances}).encode())
    return out


# -- the load generator (its own process) --------------------------------------------------
class _Connection(asyncio.Protocol):
    """One keep-alive connection: sends a request, reads the answer (Content-Length
    framing, as aiohttp answers), records the latency, sends the next."""

    def __init__(self, run: _Run, first: int) -> None:
        self.run, self.next = run, first
        self.buffer, self.need, self.status, self.sent = b"", -1, b"", 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send()

    def send(self) -> None:
        run = self.run
        self.sent = time.perf_counter()
        if self.sent >= run.stop_at:
            self.transport.close()
            return
        self.transport.write(run.requests[self.next % len(run.requests)])
        self.next += run.concurrency

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        if self.need < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return
            head = buffer[:end].lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                raise RuntimeError(f"an answer without Content-Length: {head[:200]!r}")
            line_end = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : line_end if line_end > 0 else len(head)])
            self.need, self.status = end + 4 + length, buffer[9:12]
        if len(buffer) < self.need:
            self.buffer = buffer
            return
        done = time.perf_counter()
        self.buffer, self.need = buffer[self.need :], -1
        self.run.record(self.sent, done, self.status == b"200")
        self.send()

    def connection_lost(self, exc: Exception | None) -> None:
        self.run.closed()


class _Run:
    def __init__(
        self, url: str, payloads: list[bytes], concurrency: int, warmup: float, seconds: float
    ) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        host = f"{self.host}:{self.port}".encode()
        path = parts.path.encode()
        if payloads:
            self.requests = [
                b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (path, host, len(p), p)
                for p in payloads
            ]
        else:
            self.requests = [b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)]
        self.concurrency, self.warmup, self.seconds = concurrency, warmup, seconds
        self.latencies: list[float] = []
        self.errors = 0
        self.open = concurrency

    def record(self, sent: float, done: float, ok: bool) -> None:
        if sent >= self.measure_from and done <= self.stop_at:
            self.latencies.append(done - sent)
            self.errors += not ok

    def closed(self) -> None:
        self.open -= 1
        if self.open == 0 and not self.finished.done():
            self.finished.set_result(None)

    async def go(self) -> float:
        """Run; the CPU seconds this process used in the measured window."""
        loop = asyncio.get_running_loop()
        self.finished = loop.create_future()
        start = time.perf_counter()
        self.measure_from = start + self.warmup
        self.stop_at = self.measure_from + self.seconds
        for i in range(self.concurrency):
            await loop.create_connection(partial(_Connection, self, i), self.host, self.port)
        await asyncio.sleep(max(0.0, self.measure_from - time.perf_counter()))
        cpu = time.process_time()
        await self.finished
        return time.process_time() - cpu


def loadgen_main(args: argparse.Namespace) -> None:
    payloads = [p for p in Path(args.bodies).read_bytes().split(b"\n") if p] if args.bodies else []
    run = _Run(args.url, payloads, args.c, args.warmup, args.seconds)
    cpu = asyncio.run(run.go())
    print(json.dumps({"latencies": run.latencies, "errors": run.errors, "cpu": cpu}))


def loadgen(
    url: str, concurrency: int, args: argparse.Namespace, body_file: Path | None = None
) -> subprocess.Popen[str]:
    command = [sys.executable, __file__, "--loadgen", "--url", url, "-c", str(concurrency),
               "--warmup", str(args.warmup), "--seconds", str(args.seconds)]  # fmt: skip
    if body_file is not None:
        command += ["--bodies", str(body_file)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


# -- the benchmark ------------------------------------------------------------------------
def renice(pid: int, nice: int) -> None:
    """Every thread of `pid` to `nice` (a nice value is a thread's own on Linux; the threads
    it starts later inherit it)."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(task), nice)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_one(
    serving: Serving,
    serving_pid: int,
    cube_pids: list[int],
    body_file: Path,
    batch: int,
    concurrency: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    load = os.getloadavg()[0]
    proc = loadgen(serving.url + "/ElasticCTRPredictionService/inference", concurrency, args,
                   body_file)  # fmt: skip
    # The serving/cube CPU window starts after the warm-up: sample it then.
    time.sleep(args.warmup)
    before = scrape(serving.url)
    cpu_before = cpu_seconds(serving_pid), sum(cpu_seconds(p) for p in cube_pids)
    perf = start_perf(serving_pid) if args.instructions else None
    out, _ = proc.communicate(timeout=args.warmup + args.seconds + 120)
    instructions = stop_perf(perf) if perf is not None else None
    after = scrape(serving.url)
    cpu_after = cpu_seconds(serving_pid), sum(cpu_seconds(p) for p in cube_pids)
    result = json.loads(out)
    lat = result["latencies"]
    examples = len(lat) * batch
    batches = after["batches_total"] - before["batches_total"]
    per_batch = {s: (after[s] - before[s]) / max(batches, 1) * 1e6 for s in STAGES}
    per_request = {s: (after[s] - before[s]) / max(len(lat), 1) * 1e6 for s in ("parse", "queue")}
    return {
        "batch": batch,
        "concurrency": concurrency,
        "load": load,
        "requests": len(lat),
        "errors": result["errors"],
        "rps": len(lat) / args.seconds,
        "eps": examples / args.seconds,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "mean_batch": (after["examples_total"] - before["examples_total"]) / max(batches, 1),
        "serving_us_per_example": (cpu_after[0] - cpu_before[0]) / max(examples, 1) * 1e6,
        "cube_us_per_example": (cpu_after[1] - cpu_before[1]) / max(examples, 1) * 1e6,
        "client_us_per_example": result["cpu"] / max(examples, 1) * 1e6,
        "stage_us_per_batch": per_batch,
        "stage_us_per_request": per_request,
        **(
            {"serving_kinstr_per_example": instructions / max(examples, 1) / 1e3}
            if instructions is not None
            else {}
        ),
    }


def start_perf(pid: int) -> subprocess.Popen[str]:
    """`perf stat` counting the user-space instructions of serving (all its threads): a
    figure of work that a busy machine does not inflate, unlike CPU time."""
    return subprocess.Popen(
        ["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def stop_perf(perf: subprocess.Popen[str]) -> float:
    perf.send_signal(2)  # SIGINT: perf prints its counts and exits
    _, err = perf.communicate(timeout=30)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions"):
            return float(fields[0])
    raise RuntimeError(f"perf stat printed no instruction count: {err[-500:]}")


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of every figure over the repetitions of one cell (p99: also its range)."""
    out: dict[str, Any] = {"batch": runs[0]["batch"], "concurrency": runs[0]["concurrency"]}
    for key, value in runs[0].items():
        if isinstance(value, float | int) and key not in out:
            out[key] = statistics.median(r[key] for r in runs)
        elif isinstance(value, dict):
            out[key] = {k: statistics.median(r[key][k] for r in runs) for k in value}
    out["p99_runs"] = sorted(r["p99_ms"] for r in runs)
    out["eps_runs"] = sorted(r["eps"] for r in runs)
    out["errors"] = sum(r["errors"] for r in runs)
    return out


def paired_ratios(runs: dict[str, list[dict[str, Any]]], on: str, off: str) -> str:
    """Each cell's `on` against `off` run by run (the two ran one after the other in each
    repetition): the median ratio and its range, for p99, requests/s and examples/s."""
    rows = [
        f"\n{on} / {off}, repetition by repetition (median, range):\n",
        "| batch | conc | p99 | req/s | examples/s |",
        "|---:|---:|---|---|---|",
    ]
    by_cell: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in runs[off]:
        by_cell.setdefault((r["batch"], r["concurrency"]), []).append(r)
    cells: dict[tuple[int, int], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for r in runs[on]:
        cell = (r["batch"], r["concurrency"])
        paired = cells.setdefault(cell, [])
        if len(paired) < len(by_cell.get(cell, [])):
            paired.append((r, by_cell[cell][len(paired)]))
    for (batch, conc), pairs in cells.items():
        figures = []
        for key in ("p99_ms", "rps", "eps"):
            ratios = sorted(a[key] / b[key] for a, b in pairs if b[key])
            figures.append(
                f"{statistics.median(ratios):.3f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
                if ratios
                else "-"
            )
        rows.append(f"| {batch} | {conc} | " + " | ".join(figures) + " |")
    return "\n".join(rows)


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| batch | conc | req/s | examples/s | p50 ms | p99 ms (each run) | mean predictor "
        "batch | CPU µs/example serving + cube + client | per batch µs: cube / pool / "
        "predict | per request µs: parse / queue |\n"
        "|---:|---:|---:|---:|---:|---|---:|---|---|---|"
    )
    counted = bool(results) and "serving_kinstr_per_example" in results[0]
    if counted:  # --instructions: serving's user-space instructions per example
        head = head.replace(" |\n", " | serving k-instructions/example |\n") + "---:|"
    rows = [head]
    for r in results:
        b, q = r["stage_us_per_batch"], r["stage_us_per_request"]
        runs = ", ".join(f"{p:.1f}" for p in r["p99_runs"])
        rows.append(
            f"| {r['batch']} | {r['concurrency']} | {r['rps']:,.0f} | {r['eps']:,.0f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} ({runs}) | {r['mean_batch']:.1f} | "
            f"{r['serving_us_per_example']:.0f} + {r['cube_us_per_example']:.0f} + "
            f"{r['client_us_per_example']:.0f} | {b['cube']:.0f} / {b['pool']:.0f} / "
            f"{b['predict']:.0f} | {q['parse']:.0f} / {q['queue']:.0f} |"
            + (f" {r['serving_kinstr_per_example']:,.0f} |" if counted else "")
        )
    return "\n".join(rows)


def http_floor(serving: Serving, concurrency: int, args: argparse.Namespace) -> dict[str, Any]:
    """GET /healthz through the same load generator: what aiohttp costs with no work."""
    out, _ = loadgen(serving.url + "/healthz", concurrency, args).communicate(timeout=300)
    result = json.loads(out)
    lat = result["latencies"]
    return {
        "concurrency": concurrency,
        "rps": len(lat) / args.seconds,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
        "client_us_per_request": result["cpu"] / max(len(lat), 1) * 1e6,
    }


def bare_predictor(model_dir: Path, inputs: int) -> dict[int, float]:
    """Median µs per predictor call at batch 1, 8, 64: serving's model code, in-process."""
    import numpy as np
    from elasticctr_common.storage import open_store
    from elasticctr_serving.model import load_model

    model = load_model(open_store(f"file://{model_dir}"), 1, workers=1)
    rng = np.random.default_rng(0)
    out = {}
    for batch in (1, 8, 64):
        pooled = rng.standard_normal((inputs, batch, 9)).astype(np.float32)
        times = []
        for _ in range(200 if batch < 64 else 60):
            started = time.perf_counter()
            model.predict(0, pooled)
            times.append(time.perf_counter() - started)
        out[batch] = percentile(times, 0.5) * 1e6
    return out


def build_tree_parser(tree: Path) -> None:
    """Another checkout's native request parser, built in that checkout (its target/ is
    its own): without it that serving takes the Python parser, 2.5 times slower at batch
    64, and the variants are not comparable."""
    if tree == REPO:
        return
    if not (tree / "images" / "serving" / "elasticctr_serving" / "native.py").exists():
        print(f"{tree}: no native request parser in this checkout (Python parser)", flush=True)
        return
    path = os.pathsep.join(str(tree / "images" / p) for p in ("serving", "common"))
    build = "from elasticctr_serving.native import build_parser; build_parser()"
    subprocess.run(
        [sys.executable, "-c", build], cwd=tree, env={**os.environ, "PYTHONPATH": path}, check=True
    )


def parse_variant(spec: str) -> tuple[str, Path, list[str]]:
    """'LABEL[@TREE]:ARGS' -> (label, tree, serving args)."""
    head, _, rest = spec.partition(":")
    label, _, tree = head.partition("@")
    return label, Path(tree).resolve() if tree else REPO, rest.split()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3, help="repetitions of every cell")
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--fc", default="400,400,400")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        help="'LABEL[@TREE]:SERVING ARGS', e.g. 'before@/tmp/old:--workers 2'; repeatable",
    )
    p.add_argument(
        "--feedback", action="store_true", help="each variant with impression logging off and on"
    )
    p.add_argument(
        "--compression",
        default="none",
        help="--feedback: serving's producer compression, or several (comma-separated): "
        "logging on once with each",
    )
    p.add_argument(
        "--broker-nice",
        type=int,
        default=19,
        help="--feedback: the broker's nice value (19, the default: it runs on the CPU "
        "serving and the load generator leave, as a broker pod does beside serving's CPU "
        "request; 0: it competes with them as an equal)",
    )
    p.add_argument(
        "--canary",
        type=float,
        default=0.0,
        help="each variant with a canary at this share and a scraper on, and without",
    )
    p.add_argument(
        "--crosses",
        default="0",
        help="each variant against a model with this many crosses, or several "
        "(comma-separated, e.g. 0,21): pairs of the first 7 slots",
    )
    p.add_argument(
        "--instructions", action="store_true",
        help="also count serving's user-space instructions per example (perf stat)",
    )  # fmt: skip
    p.add_argument("--json", help="also write the results here")
    # the load generator's own arguments
    p.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--bodies", help=argparse.SUPPRESS)
    p.add_argument("-c", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.loadgen:
        loadgen_main(args)
        return 0

    from elasticctr_cube.server import build_server
    from elasticctr_serving.native import build_parser

    from tests.support.cube import CubeCluster, wait_until
    from tests.support.serving import JoinerStandIn, Processes, Serving, publish

    build_server()
    build_parser()
    own = ["--workers", str(args.workers), "--max-wait-ms", str(args.max_wait_ms)]
    plain = [parse_variant(v) for v in args.variant] or [("this tree", REPO, own)]
    for tree in {tree for _, tree, _ in plain}:
        build_tree_parser(tree)
    variants: list[tuple[str, Path, list[str], dict[str, str]]] = [
        (label, tree, extra, {}) for label, tree, extra in plain
    ]
    broker = None
    if args.feedback:
        from tests.support.kafka import create_topics
        from tests.support.services import KafkaBroker

        broker = KafkaBroker().start()
        if args.broker_nice:
            assert broker.proc is not None
            renice(broker.proc.pid, args.broker_nice)
        create_topics(broker.bootstrap, {"elasticctr-impressions": 3, "elasticctr-clicks": 3})
        ons = [
            (f"on, {c}" if "," in args.compression else "on",
             {"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "FEEDBACK_COMPRESSION": c})
            for c in args.compression.split(",")
        ]  # fmt: skip
        variants = [
            (f"{label}, logging {state}", tree, extra, env)
            for label, tree, extra, _ in variants
            for state, env in (("off", {}), *ons)
        ]
    if args.canary:
        variants = [
            (f"{label}, canary {state}", tree, [*extra, *more], env)
            for label, tree, extra, env in variants
            for state, more in (("off", ["--cube-transfer-url", ""]), ("on", []))
        ]
    counts = [int(x) for x in args.crosses.split(",")]
    pairs = list(itertools.combinations(range(1, min(args.slots, 7) + 1), 2))
    if max(counts) > len(pairs) or min(counts) < 0:
        p.error(f"--crosses {args.crosses}: each from 0 to {len(pairs)} (pairs of 7 slots)")
    crosses_of = {label: 0 for label, *_ in variants}  # each variant's model
    if counts != [0]:
        crosses_of = {f"{label}, {k} crosses": k for label, *_ in variants for k in counts}
        variants = [
            (f"{label}, {k} crosses", tree, extra, env)
            for label, tree, extra, env in variants
            for k in counts
        ]
    load_before = os.getloadavg()
    started = time.time()
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _, _ in variants}
    references: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as tmp:
        root = Path(tmp)
        all_procs: list[Processes] = []
        joiner = JoinerStandIn()  # no figures: a canary stays on trial
        scraper = None
        try:
            transfer_args = ["--max-attempts", "1"]
            if args.canary:
                transfer_args += ["--canary-fraction", str(args.canary), "--canary-joiner-url",
                                  joiner.url, "--canary-max-seconds", "86400"]  # fmt: skip
            slots = list(range(1, args.slots + 1))
            fc = [int(x) for x in args.fc.split(",")]
            # Crossed models: every key below sparse_dim in the table, crossed ids included.
            key_space = {"sparse_dim": args.keys + 1} if counts != [0] else {}
            clusters: dict[int, tuple[Processes, CubeCluster]] = {}
            for k in counts:
                model_root = root / f"crosses-{k}" if counts != [0] else root
                model_root.mkdir(exist_ok=True)
                procs = Processes(model_root)
                all_procs.append(procs)
                cluster = CubeCluster(procs, model_root, 3, transfer_args)
                model = {"slots": slots, "fc_sizes": fc, "keys": args.keys,
                         "crosses": [list(pair) for pair in pairs[:k]], **key_space}  # fmt: skip
                publish(cluster, [1], **model)
                cluster.wait_result(1, timeout=120)
                if args.canary:
                    publish(cluster, [2], **model)
                    wait_until(lambda c=cluster: c.transfer_status()["canary"], 120, "the canary")
                clusters[k] = procs, cluster
            servers: dict[str, tuple[Serving, int, list[int], int]] = {}
            for i, (label, tree, extra, env) in enumerate(variants):
                k = crosses_of[label]
                procs, cluster = clusters[k]
                pythonpath = os.pathsep.join(
                    str(tree / "images" / d) for d in ("serving", "client", "cube", "common")
                )
                serving = Serving(procs, f"serving{i}", cluster, *extra,
                                  env={"PYTHONPATH": pythonpath, **env})  # fmt: skip
                serving.wait_version(1)
                if label.endswith("canary on"):
                    wait_until(lambda s=serving: s.status()["canary"], 120, "serving's canary")
                    scraper = Scraper(serving.url)
                cube_pids = [procs.procs[f"server{s}"].pid for s in range(3)]
                servers[label] = serving, procs.procs[f"serving{i}"].pid, cube_pids, k
            concurrencies = [int(x) for x in args.concurrency.split(",")]
            batches = [int(b) for b in args.batches.split(",")]
            body_files = {}
            crossed_slots = len({slot for pair in pairs[: max(counts)] for slot in pair})
            for batch in batches:
                body_files[batch] = root / f"bodies-{batch}.jsonl"
                body_files[batch].write_bytes(
                    b"\n".join(bodies(slots, batch, args.keys, single=crossed_slots))
                )
            first, _, _, first_crosses = next(iter(servers.values()))
            first_model = clusters[first_crosses][1].model_dir
            for repetition in range(args.repeat):
                references.append(
                    {
                        "load": os.getloadavg()[0],
                        "predictor_us": bare_predictor(first_model, args.slots + first_crosses),
                        "http_floor": [http_floor(first, c, args) for c in concurrencies],
                    }
                )
                print(json.dumps({"repetition": repetition, **references[-1]}),
                      file=sys.stderr, flush=True)  # fmt: skip
                for label, (serving, serving_pid, cube_pids, _) in servers.items():
                    for batch in batches:
                        for c in concurrencies:
                            result = run_one(
                                serving, serving_pid, cube_pids, body_files[batch], batch, c, args
                            )
                            runs[label].append({"variant": label, **result})
                            print(json.dumps(runs[label][-1]), file=sys.stderr, flush=True)
        finally:
            if scraper is not None:
                scraper.stop()
            for procs in all_procs:
                procs.stop_all()
            joiner.close()
            if broker is not None:
                broker.close()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}; load average before "
        f"{load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; model: "
        f"{args.slots} slots x 9, FC {args.fc}; {args.repeat} runs of {args.seconds:g} s per "
        f"cell (medians; p99 of each run in brackets)"
        + (f"; the broker at nice {args.broker_nice}" if args.feedback else "")
        + (f"; crosses {args.crosses}, the first 7 slots single-hot" if counts != [0] else "")
    )
    summary: dict[str, list[dict[str, Any]]] = {}
    for label, tree, extra, env in variants:
        cells: dict[tuple[int, int], list[dict[str, Any]]] = {}
        for r in runs[label]:
            cells.setdefault((r["batch"], r["concurrency"]), []).append(r)
        summary[label] = [median_of(cell) for cell in cells.values()]
        where = "" if tree == REPO else f" (code from {tree})"
        given = "".join(f" {k}={v}" for k, v in env.items())
        print(f"\n{label}: serving {' '.join(extra)}{given}{where}\n")
        print(table(summary[label]))
    if args.feedback and not args.canary:
        for label, *_ in variants:
            base, state, _ = label.rpartition(", logging on")
            if state:
                print(paired_ratios(runs, label, f"{base}, logging off"))
    for label, *_ in variants:
        if crosses_of[label] != counts[0]:  # each model against the first count's
            base = label.rpartition(", ")[0]
            print(paired_ratios(runs, label, f"{base}, {counts[0]} crosses"))
    loads = [r["load"] for label in runs for r in runs[label]]
    predictor = {b: statistics.median(r["predictor_us"][b] for r in references) for b in (1, 8, 64)}
    floors = [
        {
            "concurrency": c,
            **{
                k: statistics.median(r["http_floor"][i][k] for r in references)
                for k in ("rps", "p50_ms", "p99_ms", "client_us_per_request")
            },
        }
        for i, c in enumerate(int(x) for x in args.concurrency.split(","))
    ]
    print(
        f"\nreferences (medians of the {args.repeat} runs): load average during the cells "
        f"{min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}); bare "
        "predictor (median µs per call) "
        + ", ".join(f"batch {b}: {us:,.0f}" for b, us in predictor.items())
        + "; HTTP floor (GET /healthz) "
        + ", ".join(
            f"c={f['concurrency']}: {f['rps']:,.0f} req/s p50 {f['p50_ms']:.2f} "
            f"p99 {f['p99_ms']:.2f} ms"
            for f in floors
        )
        + f"; load generator {floors[0]['client_us_per_request']:.0f} µs of CPU per request"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"summary": summary, "runs": runs, "references": references}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
