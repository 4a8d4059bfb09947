"""A population of users for the feedback loop (docs/feedback.md): predict requests through
serving, clicks back with realistic delays, under a ground-truth CTR model that drifts.

The truth is generate.py's SyntheticModel (the one `generate` wrote the warm-up data
with: `--truth URI/truth.json`, or made from the same --slots/--vocab/--seed). At
`--drift-at` seconds it changes: a new item takes the most popular rank of the first slot
with a strong positive effect (an item that becomes popular), and the second slot's
effects flip sign (a slot whose effect changes). Each instance is clicked with its true
probability; a click comes after an exponential delay (`--click-delay`), and a share
(`--late-share`) only after `--late-after` seconds (past the joiner's window).

Everything sent is kept in the simulator's own record (`--record`, JSON lines, one per
impression: request id, instance, serving's version and score, the true probability,
features, click time or null, late or not, drifted or not). The summary (stdout, JSON)
holds per served version the AUC of its scores on the clicks and the Bayes AUC (the
true probabilities') of the same traffic, and both in expectation over the clicks
(`expected_auc`, `bayes_expected_auc`: against the true probabilities, without the clicks'
noise).
"""

from __future__ import annotations

import heapq
import json
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from elasticctr_common.storage import open_store

from .generate import SyntheticModel
from .metrics import auc, expected_auc

log = logging.getLogger(__name__)
INFERENCE = "/ElasticCTRPredictionService/inference"
NEW_ITEM = 2**63 + 12345  # the feasign of the item that becomes popular
NEW_ITEM_WEIGHT = 2.5


def drifted(model: SyntheticModel) -> SyntheticModel:
    """The truth after the drift."""
    feasigns = [f.copy() for f in model.feasigns]
    weights = [w.copy() for w in model.weights]
    feasigns[0][0] = NEW_ITEM  # rank 0: the most popular pick of slot 0
    weights[0][0] = NEW_ITEM_WEIGHT
    if len(weights) > 1:
        weights[1] = -weights[1]
    return replace(model, feasigns=feasigns, weights=weights)


def instances_of(lines: list[str]) -> list[dict[str, Any]]:
    """ElasticCTR request instances of generated lines (`<show> <click> f:s ...`)."""
    out = []
    for line in lines:
        slots: dict[str, list[int]] = {}
        for token in line.split()[2:]:
            feasign, slot = token.split(":")
            slots.setdefault(slot, []).append(int(feasign))
        out.append({"slots": [{"slot_name": s, "feasigns": f} for s, f in slots.items()]})
    return out


@dataclass
class Options:
    serving_url: str
    token: str = ""
    seconds: float = 60.0
    qps: float = 20.0  # requests a second, all threads together
    batch: int = 4  # instances a request
    threads: int = 2
    click_delay: float = 5.0  # mean seconds from impression to click
    late_share: float = 0.05  # of clicks, sent only after `late_after`
    late_after: float = 60.0
    drift_at: float | None = None  # seconds after the start
    seed: int = 11
    record: str = ""  # JSON lines file (local path)


class Simulator:
    def __init__(self, truth: SyntheticModel, options: Options) -> None:
        self.truth, self.after = truth, drifted(truth)
        self.o = options
        self.records: list[dict[str, Any]] = []
        self.clicks: list[tuple[float, int, str, int]] = []  # heap: (due, n, rid, instance)
        self.lock = threading.Lock()
        self.errors: dict[str, int] = {}
        self.sent_clicks = 0
        self.failed_clicks = 0
        self.started = 0.0
        self.stop = threading.Event()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.o.token:
            headers["Authorization"] = f"Bearer {self.o.token}"
        return headers

    def _post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            self.o.serving_url + path, json.dumps(body).encode(), self._headers(), method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, {"error": err.read()[:200].decode(errors="replace")}

    def _error(self, what: str) -> None:
        with self.lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def _requests(self, worker: int) -> None:
        rng = np.random.default_rng(self.o.seed * 1000 + worker)
        interval = self.o.threads / self.o.qps
        next_at = time.monotonic()
        while not self.stop.is_set():
            elapsed = time.monotonic() - self.started
            if elapsed >= self.o.seconds:
                return
            is_drifted = self.o.drift_at is not None and elapsed >= self.o.drift_at
            model = self.after if is_drifted else self.truth
            lines, probs = model.sample(self.o.batch, rng)
            try:
                code, body = self._post(INFERENCE, {"instances": instances_of(lines)})
            except OSError as err:
                self._error(f"predict: {type(err).__name__}")
                code, body = 0, {}
            if code == 200:
                self._record(body, lines, probs, is_drifted, rng)
            elif code:
                self._error(f"predict: HTTP {code}")
            next_at += interval
            self.stop.wait(max(0.0, next_at - time.monotonic()))

    def _record(self, body: dict[str, Any], lines: list[str], probs: Any, is_drifted: bool,
                rng: np.random.Generator) -> None:  # fmt: skip
        now = time.time()
        rid, version = body["request_id"], body["version"]
        for i, (line, p, answer) in enumerate(zip(lines, probs, body["predictions"], strict=True)):
            clicked = bool(rng.random() < p)
            late = clicked and bool(rng.random() < self.o.late_share)
            click_at = None
            if clicked:
                delay = float(rng.exponential(self.o.click_delay))
                click_at = now + (self.o.late_after + delay if late else delay)
            record = {
                "rid": rid, "i": i, "t": now, "v": version, "s": answer.get("prob1"),
                "p": float(p), "f": line.split(" ", 2)[2], "click_at": click_at, "late": late,
                "drifted": is_drifted,
            }  # fmt: skip
            with self.lock:
                self.records.append(record)
                if click_at is not None:
                    heapq.heappush(self.clicks, (click_at, len(self.records), rid, i))

    def _clicker(self) -> None:
        while True:
            with self.lock:
                due = []
                while self.clicks and self.clicks[0][0] <= time.time():
                    due.append(heapq.heappop(self.clicks))
                remaining = len(self.clicks)
            if due:
                body = {"clicks": [{"request_id": rid, "instance": i} for _, _, rid, i in due]}
                try:
                    code, _ = self._post("/click", body)
                except OSError:
                    code = 0
                if code == 202:
                    self.sent_clicks += len(due)
                else:
                    self.failed_clicks += len(due)
                    self._error(f"click: HTTP {code}")
            elif remaining == 0 and self.stop.is_set():
                return
            time.sleep(0.05)

    def run(self) -> dict[str, Any]:
        self.started = time.monotonic()
        workers = [threading.Thread(target=self._requests, args=(w,), daemon=True)
                   for w in range(self.o.threads)]  # fmt: skip
        clicker = threading.Thread(target=self._clicker, daemon=True)
        for t in [*workers, clicker]:
            t.start()
        for t in workers:
            t.join()
        self.stop.set()  # the clicker sends what is scheduled, late clicks included
        clicker.join()
        if self.o.record:
            with open(self.o.record, "w") as out:
                for record in self.records:
                    out.write(json.dumps(record) + "\n")
        return self.summary()

    def summary(self) -> dict[str, Any]:
        return summarize(self.records) | {
            "clicks_sent": self.sent_clicks,
            "clicks_failed": self.failed_clicks,
            "errors": self.errors,
        }


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts, and per served version (and drift phase) the AUC of the served scores and
    of the true probabilities, on the clicks and in expectation over them."""
    versions: dict[tuple[int, bool], list[dict[str, Any]]] = {}
    for r in records:
        versions.setdefault((r["v"], r["drifted"]), []).append(r)
    rows = []
    for (version, is_drifted), rs in sorted(versions.items()):
        labels = np.array([r["click_at"] is not None for r in rs])
        row: dict[str, Any] = {"version": version, "drifted": is_drifted, "impressions": len(rs),
                               "clicks": int(labels.sum())}  # fmt: skip
        scored = [r for r in rs if r["s"] is not None]
        if 0 < labels.sum() < len(rs):
            row["auc"] = auc(np.array([r["click_at"] is not None for r in scored]),
                             np.array([r["s"] for r in scored]))  # fmt: skip
            row["bayes_auc"] = auc(labels, np.array([r["p"] for r in rs]))
        if scored:
            # The same two against the true probabilities instead of the clicks drawn.
            probs = np.array([r["p"] for r in scored])
            row["expected_auc"] = expected_auc(probs, np.array([r["s"] for r in scored]))
            row["bayes_expected_auc"] = expected_auc(probs, probs)
        rows.append(row)
    return {
        "requests": len({r["rid"] for r in records}),
        "impressions": len(records),
        "clicks": sum(r["click_at"] is not None for r in records),
        "late_clicks": sum(bool(r["late"]) for r in records),
        "versions": rows,
        "recovery": recovery(rows),
    }


# A version's drifted traffic counts in the recovery once it is this large: the gap's
# spread over resampled impressions is about 0.005 at 1,000 (docs/feedback.md).
RECOVERY_IMPRESSIONS = 500


def recovery(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How far the served model came back after the drift: on the drifted traffic, the gap
    between the truth's ranking and the served one (`bayes_expected_auc` - `expected_auc`)
    of the first version to serve RECOVERY_IMPRESSIONS of it (the model as the drift found
    it) and of the last one to (trained on the most drifted traffic), and by how much the
    gap closed. None without a drift."""
    drifted = [
        {"version": r["version"], "impressions": r["impressions"],
         "gap": r["bayes_expected_auc"] - r["expected_auc"]}
        for r in rows
        if r["drifted"] and "expected_auc" in r and r["impressions"] >= RECOVERY_IMPRESSIONS
    ]  # fmt: skip
    if not drifted:
        return None
    first, last = drifted[0], drifted[-1]
    return {"first": first, "last": last, "gap_closed": first["gap"] - last["gap"]}


def load_truth(uri: str) -> SyntheticModel:
    """truth.json as generate wrote it (a storage URI or a local path)."""
    if "://" not in uri:
        uri = f"file://{uri}"
    root, _, name = uri.rpartition("/")
    return SyntheticModel.from_json(open_store(root).read_text(name))


def run_simulate(args: Any) -> dict[str, Any]:
    if args.truth:
        truth = load_truth(args.truth)
    else:
        truth = SyntheticModel.create(args.slots, args.vocab, args.seed, first_slot=args.first_slot)
    options = Options(
        serving_url=args.serving_url.rstrip("/"), token=args.token, seconds=args.seconds,
        qps=args.qps, batch=args.batch, threads=args.threads, click_delay=args.click_delay,
        late_share=args.late_share, late_after=args.late_after, drift_at=args.drift_at,
        seed=args.seed, record=args.record,
    )  # fmt: skip
    simulator = Simulator(truth, options)
    # SIGTERM or Ctrl-C ends the requests early; the clicks already due are still sent and
    # the record and summary written, as at the end of --seconds.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: simulator.stop.set())
    summary = simulator.run()
    print(json.dumps(summary), flush=True)
    return summary
