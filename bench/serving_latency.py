"""Serving latency and throughput with 3 cube shards on loopback (docs/serving.md).

    .venv/bin/python bench/serving_latency.py [--batches 1,64] [--concurrency 1,8,32]
        [--seconds 5] [--slots 26] [--fc 400,400,400] [--workers 2] [--max-wait-ms 2]

Starts 3 cube-servers + agents + transfer and one serving process, publishes a synthetic
model version with the production architecture (26 slots, embedding_dim 9, FC
400-400-400, 100,000 trained keys) and drives `POST /ElasticCTRPredictionService/inference`
with a closed-loop load generator in its own process (asyncio + aiohttp, `c` connections,
each sending its next request as soon as the answer arrives; bodies pre-encoded, 1-3
feasigns per slot). Per run: p50/p99 latency, requests/s and examples/s, the mean
predictor batch, CPU per example of serving, cube and the load generator (from /proc),
and where serving's time went (its stage counters in /metrics).

References measured in the same run, so that the figures read as ratios on a busy
machine: the bare predictor (Paddle Inference in this process, the same model and
options as serving, per call at batch 1, 8, 64) and the HTTP floor (`GET /healthz`
through the same load generator and concurrency: aiohttp alone, no work).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)] + [str(REPO / "images" / p) for p in ("serving", "cube", "common")]
TICKS = os.sysconf("SC_CLK_TCK")
STAGES = ("parse", "queue", "cube", "pool", "predict")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def scrape(url: str) -> dict[str, float]:
    from tests.images.serving.servingtest import http

    text = http("GET", url + "/metrics")[1]
    found = {}
    for stage in STAGES:
        m = re.search(rf'stage_seconds_total{{stage="{stage}"}} (\S+)', text)
        found[stage] = float(m.group(1)) if m else 0.0
    for name in ("batches_total", "examples_total"):
        m = re.search(rf"^elasticctr_serving_{name} (\S+)", text, re.M)
        found[name] = float(m.group(1)) if m else 0.0
    return found


def bodies(slots: list[int], batch: int, keys: int, count: int = 64) -> list[bytes]:
    import numpy as np

    rng = np.random.default_rng(batch)
    out = []
    for _ in range(count):
        instances = [
            {
                "slots": [
                    {"slot_name": str(s), "feasigns": rng.integers(1, keys * 2, int(n)).tolist()}
                    for s, n in zip(slots, rng.integers(1, 4, len(slots)), strict=True)
                ]
            }
            for _ in range(batch)
        ]
        out.append(json.dumps({"instances": instances}).encode())
    return out


# -- the load generator (its own process) --------------------------------------------------
async def drive(url, payloads: list[bytes], concurrency: int, warmup: float, seconds: float):
    import aiohttp

    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        measure_from, stop_at = start + warmup, start + warmup + seconds
        cpu_at_measure: list[float] = []

        async def one(worker: int) -> None:
            nonlocal errors
            i = worker
            while (now := time.perf_counter()) < stop_at:
                if now >= measure_from and not cpu_at_measure:
                    cpu_at_measure.append(time.process_time())
                if payloads:
                    request = session.post(
                        url,
                        data=payloads[i % len(payloads)],
                        headers={"Content-Type": "application/json"},
                    )
                else:
                    request = session.get(url)
                async with request as r:
                    await r.read()
                    ok = r.status == 200
                done = time.perf_counter()
                if done >= measure_from and now >= measure_from:
                    latencies.append(done - now)
                    errors += not ok
                i += concurrency

        await asyncio.gather(*(one(w) for w in range(concurrency)))
    cpu = time.process_time() - (cpu_at_measure[0] if cpu_at_measure else 0.0)
    return latencies, errors, cpu


def loadgen_main(args: argparse.Namespace) -> None:
    payloads = [p for p in Path(args.bodies).read_bytes().split(b"\n") if p] if args.bodies else []
    latencies, errors, cpu = asyncio.run(
        drive(args.url, payloads, args.c, args.warmup, args.seconds)
    )
    print(json.dumps({"latencies": latencies, "errors": errors, "cpu": cpu}))


# -- the benchmark ------------------------------------------------------------------------
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_one(serving, cube_pids, body_file, batch, concurrency, args) -> dict:
    command = [
        sys.executable,
        __file__,
        "--loadgen",
        "--url",
        serving.url + "/ElasticCTRPredictionService/inference",
        "--bodies",
        str(body_file),
        "-c",
        str(concurrency),
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
    ]
    # The serving/cube CPU window starts after the warm-up: sample it then.
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    time.sleep(args.warmup)
    before = scrape(serving.url)
    cpu_before = cpu_seconds(serving.pid), sum(cpu_seconds(p) for p in cube_pids)
    out, _ = proc.communicate(timeout=args.warmup + args.seconds + 120)
    after = scrape(serving.url)
    cpu_after = cpu_seconds(serving.pid), sum(cpu_seconds(p) for p in cube_pids)
    result = json.loads(out)
    lat = result["latencies"]
    examples = len(lat) * batch
    batches = after["batches_total"] - before["batches_total"]
    per_batch = {s: (after[s] - before[s]) / max(batches, 1) * 1e6 for s in STAGES}
    per_request = {s: (after[s] - before[s]) / max(len(lat), 1) * 1e6 for s in ("parse", "queue")}
    return {
        "batch": batch,
        "concurrency": concurrency,
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
    }


def table(results: list[dict]) -> str:
    head = (
        "| batch | conc | req/s | examples/s | p50 ms | p99 ms | mean predictor batch | "
        "CPU µs/example serving + cube + client | per batch µs: cube / pool / predict | "
        "per request µs: parse / queue |\n|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
    )
    rows = [head]
    for r in results:
        b, q = r["stage_us_per_batch"], r["stage_us_per_request"]
        rows.append(
            f"| {r['batch']} | {r['concurrency']} | {r['rps']:,.0f} | {r['eps']:,.0f} | "
            f"{r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['mean_batch']:.1f} | "
            f"{r['serving_us_per_example']:.0f} + {r['cube_us_per_example']:.0f} + "
            f"{r['client_us_per_example']:.0f} | {b['cube']:.0f} / {b['pool']:.0f} / "
            f"{b['predict']:.0f} | {q['parse']:.0f} / {q['queue']:.0f} |"
        )
    return "\n".join(rows)


def http_floor(serving, concurrency: int, args) -> dict:
    """GET /healthz through the same load generator: what aiohttp costs with no work."""
    command = [
        sys.executable,
        __file__,
        "--loadgen",
        "--url",
        serving.url + "/healthz",
        "-c",
        str(concurrency),
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
    ]
    out = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
    lat = out["latencies"]
    return {
        "concurrency": concurrency,
        "rps": len(lat) / args.seconds,
        "p50_ms": percentile(lat, 0.5) * 1e3,
        "p99_ms": percentile(lat, 0.99) * 1e3,
    }


def bare_predictor(model_dir: Path, slots: int) -> dict[int, float]:
    """Median µs per predictor call at batch 1, 8, 64: serving's model code, in-process."""
    import numpy as np
    from elasticctr_common.storage import open_store
    from elasticctr_serving.model import load_model

    model = load_model(open_store(f"file://{model_dir}"), 1, workers=1)
    rng = np.random.default_rng(0)
    out = {}
    for batch in (1, 8, 64):
        pooled = rng.standard_normal((slots, batch, 9)).astype(np.float32)
        times = []
        for _ in range(200 if batch < 64 else 60):
            started = time.perf_counter()
            model.predict(0, pooled)
            times.append(time.perf_counter() - started)
        out[batch] = percentile(times, 0.5) * 1e6
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", default="1,64")
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--slots", type=int, default=26)
    p.add_argument("--fc", default="400,400,400")
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-wait-ms", type=float, default=2.0)
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

    from tests.images.serving.servingtest import CubeCluster, Processes, Serving, publish

    build_server()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="serving-bench-") as tmp:
        root = Path(tmp)
        procs = Processes(root)
        try:
            cluster = CubeCluster(procs, root, 3, ["--max-attempts", "1"])
            slots = list(range(1, args.slots + 1))
            fc = [int(x) for x in args.fc.split(",")]
            publish(cluster, [1], slots=slots, fc_sizes=fc, keys=args.keys)
            cluster.wait_result(1, timeout=120)
            serving = Serving(
                procs,
                "serving",
                cluster,
                "--workers",
                str(args.workers),
                "--max-wait-ms",
                str(args.max_wait_ms),
            )
            serving.wait_version(1)
            serving.pid = procs.procs["serving"].pid
            cube_pids = [procs.procs[f"server{s}"].pid for s in range(3)]
            concurrencies = [int(x) for x in args.concurrency.split(",")]
            floors = [http_floor(serving, c, args) for c in concurrencies]
            predictor = bare_predictor(cluster.model_dir, args.slots)
            results = []
            for batch in [int(b) for b in args.batches.split(",")]:
                body_file = root / f"bodies-{batch}.jsonl"
                body_file.write_bytes(b"\n".join(bodies(slots, batch, args.keys)))
                for c in concurrencies:
                    results.append(run_one(serving, cube_pids, body_file, batch, c, args))
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        finally:
            procs.stop_all()
    print(
        f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}; "
        f"{os.cpu_count()} CPUs; model: {args.slots} slots x 9, FC {args.fc}; "
        f"serving --workers {args.workers} --max-wait-ms {args.max_wait_ms}"
    )
    print(table(results))
    print(
        "\nreferences in the same run: bare predictor (median µs per call) "
        + ", ".join(f"batch {b}: {us:,.0f}" for b, us in predictor.items())
        + "; HTTP floor (GET /healthz) "
        + ", ".join(
            f"c={f['concurrency']}: {f['rps']:,.0f} req/s p50 {f['p50_ms']:.2f} "
            f"p99 {f['p99_ms']:.2f} ms"
            for f in floors
        )
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"results": results, "predictor_us": predictor, "http_floor": floors}, indent=1
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
