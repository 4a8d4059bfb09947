"""The feedback loop on this machine, as processes (docs/feedback.md):

    .venv/bin/python tools/feedback_loop.py [--work-dir DIR] [--seconds 240] [--minutes 1]

generated warm-up data -> offline job -> version 1 on cube (3 shards) and serving, with
impression logging to a real Kafka broker (KRaft, from Maven's jars) -> the simulator
sends predict requests and clicks under a truth that drifts -> the joiner writes
N-minute partitions -> the online job (resuming the offline checkpoint) trains each
one -> cube and serving roll each version out. Optionally the joiner and the broker are
killed (SIGKILL) and restarted mid-run (--kill-joiner-at, --kill-broker-at, seconds
after the simulator starts), and bad input is written at --bad-at (`bad_input` below):
malformed records of every kind straight to both topics, clicks on request ids nobody
answered (some twice), malformed clicks to serving's /click.

At the end it checks and reports (JSON on the last line, `--report FILE` too):
- exactly once: the features of every impression on the stream appear in the written
  partitions exactly as often as on the stream (a multiset: 0 lost, 0 duplicated), every
  one of them was sent by the simulator, and what the simulator sent but the stream lacks
  is what serving counted as dropped;
- the joiner's counts (late and unknown clicks, malformed records) and, for the bad input
  written, what was written beside what the joiner and serving counted for it;
- latency per impression: from serving's time to its joined example's partition closing
  (the donefile the trainer waits for), and to a version trained on that partition serving;
- per served version, the AUC of its scores on the simulator's clicks and the Bayes AUC;
- freshness: per partition, from its close (the joiner's donefile) to the version
  trained on it, or a later one, serving (serving switches once cube committed it on
  every shard; cube skips versions that come faster than it rolls them out).
Every process it starts is stopped at the end.

The warm-up takes tools/demo.py's data and training options (--slots, --hours, --set,
...), on generated data of the simple profile only: the simulator clicks by its truth.
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support (the broker)

from tools.demo import PYTHONPATH, Demo, add_data_arguments, run


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body


def bad_input(now: float) -> tuple[list[bytes | None], list[bytes | None], dict[str, int]]:
    """Records written straight to the impressions and clicks topics at --bad-at, and the
    counts the joiner must add for them: every malformed kind the parsers name (3 of
    each), clicks on request ids serving never answered (each unknown once the window
    and a partition's length pass) and a click sent twice (a duplicate, then unknown)."""
    from elasticctr_common.feedback import FRAMED_MESSAGE, impressions_message

    good = {"rid": "bad-input-0", "t": now, "v": 1, "slots": [1], "s": [0.5],
            "f": "AQAAAAAAAAA=", "k": "AAA=", "c": "AQAAAA=="}  # fmt: skip
    impressions: list[dict[str, object]] = [
        {**good, "rid": "a b"}, {**good, "t": "soon"}, {**good, "v": -1},
        {**good, "slots": []}, {**good, "s": [2.0]}, {**good, "f": "not base64!"},
        {**good, "c": "AgAAAA=="},  # 2 features claimed, 1 sent
    ]  # fmt: skip
    reasons = ["bad_request_id", "bad_time", "bad_version", "bad_slots", "bad_score",
               "bad_features", "bad_features"]  # fmt: skip
    # Serving's own layout broken: a frame past its message's end, a packed record cut short.
    framed = [FRAMED_MESSAGE + b"\xff\x00\x00\x00{}", impressions_message([b"\x01\x10\x00"])]
    framed_reasons = ["bad_frame", "bad_frame"]
    raw: list[bytes | None] = [None, b"{not json", b"[1, 2]"]
    raw_reasons = ["empty", "not_json", "not_object"]
    click = {"rid": "bad-input-0", "i": 0, "t": now}
    clicks: list[dict[str, object]] = [
        {**click, "rid": ""}, {**click, "i": -1}, {**click, "i": "0"}, {**click, "t": 0},
    ]  # fmt: skip
    click_reasons = ["bad_request_id", "bad_instance", "bad_instance", "bad_time"]
    imp_values = raw + [json.dumps(r).encode() for r in impressions] + framed
    click_values = raw + [json.dumps(c).encode() for c in clicks]
    expected: dict[str, int] = collections.Counter()
    for reason in raw_reasons + reasons + framed_reasons:
        expected[f"impression:{reason}"] += 3
    for reason in raw_reasons + click_reasons:
        expected[f"click:{reason}"] += 3
    unknown = [json.dumps({**click, "rid": f"never-answered-{n}"}).encode() for n in range(10)]
    twice = json.dumps({**click, "rid": "never-answered-twice"}).encode()
    return (
        imp_values * 3,
        click_values * 3 + unknown + [twice, twice],
        dict(expected) | {"unknown_clicks": len(unknown) + 1, "duplicate_clicks": 1},
    )


BAD_CLICKS = [b"{", b'{"request_id": "a b", "instance": 0}', b'{"request_id": "x"}',
              b'{"clicks": []}', b'{"request_id": "x", "instance": -1}']  # fmt: skip


class FeedbackLoop(Demo):
    def __init__(self, work: Path, args: argparse.Namespace) -> None:
        super().__init__(work, args)
        self.dataset = work / "feedback"
        self.events: list[str] = []
        self.broker: Any = None
        self.joiners = 0
        self.bad: dict[str, Any] = {}
        # The caller's PYTHONPATH after the images' (packages installed beside the venv).
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (PYTHONPATH, os.environ.get("PYTHONPATH", "")) if p
        )

    def event(self, text: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {text}")
        self.say(text)

    # the stream ------------------------------------------------------------------------------

    def start_broker(self) -> str:
        if self.args.bootstrap:
            return str(self.args.bootstrap)
        from tests.support.services import KafkaBroker

        self.say("starting Kafka (one KRaft node, tools/kafka-broker.sh)")
        self.broker = KafkaBroker().start()
        return str(self.broker.bootstrap)

    def serve(self, conf: Path) -> str:
        # serving's environment: the stream (FeedbackEnv)
        self.env["KAFKA_BOOTSTRAP_SERVERS"] = self.bootstrap
        return super().serve(conf)

    def start_joiner(self) -> None:
        self.joiners += 1
        self.start(
            f"joiner-{self.joiners}",
            self.python(
                "-m", "elasticctr_joiner",
                "--dataset-uri", f"file://{self.dataset}",
                "--partition-minutes", str(self.args.minutes),
                "--join-window-seconds", str(self.args.window),
                "--topic-partitions", "2",
                "--port", str(self.joiner_port),
            ),
        )  # fmt: skip
        # Up in seconds on a quiet machine; CI runs this beside the cluster's pods.
        self.wait_http(f"{self.joiner_url}/status", "the joiner", 300,
                       lambda s: s.get("state") == "running", f"joiner-{self.joiners}")  # fmt: skip

    @property
    def joiner_url(self) -> str:
        return f"http://127.0.0.1:{self.joiner_port}"

    def current_joiner(self) -> str:
        return [n for n in self.procs if n.startswith("joiner")][-1]

    # the online job ----------------------------------------------------------------------------

    def start_online(self, start: str) -> None:
        warm_up = json.loads((self.work / "trainer.json").read_text())
        config = online_config(warm_up, f"file://{self.dataset}", start, self.args.minutes)
        path = self.work / "trainer-online.json"
        path.write_text(json.dumps(config, indent=1))
        self.start(
            "online",
            self.python(
                "-m", "elasticctr_trainer", "local", "--config", str(path),
                "--pservers", "1", "--trainers", "1", "--log-dir", str(self.logs / "online"),
            ),
        )  # fmt: skip

    # the run -----------------------------------------------------------------------------------

    def main(self) -> int:
        a = self.args
        self.generate()
        self.bootstrap = self.start_broker()
        from elasticctr_common.ports import free_port

        self.joiner_port = free_port()
        conf = self.start_cube()
        url = self.serve(conf)
        first = self.train()
        self.wait_http(f"{self.transfer_url}/status", f"cube to commit {first}", 300,
                       lambda s: s.get("committed") == first)  # fmt: skip
        self.wait_http(f"{url}/status", f"serving {first}", 300, lambda s: s["version"] == first)
        self.event(f"serving version {first}; starting the joiner and the online job")
        self.start_joiner()
        from elasticctr_common.feedback import partition_of

        self.start_online(partition_of(time.time(), a.minutes))
        record = self.work / "simulator.jsonl"
        sim = self.start(
            "simulator",
            self.python(
                "-m", "elasticctr_trainer", "simulate", "--serving-url", url,
                "--truth", str(self.work / "data" / "truth.json"),
                "--seconds", str(a.seconds), "--qps", str(a.qps), "--batch", str(a.batch),
                "--click-delay", str(a.click_delay), "--late-share", str(a.late_share),
                "--late-after", str(a.minutes * 60 + a.window + 15), "--drift-at", str(a.drift_at),
                "--record", str(record),
            ),
        )  # fmt: skip
        began = time.monotonic()
        self.event("simulator started")
        kills = sorted(
            [(t, "joiner") for t in a.kill_joiner_at] + [(t, "broker") for t in a.kill_broker_at]
        )
        if a.bad_at is not None:
            # The joiner counts what it read since it started: after its last restart.
            if kills and a.bad_at <= kills[-1][0] + a.broker_down:
                raise SystemExit("--bad-at must come after the last kill (and the broker's return)")
            kills.append((a.bad_at, "bad"))
        for at, what in kills:
            while time.monotonic() - began < at:
                self.check_alive(sim)
                time.sleep(0.5)
            if what == "bad":
                self.write_bad_input(url)
            elif what == "joiner":
                name = self.current_joiner()
                killed = self.procs.pop(name)  # its exit is expected
                os.killpg(killed.pid, signal.SIGKILL)
                killed.wait()
                self.event(f"joiner killed (SIGKILL) at {at:.0f}s; restarting it")
                self.start_joiner()
            else:
                assert self.broker is not None, "--kill-broker-at needs the loop's own broker"
                self.broker.kill()
                self.event(f"broker killed (SIGKILL) at {at:.0f}s; down for {a.broker_down:.0f}s")
                time.sleep(a.broker_down)
                self.broker.restart()
                self.event("broker restarted")
        while sim.poll() is None:
            self.check_alive(sim)
            time.sleep(1)
        if sim.returncode != 0:
            raise SystemExit(f"the simulator failed ({sim.returncode}); log {self.logs}")
        summary = json.loads((self.logs / "simulator.log").read_text().strip().splitlines()[-1])
        self.event(f"simulator done: {summary['impressions']} impressions")
        report = self.finish(url, record, summary)
        text = json.dumps(report)
        if a.report:
            Path(a.report).write_text(text)
        print(text, flush=True)
        return 0

    def write_bad_input(self, url: str) -> None:
        """`bad_input`: to the stream directly, and malformed clicks to serving's /click."""
        from confluent_kafka import Producer
        from elasticctr_common.feedback import CLICKS_TOPIC, IMPRESSIONS_TOPIC

        before_joiner = get(f"{self.joiner_url}/status")["counts"]
        before_serving = get(f"{url}/status")["feedback"]["clicks"]["rejected"]
        imps, clicks, expected = bad_input(time.time())
        producer: Any = Producer({"bootstrap.servers": self.bootstrap})
        for topic, values in ((IMPRESSIONS_TOPIC, imps), (CLICKS_TOPIC, clicks)):
            for value in values:
                producer.produce(topic, value=value)
        assert producer.flush(60) == 0, "the bad input was not all delivered"
        refused = 0
        for body in BAD_CLICKS:
            request = urllib.request.Request(f"{url}/click", body, method="POST")
            try:
                urllib.request.urlopen(request, timeout=10).close()
            except urllib.error.HTTPError as err:
                refused += err.code == 400
        self.bad = {
            "joiner_before": before_joiner, "serving_rejected_before": before_serving,
            "written": {"impressions": len(imps), "clicks": len(clicks)}, "expected": expected,
            "serving_clicks_sent": len(BAD_CLICKS), "serving_clicks_refused": refused,
        }  # fmt: skip
        self.event(f"bad input written: {len(imps)} impression and {len(clicks)} click records, "
                   f"{len(BAD_CLICKS)} malformed clicks to /click")  # fmt: skip

    def bad_input_report(self, url: str) -> dict[str, Any]:
        """What the joiner and serving counted for the bad input, beside what was written
        (once the clicks on ids nobody answered have waited out their time)."""
        if not self.bad:
            return {}
        before = self.bad["joiner_before"]
        unknown = before["unknown_clicks"] + self.bad["expected"]["unknown_clicks"]
        status = self.wait_http(f"{self.joiner_url}/status", "the unknown clicks counted", 600,
                                lambda s: s["counts"]["unknown_clicks"] >= unknown)  # fmt: skip
        joiner = status["counts"]
        counted: dict[str, int] = {
            key: joiner["bad"].get(key, 0) - before["bad"].get(key, 0)
            for key in sorted(set(joiner["bad"]) | set(self.bad["expected"]))
            if ":" in key
        }
        for key in ("unknown_clicks", "duplicate_clicks"):
            counted[key] = joiner[key] - before[key]
        rejected = get(f"{url}/status")["feedback"]["clicks"]["rejected"]
        return {
            "written": self.bad["written"],
            "expected": self.bad["expected"],
            "joiner_counted": counted,
            "serving_clicks": {
                "sent": self.bad["serving_clicks_sent"],
                "refused_400": self.bad["serving_clicks_refused"],
                "counted_rejected": rejected - self.bad["serving_rejected_before"],
            },
        }

    def check_alive(self, sim: subprocess.Popen[bytes]) -> None:
        for name in ("serving", "online", self.current_joiner()):
            code = self.procs[name].poll()
            if code is not None:
                raise SystemExit(f"{name} exited with {code} (logs: {self.logs})")

    def finish(self, url: str, record: Path, summary: dict[str, Any]) -> dict[str, Any]:
        from elasticctr_common.feedback import (
            BadRecord,
            impression_records,
            impressions,
            next_partition,
            partition_of,
        )
        from elasticctr_common.feedback import freshness as partition_freshness
        from elasticctr_common.storage import open_store

        from tests.support.kafka import read_topic

        a = self.args
        sent = [json.loads(line) for line in record.read_text().splitlines()]
        last = partition_of(max(r["t"] for r in sent), a.minutes)
        # Serving's buffer drains, then the joiner closes the last partition (late
        # impressions of a closed one go to the next: one more).
        self.wait_http(f"{url}/status", "serving's impressions delivered", 600,
                       lambda s: s["feedback"]["waiting"] == 0)  # fmt: skip
        want = next_partition(last, a.minutes)
        status = self.wait_http(f"{self.joiner_url}/status", f"the joiner to close {want}", 900,
                                lambda s: (s.get("closed") or "") >= want)  # fmt: skip
        serving = get(f"{url}/status")
        records = read_topic(self.bootstrap, "elasticctr-impressions")
        stream = []
        for value in records:
            for one in impression_records(value):
                try:
                    stream += impressions(one)
                except BadRecord:
                    continue  # the bad input (--bad-at): the joiner's to count, in the report
        dataset = open_store(f"file://{self.dataset}")
        partitions = {}
        joined: collections.Counter[str] = collections.Counter()
        in_partition: dict[str, collections.Counter[str]] = {}
        clicked = 0
        for day in sorted(dataset.list()):
            for name in sorted(dataset.list(day)):
                done = f"{day}/{name}/donefile"
                if not dataset.exists(done):
                    continue
                manifest = json.loads(dataset.read_text(done))
                partitions[f"{day}/{name}"] = manifest
                here = in_partition.setdefault(f"{day}/{name}", collections.Counter())
                for file in manifest["files"]:
                    for line in dataset.read_text(f"{day}/{name}/{file}").splitlines():
                        _, click, features = line.split(" ", 2)
                        joined[features] += 1
                        here[features] += 1
                        clicked += int(click)
        on_stream = collections.Counter(m.features for m in stream)
        by_simulator = collections.Counter(r["f"] for r in sent)
        dropped = serving["feedback"]["impressions"]
        exactly = {
            "simulator_sent": sum(by_simulator.values()),
            "on_stream": sum(on_stream.values()),
            "joined": sum(joined.values()),
            "lost": sum((on_stream - joined).values()),
            "duplicated": sum((joined - on_stream).values()),
            "not_sent_by_simulator": sum((on_stream - by_simulator).values()),
            "sent_not_on_stream": sum((by_simulator - on_stream).values()),
            "serving_dropped": dropped["dropped_buffer_full"],
            "serving_failed": dropped["failed"],
            "clicked_examples": clicked,
        }
        # The online job trains the last partitions; serving rolls them out.
        models = open_store(f"file://{self.work}/models")
        trained = self.wait_versions(models, url, want)
        switched = {h["version"]: h["switched_at"] for h in get(f"{url}/status")["history"]}
        closed = {name: manifest["closed_at"] for name, manifest in partitions.items()}
        freshness = [
            f | {"examples": partitions[f["partition"]]["examples"]}
            for f in partition_freshness(closed, trained, switched)
        ]
        seconds = [f["seconds"] for f in freshness]
        return {
            "exactly_once": exactly,
            "latency": latency(stream, in_partition, partitions, freshness, a.minutes),
            "bad_input": self.bad_input_report(url),
            "joiner": status["counts"],
            "partitions": len(partitions),
            "versions": summary["versions"],
            "simulator": {k: v for k, v in summary.items() if k != "versions"},
            "freshness": freshness,
            "freshness_median_seconds": statistics.median(seconds) if seconds else None,
            "events": self.events,
        }

    def wait_versions(self, models: Any, url: str, last: str) -> dict[int, list[str]]:
        """version -> the partitions it was trained on, once a version of `last` serves."""
        from elasticctr_common.versions import read_versions

        deadline = time.monotonic() + self.args.train_timeout
        while True:
            trained = {}
            for v in read_versions(models):
                meta = json.loads(models.read_text(f"{v.id}/dense/meta.json"))
                trained[v.id] = list(meta.get("hours", []))
            serving = get(f"{url}/status")["version"]
            if any(last in hours and v <= serving for v, hours in trained.items()):
                return trained
            if time.monotonic() > deadline:
                raise SystemExit(f"no version of {last} served in time; versions {trained}")
            if self.procs["online"].poll() is not None:
                raise SystemExit(f"the online job exited ({self.procs['online'].returncode})")
            time.sleep(2)

    def stop_all(self) -> None:
        super().stop_all()
        if self.broker is not None:
            self.broker.close()


def online_config(
    warm_up: dict[str, Any], dataset: str, start: str, minutes: int
) -> dict[str, Any]:
    """The online job's trainer.json: the warm-up's file as written (not as parsed: parsing
    resolves the offline mode's defaults, delete_threshold among them, which the online job
    resolves for its own mode), following `dataset`'s partitions from `start`."""
    from elasticctr_common.trainer_json import apply_settings

    config = copy.deepcopy(warm_up)
    config["runner"].update(
        mode="online", train_data_uri=dataset, start_date_hr=start, end_date_hr=None,
        partition_minutes=minutes, online_poll_seconds=1.0, eval_data_uri=None,
        publish_every_version=True,
    )  # fmt: skip
    apply_settings(config, [])
    return config


def latency(
    stream: list[Any],
    in_partition: dict[str, collections.Counter[str]],
    partitions: dict[str, dict[str, Any]],
    freshness: list[dict[str, Any]],
    minutes: int,
) -> dict[str, Any]:
    """Seconds from each impression's serving time to its partition's donefile (its joined
    example readable by the trainer) and to a version trained on that partition serving;
    median, 90th percentile, max. An impression is looked up in the partition of its time,
    then the ones after (a late impression goes to the first open one)."""
    from elasticctr_common.feedback import next_partition, partition_of

    left = {name: collections.Counter(c) for name, c in in_partition.items()}
    served = {f["partition"]: f["seconds"] for f in freshness}
    to_joined, to_served = [], []
    for impression in stream:
        name = partition_of(impression.time, minutes)
        while name in left and not left[name][impression.features]:
            name = next_partition(name, minutes)
        if name not in left:
            continue  # not joined (the report's `lost` counts it)
        left[name][impression.features] -= 1
        joined = partitions[name]["closed_at"] - impression.time
        to_joined.append(joined)
        if name in served:
            to_served.append(joined + served[name])

    def spread(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None
        ordered = sorted(values)
        return {
            "n": len(ordered),
            "median": round(statistics.median(ordered), 1),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "max": round(ordered[-1], 1),
        }

    return {
        "impression_to_partition_closed": spread(to_joined),
        "impression_to_version_serving": spread(to_served),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work-dir", help="keep everything here (default: a temporary directory)")
    p.add_argument("--report", help="also write the JSON report here")
    p.add_argument("--bootstrap", help="an existing Kafka (else one is started here)")
    p.add_argument("--minutes", type=int, default=1, help="partition length")
    p.add_argument("--window", type=float, default=10.0, help="join window, seconds")
    p.add_argument("--seconds", type=float, default=240.0, help="the simulator's run")
    p.add_argument("--qps", type=float, default=8.0)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--click-delay", type=float, default=3.0)
    p.add_argument("--late-share", type=float, default=0.1)
    p.add_argument("--drift-at", type=float, default=100.0)
    p.add_argument("--kill-joiner-at", type=float, action="append", default=[])
    p.add_argument("--kill-broker-at", type=float, action="append", default=[])
    p.add_argument("--broker-down", type=float, default=30.0, help="seconds")
    p.add_argument("--bad-at", type=float, help="write the bad input then (after the kills)")
    add_data_arguments(p)
    # The warm-up trains one version to start from, on less data than the demo.
    p.set_defaults(hours=1, examples=20000, passes=1)
    args = p.parse_args(argv)
    if args.profile != "simple" or args.data:
        given = f"--data {args.data}" if args.data else f"--profile {args.profile}"
        p.error(
            f"{given}: the simulator clicks by the truth of generated data of the simple "
            "profile (--profile simple, no --data)"
        )
    # Every version published (online passes delete no ids by default: trainer_json).
    online = ["runner.publish_every_version=true"]
    args.set = online + args.set
    return args


def main() -> int:
    return run(FeedbackLoop, parse_args(), "elasticctr-feedback-")


if __name__ == "__main__":
    sys.exit(main())
