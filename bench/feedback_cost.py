"""Where impression logging's CPU goes: serving's threads and the Kafka broker's, per
request, at a fixed request rate (docs/feedback.md, "The cost of impression logging").

    PYTHONPATH=.:images/serving:images/common .venv/bin/python bench/feedback_cost.py \
        [--rate 2000] [--seconds 10] [--repeat 2] [--warmup 60] [--batch 1] \
        [--feasigns 52] [--producer compression.type=zstd ...]

One real KRaft broker on loopback (tests/support/services.py). In this process, serving's
FeedbackLog (the producer and its sending thread, as serving runs them) is handed requests
of `--batch` instances of `--feasigns` feasigns (1,024 distinct ones, 64-bit ids drawn
from long-tailed vocabularies, as real records are) `--rate` times a second for
`--seconds`, in turn with a run that does the same loop without logging (the reference:
the loop's own cost, and the idle broker's), after `--warmup` seconds of logging (the
broker's JIT compiles for its first minute or so). Reported per request, from /proc: this
process's CPU by thread (the main thread, which is serving's event loop; librdkafka's
threads; the rest: the sending thread), and the broker's CPU. Each variant's median over
`--repeat` runs. `--producer` adds librdkafka settings to serving's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from confluent_kafka import Producer
from elasticctr_serving.feedback import FeedbackLog
from elasticctr_serving.instances import Parsed
from elasticctr_serving.metrics import ServingMetrics

from tests.support.kafka import create_topics
from tests.support.services import KafkaBroker

TICK = os.sysconf("SC_CLK_TCK")


def task_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of `pid`, by thread group: main, rdk:* (librdkafka),
    other."""
    groups: dict[str, float] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        group = "main" if int(task) == pid else "librdkafka" if name.startswith("rdk:") else "other"
        groups[group] = groups.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return groups


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def requests(
    feasigns: int, batch: int = 1, count: int = 1024, slots: int = 26, seed: int = 1
) -> list[Parsed]:
    """`count` distinct requests of `batch` instances of `feasigns` feasigns: per slot, ids
    drawn Zipf(1.1) from a vocabulary of 64-bit feasigns (a real stream's records are alike
    in that way: a few head ids, a long tail), so the records compress as much as real ones
    would, not as one repeated request."""
    rng = np.random.default_rng(seed)
    vocab = rng.integers(1, 2**63, size=(slots, 100_000), dtype=np.uint64)
    kinds = np.tile(np.arange(feasigns, dtype=np.int32) % slots, batch)
    rows = np.repeat(np.arange(batch, dtype=np.int32), feasigns)
    out = []
    for _ in range(count):
        ranks = np.minimum(rng.zipf(1.1, size=feasigns * batch) - 1, vocab.shape[1] - 1)
        keys = vocab[kinds, ranks]
        out.append(Parsed(batch, keys, kinds, rows, 0, None, keys, kinds, rows))
    return out


class CountingProducer(Producer):
    """Serving's producer, counting the messages it is handed (the broker's requests)."""

    produced = 0

    def produce(self, *args: Any, **kwargs: Any) -> None:
        CountingProducer.produced += 1
        super().produce(*args, **kwargs)


def one_run(
    log: FeedbackLog | None, parsed: list[Parsed], broker_pid: int, rate: int, seconds: float
) -> dict[str, float]:
    slots = tuple(range(1, 27))
    before, broker_before = task_cpu(os.getpid()), process_cpu(broker_pid)
    messages_before = CountingProducer.produced
    start = time.time()
    count = int(rate * seconds)
    for i in range(count):
        delay = start + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        if log is not None:
            request = parsed[i % len(parsed)]
            log.log_request(log.ids.next(), request, slots, 1, [0.5] * request.count)
    after, broker_after = task_cpu(os.getpid()), process_cpu(broker_pid)
    per = {g: (after[g] - before.get(g, 0.0)) / count * 1e6 for g in after}
    per["broker"] = (broker_after - broker_before) / count * 1e6
    per["messages"] = (CountingProducer.produced - messages_before) / seconds
    return per


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=int, default=2000, help="requests a second")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--warmup", type=float, default=60.0, help="seconds logged before measuring")
    p.add_argument("--feasigns", type=int, default=52, help="per instance")
    p.add_argument("--batch", type=int, default=1, help="instances per request")
    p.add_argument(
        "--producer", action="append", default=[], metavar="KEY=VALUE",
        help="a librdkafka setting for serving's producer (e.g. compression.type=zstd)",
    )  # fmt: skip
    args = p.parse_args()
    broker = KafkaBroker().start()
    try:
        assert broker.proc is not None
        create_topics(broker.bootstrap, {"impressions": 3, "clicks": 3})
        settings = dict(item.split("=", 1) for item in args.producer)
        log = FeedbackLog(
            {"bootstrap.servers": broker.bootstrap, **settings}, "impressions", "clicks",
            ServingMetrics(), producer_factory=CountingProducer,
        )  # fmt: skip
        parsed = requests(args.feasigns, args.batch)
        time.sleep(2)  # the producer's first metadata and idempotence PID
        # the broker's JIT compiles for its first minute or so under load (docs/feedback.md)
        one_run(log, parsed, broker.proc.pid, args.rate, args.warmup)
        runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
        for _ in range(args.repeat):
            for variant in ("off", "on"):
                which = log if variant == "on" else None
                runs[variant].append(
                    one_run(which, parsed, broker.proc.pid, args.rate, args.seconds)
                )
        delivered = int(log.metrics.impressions.get("delivered"))
        log.close()
    finally:
        broker.stop()
    medians: dict[str, dict[str, float]] = {
        variant: {
            group: statistics.median(r.get(group, 0.0) for r in results)
            for group in ("main", "librdkafka", "other", "broker", "messages")
        }
        for variant, results in runs.items()
    }
    load = os.getloadavg()[0]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}; {args.rate} requests/s of {args.batch} x "
        f"{args.feasigns} feasigns, {args.repeat} x {args.seconds:g} s per variant "
        f"(medians); producer {settings or 'as serving has it'}; load average {load:.1f}; "
        f"{delivered} impressions delivered\n"
    )
    rows = [
        ("serving's main thread (the event loop)", "main"),
        ("librdkafka's threads", "librdkafka"),
        ("serving's other threads (sending, delivery reports)", "other"),
        ("the broker (whole JVM)", "broker"),
    ]
    print("| CPU µs per request | logging off | logging on | on - off |")
    print("|---|---:|---:|---:|")
    for label, group in rows:
        off, on = medians["off"][group], medians["on"][group]
        print(f"| {label} | {off:.1f} | {on:.1f} | {on - off:+.1f} |")
    serving_off = sum(medians["off"][g] for g in ("main", "librdkafka", "other"))
    serving_on = sum(medians["on"][g] for g in ("main", "librdkafka", "other"))
    print(f"| serving in all | {serving_off:.1f} | {serving_on:.1f} | "
          f"{serving_on - serving_off:+.1f} |")  # fmt: skip
    print(f"\nmessages a second, logging on: {medians['on']['messages']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
