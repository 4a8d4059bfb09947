"""Where impression logging's CPU goes: serving's threads and the Kafka broker's, per
request, at a fixed request rate (docs/feedback.md, "The cost of impression logging").

    PYTHONPATH=.:images/serving:images/common .venv/bin/python bench/feedback_cost.py \
        [--rate 2000] [--seconds 10] [--repeat 2] [--feasigns 52]

One real KRaft broker on loopback (tests/support/services.py). In this process, serving's
FeedbackLog (the producer and its delivery-report thread, as serving runs them) is handed
one batch-1 request of `--feasigns` feasigns `--rate` times a second for `--seconds`, in
turn with a run that does the same loop without logging (the reference: the loop's own
cost, and the idle broker's). Reported per request, from /proc: this process's CPU by
thread (the main thread, which is serving's event loop; librdkafka's threads; the rest),
and the broker's CPU. Each variant's median over `--repeat` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
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


def request(feasigns: int, slots: int = 26) -> Parsed:
    keys = np.arange(1, feasigns + 1, dtype=np.uint64) * np.uint64(7919)
    kinds = np.arange(feasigns, dtype=np.int32) % slots
    rows = np.zeros(feasigns, dtype=np.int32)
    return Parsed(1, keys, kinds, rows, 0, None, keys, kinds, rows)


def one_run(
    log: FeedbackLog | None, parsed: Parsed, broker_pid: int, rate: int, seconds: float
) -> dict[str, float]:
    slots = tuple(range(1, 27))
    before, broker_before = task_cpu(os.getpid()), process_cpu(broker_pid)
    start = time.time()
    count = int(rate * seconds)
    for i in range(count):
        delay = start + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        if log is not None:
            log.log_request(log.ids.next(), parsed, slots, 1, [0.5])
    after, broker_after = task_cpu(os.getpid()), process_cpu(broker_pid)
    per = {g: (after[g] - before.get(g, 0.0)) / count * 1e6 for g in after}
    per["broker"] = (broker_after - broker_before) / count * 1e6
    return per


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rate", type=int, default=2000, help="requests a second")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--feasigns", type=int, default=52, help="per request (batch 1)")
    args = p.parse_args()
    broker = KafkaBroker().start()
    try:
        assert broker.proc is not None
        create_topics(broker.bootstrap, {"impressions": 3, "clicks": 3})
        log = FeedbackLog({"bootstrap.servers": broker.bootstrap}, "impressions", "clicks",
                          ServingMetrics())  # fmt: skip
        parsed = request(args.feasigns)
        time.sleep(2)  # the producer's first metadata and idempotence PID
        one_run(log, parsed, broker.proc.pid, args.rate, 3)  # the broker's JIT warms up
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
            for group in ("main", "librdkafka", "other", "broker")
        }
        for variant, results in runs.items()
    }
    load = os.getloadavg()[0]
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}; {args.rate} requests/s of {args.feasigns} "
        f"feasigns, {args.repeat} x {args.seconds:g} s per variant (medians); load average "
        f"{load:.1f}; {delivered} records delivered\n"
    )
    rows = [
        ("serving's main thread (the event loop)", "main"),
        ("librdkafka's threads", "librdkafka"),
        ("serving's other threads (delivery reports)", "other"),
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
