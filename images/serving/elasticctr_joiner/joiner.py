"""The join (docs/feedback.md): impressions and clicks from Kafka -> labelled examples in
time partitions the trainer reads, each closed with its donefile, exactly once.

An impression belongs to the partition of its serving time, or, when that partition is
already closed when the impression is read (it came late: a broker outage, a joiner
down for longer than the window), to the first partition still open. A click labels its
impression if it is read before that partition closes. Partition P = [s, e) closes once
the clock is past e + join_window and the joiner has read every record the broker held
then (each topic partition's position at its high watermark): its examples
(`1 <click> <features>`) go to `P/part-00000`, then its donefile, which is the commit.

Exactly once, without Kafka transactions: the donefile holds the offsets the partition
covers, per topic partition, `end` (the position when it closed) and `start` (the
oldest record still needed: an impression of a later partition, a click on one, or a
click whose impression was not read yet). A restarted joiner finds the newest partition
with a donefile, seeks each topic partition to its `start`, and while re-reading below
`end` skips the impressions whose partition is that one or earlier: exactly those were
written (any record read before the close with its partition at or before the closed
one was written by then). A crash before a donefile leaves a data file the next close
overwrites; nothing is half-visible (the trainer waits for the donefile).

Counted, never fatal: malformed records (by reason), duplicate impressions and clicks,
late impressions (written to the next open partition), late clicks (their impression's
partition had closed: the example was written unclicked), unknown clicks (no impression
within the window), impressions dated far in the future.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from elasticctr_common.contract import DONEFILE
from elasticctr_common.feedback import (
    BadRecord,
    Impression,
    impression_records,
    impressions,
    is_partition_name,
    next_partition,
    parse_click,
    parse_partition,
    partition_bounds,
    partition_of,
)
from elasticctr_common.online_eval import OnlineEvaluator
from elasticctr_common.storage import Store

log = logging.getLogger("elasticctr_joiner")

DATA_FILE = "part-00000"
FUTURE_SECONDS = 3600.0  # an impression dated further ahead than this is refused
RECENT_PARTITIONS = 3  # closed partitions whose keys are kept (late and duplicate clicks)
# (topic, partition) -> next offset to read
Positions = dict[tuple[str, int], int]


class Message(Protocol):
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def value(self) -> bytes | None: ...


@dataclass
class _Pending:
    impression: Impression
    partition: int
    offset: int
    click: tuple[int, int] | None = None  # (partition, offset) of the click that labels it


@dataclass
class _Click:
    partition: int
    offset: int
    read_at: float
    replayed: bool


@dataclass
class Counts:
    """What the joiner saw since it started (the metrics and /status)."""

    impressions: int = 0
    examples: int = 0
    clicked: int = 0
    clicks: int = 0
    late_impressions: int = 0
    late_clicks: int = 0
    unknown_clicks: int = 0
    duplicate_impressions: int = 0
    duplicate_clicks: int = 0
    future_impressions: int = 0
    partitions: int = 0
    bad: dict[str, int] = field(default_factory=dict)  # "impression:<reason>" -> n

    def as_dict(self) -> dict[str, Any]:
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self.__dict__.items()}


@dataclass
class Committed:
    """The newest closed partition and what it covers (its donefile)."""

    partition: str
    end: Positions
    start: Positions


def manifest_positions(data: dict[str, Any], key: str) -> Positions:
    return {
        (topic, int(p)): int(v[key])
        for topic, parts in data["offsets"].items()
        for p, v in parts.items()
    }


def find_committed(dataset: Store, minutes: int) -> Committed | None:
    """The newest partition of `dataset` whose donefile is a joiner's manifest."""
    days = sorted((d for d in dataset.list() if d.isdigit() and len(d) == 8), reverse=True)
    for day in days:
        names = sorted(
            (f"{day}/{n}" for n in dataset.list(day) if is_partition_name(f"{day}/{n}", minutes)),
            reverse=True,
        )
        for name in names:
            done = f"{name}/{DONEFILE}"
            if not dataset.exists(done):
                continue
            try:
                data = json.loads(dataset.read_text(done))
                return Committed(
                    name, manifest_positions(data, "end"), manifest_positions(data, "start")
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("%s is not a joiner's manifest: looking further back", done)
    return None


class Joiner:
    """The join's state and rules; `run.py` feeds it messages and closes partitions."""

    def __init__(
        self,
        dataset: Store,
        impressions_topic: str,
        clicks_topic: str,
        *,
        minutes: int,
        window: float,
        committed: Committed | None,
        clock: Callable[[], float] = time.time,
        evaluator: OnlineEvaluator | None = None,
    ) -> None:
        self.dataset = dataset
        self.impressions_topic, self.clicks_topic = impressions_topic, clicks_topic
        self.minutes, self.window = minutes, window
        self.clock = clock
        self.closed = committed.partition if committed else None
        self.replay_end: Positions = dict(committed.end) if committed else {}
        self.positions: Positions = {}
        self.open: dict[str, dict[tuple[str, int], _Pending]] = {}
        self.where: dict[tuple[str, int], str] = {}  # key -> its open partition
        self.waiting_clicks: OrderedDict[tuple[str, int], _Click] = OrderedDict()
        self.recent: OrderedDict[str, set[tuple[str, int]]] = OrderedDict()
        self.counts = Counts()
        self.last_close: dict[str, Any] = {}
        # Each written example with a score, by the version that scored it.
        self.evaluator = evaluator

    # reading ---------------------------------------------------------------------------------

    def start_positions(self, committed: Committed | None, first: Positions) -> Positions:
        """Where each topic partition is read from: the committed `start`, else `first`
        (the beginning of what the broker holds)."""
        positions = dict(first)
        if committed is not None:
            positions.update({k: v for k, v in committed.start.items() if k in positions})
        self.positions = dict(positions)
        return positions

    def _bad(self, kind: str, err: BadRecord) -> None:
        key = f"{kind}:{err.reason}"
        self.counts.bad[key] = self.counts.bad.get(key, 0) + 1

    def _replayed(self, topic: str, partition: int, offset: int) -> bool:
        return offset < self.replay_end.get((topic, partition), 0)

    def add(self, message: Message) -> None:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        self.positions[(topic, partition)] = offset + 1
        if topic == self.impressions_topic:
            self._impression(message.value(), partition, offset)
        elif topic == self.clicks_topic:
            self._click(message.value(), partition, offset)

    def _impression(self, value: bytes | None, kp: int, offset: int) -> None:
        for record in impression_records(value):
            self._request(record, kp, offset)

    def _request(self, record: bytes | None, kp: int, offset: int) -> None:
        """One request's impressions (one record, so one partition for all of them)."""
        try:
            request = impressions(record)
        except BadRecord as err:
            if not self._replayed(self.impressions_topic, kp, offset):
                self._bad("impression", err)
            return
        at = request[0].time
        own = partition_of(at, self.minutes)
        closed = self.closed
        if closed is not None and parse_partition(own, self.minutes) <= parse_partition(
            closed, self.minutes
        ):
            if self._replayed(self.impressions_topic, kp, offset):
                return  # written before the restart
            self.counts.late_impressions += len(request)
            own = next_partition(closed, self.minutes)
        elif at > self.clock() + FUTURE_SECONDS:
            self.counts.future_impressions += len(request)
            return
        for impression in request:
            key = impression.key
            if key in self.where or any(key in keys for keys in self.recent.values()):
                self.counts.duplicate_impressions += 1
                continue
            self.counts.impressions += 1
            pending = _Pending(impression, kp, offset)
            click = self.waiting_clicks.pop(key, None)
            if click is not None:
                pending.click = (click.partition, click.offset)
            self.open.setdefault(own, {})[key] = pending
            self.where[key] = own

    def _click(self, value: bytes | None, kp: int, offset: int) -> None:
        replayed = self._replayed(self.clicks_topic, kp, offset)
        try:
            click = parse_click(value)
        except BadRecord as err:
            if not replayed:
                self._bad("click", err)
            return
        key = click.key
        if not replayed:
            self.counts.clicks += 1
        own = self.where.get(key)
        if own is not None:
            pending = self.open[own][key]
            if pending.click is None:
                pending.click = (kp, offset)
            elif not replayed:
                self.counts.duplicate_clicks += 1
        elif any(key in keys for keys in self.recent.values()):
            if not replayed:
                self.counts.late_clicks += 1
        elif key in self.waiting_clicks:
            if not replayed:
                self.counts.duplicate_clicks += 1
        else:
            self.waiting_clicks[key] = _Click(kp, offset, self.clock(), replayed)

    def expire_clicks(self) -> None:
        """Clicks whose impression did not come within the window (and a partition's
        length, for impressions still on their way) are unknown."""
        limit = self.clock() - self.window - self.minutes * 60
        while self.waiting_clicks:
            key, click = next(iter(self.waiting_clicks.items()))
            if click.read_at > limit:
                break
            del self.waiting_clicks[key]
            if not click.replayed:
                self.counts.unknown_clicks += 1

    # closing ---------------------------------------------------------------------------------

    def next_to_close(self) -> str | None:
        if self.closed is not None:
            return next_partition(self.closed, self.minutes)
        if not self.open:
            return None
        return min(self.open, key=lambda p: parse_partition(p, self.minutes))

    def due(self) -> str | None:
        """The partition whose window is over by the clock, if any."""
        name = self.next_to_close()
        if name is None:
            return None
        _, end = partition_bounds(name, self.minutes)
        return name if self.clock() >= end + self.window else None

    def close(self, name: str) -> dict[str, Any]:
        """Write partition `name` (its data file, then its donefile) and forget it."""
        pending = self.open.pop(name, {})
        lines = []
        clicked = 0
        scored: list[tuple[int, float, float, int]] = []  # version, time, score, label
        for p in pending.values():
            click = 1 if p.click is not None else 0
            clicked += click
            lines.append(f"1 {click} {p.impression.features}\n")
            imp = p.impression
            if imp.score is not None:
                scored.append((imp.version, imp.time, imp.score, click))
        files = []
        if lines:
            self.dataset.write_bytes(f"{name}/{DATA_FILE}", "".join(lines).encode())
            files.append(DATA_FILE)
        start = self._still_needed()
        offsets: dict[str, dict[str, dict[str, int]]] = {}
        for (topic, kp), end in sorted(self.positions.items()):
            offsets.setdefault(topic, {})[str(kp)] = {
                "start": start.get((topic, kp), end),
                "end": end,
            }
        manifest = {
            "partition": name,
            "minutes": self.minutes,
            "join_window_seconds": self.window,
            "examples": len(lines),
            "clicked": clicked,
            "files": files,
            "offsets": offsets,
            "closed_at": self.clock(),
        }
        self.dataset.write_text(f"{name}/{DONEFILE}", json.dumps(manifest, sort_keys=True))
        if self.evaluator is not None:  # once written: what the trainer sees, once
            for example in scored:
                self.evaluator.add(*example)
        for key in pending:
            del self.where[key]
        self.recent[name] = set(pending)
        while len(self.recent) > RECENT_PARTITIONS:
            self.recent.popitem(last=False)
        self.closed = name
        self.replay_end = {}  # what was re-read is behind us now
        self.counts.examples += len(lines)
        self.counts.clicked += clicked
        self.counts.partitions += 1
        self.last_close = {
            k: manifest[k] for k in ("partition", "examples", "clicked", "closed_at")
        }
        log.info("closed %s: %d examples, %d clicked", name, len(lines), clicked)
        return manifest

    def _still_needed(self) -> Positions:
        """Per topic partition, the oldest offset a restart must read again."""
        oldest: Positions = {}

        def need(topic: str, kp: int, offset: int) -> None:
            key = (topic, kp)
            if offset < oldest.get(key, offset + 1):
                oldest[key] = offset

        for partition in self.open.values():
            for p in partition.values():
                need(self.impressions_topic, p.partition, p.offset)
                if p.click is not None:
                    need(self.clicks_topic, *p.click)
        for click in self.waiting_clicks.values():
            need(self.clicks_topic, click.partition, click.offset)
        return oldest

    def status(self) -> dict[str, Any]:
        return {
            "closed": self.closed,
            "open": {name: len(p) for name, p in sorted(self.open.items())},
            "waiting_clicks": len(self.waiting_clicks),
            "last_close": self.last_close,
            "counts": self.counts.as_dict(),
            "positions": {f"{t}/{p}": o for (t, p), o in sorted(self.positions.items())},
        }


def oldest_first(names: Iterable[str], minutes: int) -> list[str]:
    return sorted(names, key=lambda n: parse_partition(n, minutes))
