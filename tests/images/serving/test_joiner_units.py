"""The join's rules without a broker: a stream of records in memory, a clock the test
moves, and a restart after every single step (between any two records, and between a
partition's data file and its donefile): every impression ends up in exactly one written
partition, with the label its clicks gave it, whatever the crash point."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import pytest
from elasticctr_common.feedback import (
    Click,
    impressions_message,
    pack_impressions,
    partition_bounds,
)
from elasticctr_common.storage import Store, open_store
from elasticctr_joiner.joiner import DATA_FILE, Joiner, find_committed

IMP, CLK = "imp", "clk"
MINUTES, WINDOW = 5, 60.0
T0 = partition_bounds("20260101/1000", MINUTES)[0]


@dataclass
class Msg:
    topic_: str
    partition_: int
    offset_: int
    value_: bytes | None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def value(self) -> bytes | None:
        return self.value_


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def features(rid: str, i: int) -> str:
    return f"{zlib.crc32(rid.encode())}:1 {i + 7}:2"  # one of a kind per impression


def imp(rid: str, t: float, n: int = 1) -> bytes:
    """The record of request `rid`: `n` instances answered at `t`."""
    pairs = [[(zlib.crc32(rid.encode()), 1), (i + 7, 2)] for i in range(n)]
    return pack_impressions(rid, t, 1, [1, 2], [0.5] * n, pairs)


def click(rid: str, i: int, t: float) -> bytes:
    return Click(rid, i, t).to_bytes()


def scenario() -> tuple[list[tuple[float, Msg]], dict[tuple[str, int], int]]:
    """(arrival time, record) in arrival order over 2+2 topic partitions, and the label
    each good impression must get. Covers: clicks before and after their impression,
    duplicates of both, a late impression, a late click, an unknown click, bad records,
    records out of time order."""
    records: list[tuple[float, str, int, bytes | None]] = []
    labels: dict[tuple[str, int], int] = {}

    def put(at: float, topic: str, kp: int, value: bytes | None) -> None:
        records.append((T0 + at, topic, kp, value))

    for r in range(12):  # requests every 40 s over 8 minutes: two partitions and a bit
        rid, t = f"r{r}", 40.0 * r
        kp = r % 2
        put(t, IMP, kp, imp(rid, T0 + t, 2))
        labels[(rid, 0)] = labels[(rid, 1)] = 0
        if r % 3 == 0:  # clicked 30 s later
            put(t + 30, CLK, kp, click(rid, 1, T0 + t + 30))
            labels[(rid, 1)] = 1
    put(5, CLK, 1, click("r0", 1, T0 + 5))  # a duplicate click
    put(7, IMP, 0, imp("r0", T0, 2))  # a duplicate request (both impressions)
    put(9, CLK, 0, click("early", 0, T0 + 9))  # its impression comes 20 s later
    put(29, IMP, 0, imp("early", T0 + 8))
    labels[("early", 0)] = 1
    # A message of several records (as serving sends them): a bad one is skipped alone.
    put(11, IMP, 1, impressions_message([b"not json", imp("mixed", T0 + 11)]))
    labels[("mixed", 0)] = 0
    put(12, CLK, 1, b'{"rid": "x y", "i": 0, "t": 1}')
    put(13, CLK, 0, click("nobody", 3, T0 + 13))  # unknown
    # Two serving replicas a little out of step: "ahead" (10:05:01) is written before
    # "behind" (10:04:58) in the same topic partition, one message; 10:00 closes with
    # "ahead" still open in the message that wrote "behind", which a restart reads again
    # and must not write twice.
    put(301, IMP, 0, impressions_message([imp("ahead", T0 + 301), imp("behind", T0 + 298)]))
    labels[("ahead", 0)] = labels[("behind", 0)] = 0
    # After the first partition (10:00-10:05) closed at 10:06: a late impression of it
    # (goes to the next open partition) and a late click on r1 (written unclicked).
    put(6.5 * 60, IMP, 1, imp("late", T0 + 100))
    labels[("late", 0)] = 0
    put(6.6 * 60, CLK, 1, click("r1", 0, T0 + 6.6 * 60))
    records.sort(key=lambda r: r[0])  # offsets in the order records arrive
    offsets: dict[tuple[str, int], int] = {}
    events = []
    for at, topic, kp, value in records:
        n = offsets.get((topic, kp), 0)
        offsets[(topic, kp)] = n + 1
        events.append((at, Msg(topic, kp, n, value)))
    return events, labels


def written(store: Store) -> dict[str, list[str]]:
    parts = {}
    for day in store.list():
        for name in store.list(day):
            if store.exists(f"{day}/{name}/donefile"):
                path = f"{day}/{name}/{DATA_FILE}"
                lines = store.read_text(path).splitlines() if store.exists(path) else []
                parts[f"{day}/{name}"] = lines
    return parts


class Crash(Exception):
    pass


FIRST = {(IMP, 0): 0, (IMP, 1): 0, (CLK, 0): 0, (CLK, 1): 0}


class Harness:
    """A joiner fed the records as they arrive, closing what is due after each; `crash`
    drops it and starts another from what the dataset holds, as a restarted pod does."""

    def __init__(self, store: Store, events: list[tuple[float, Msg]]) -> None:
        self.store, self.events = store, events
        self.clock = Clock()
        self.steps = 0
        self.restart()

    def restart(self) -> None:
        committed = find_committed(self.store, MINUTES)
        self.joiner = Joiner(self.store, IMP, CLK, minutes=MINUTES, window=WINDOW,
                             committed=committed, clock=self.clock)  # fmt: skip
        self.position = self.joiner.start_positions(committed, FIRST)

    def advance(self, to: float, crash_at: int | None, crash_in_close: bool) -> None:
        """Feed every record that has arrived by `to` and was not fed yet."""
        self.clock.now = to
        for at, msg in self.events:
            key = (msg.topic(), msg.partition())
            if at > to or msg.offset() < self.position[key]:
                continue
            self.position[key] = msg.offset() + 1
            self.joiner.add(msg)
            self.steps += 1
            if self.steps == crash_at:
                raise Crash
        while (name := self.joiner.due()) is not None:
            self.steps += 1
            if self.steps == crash_at and crash_in_close:  # data file written, no donefile
                original = self.store.write_text

                def fail(path: str, text: str) -> None:
                    raise Crash

                self.store.write_text = fail  # type: ignore[method-assign]
                try:
                    self.joiner.close(name)
                finally:
                    self.store.write_text = original  # type: ignore[method-assign]
            self.joiner.close(name)
            if self.steps == crash_at:
                raise Crash


def drive(tmp_path, crash_at: int | None, crash_in_close: bool = False) -> dict[str, list[str]]:
    events, _ = scenario()
    store = open_store(f"file://{tmp_path}")
    harness = Harness(store, events)
    for minute in range(1, 20):  # the clock moves a minute at a time
        try:
            harness.advance(T0 + 60 * minute, crash_at, crash_in_close)
        except Crash:
            harness.restart()
            harness.advance(T0 + 60 * minute, None, False)
    return written(store)


def examples(parts: dict[str, list[str]]) -> list[tuple[str, str]]:
    return sorted((line.split(" ", 2)[2] + f" @{name}", line) for name, lines in parts.items()
                  for line in lines)  # fmt: skip


def test_without_a_crash_every_impression_once_with_its_label(tmp_path):
    _, labels = scenario()
    parts = drive(tmp_path, None)
    assert sorted(parts) == ["20260101/1000", "20260101/1005", "20260101/1010"]
    lines = [line for p in parts.values() for line in p]
    assert len(lines) == len(labels)  # the duplicate impression and the bad line are not
    clicked = sum(int(line.split()[1]) for line in lines)
    assert clicked == sum(labels.values())
    assert all(line.startswith("1 ") for line in lines)
    # the late impression (dated 10:01) went to 10:05, the partition open when it came
    assert any(features("late", 0) in line for line in parts["20260101/1005"])
    manifest = json.loads(open_store(f"file://{tmp_path}").read_text("20260101/1010/donefile"))
    assert manifest["examples"] == len(parts["20260101/1010"])
    assert set(manifest["offsets"]) == {IMP, CLK}


def test_the_counts_of_what_was_skipped(tmp_path):
    events, _ = scenario()
    harness = Harness(open_store(f"file://{tmp_path}"), events)
    for at, _ in events:
        harness.advance(at, None, False)
    harness.advance(T0 + 3600, None, False)
    harness.joiner.expire_clicks()
    c = harness.joiner.counts
    assert (c.duplicate_impressions, c.duplicate_clicks) == (2, 1)
    assert (c.late_impressions, c.late_clicks, c.unknown_clicks) == (1, 1, 1)
    assert c.bad == {"impression:not_json": 1, "click:bad_request_id": 1}


@pytest.mark.parametrize("crash_in_close", [False, True])
def test_a_crash_at_any_step_neither_loses_nor_duplicates(tmp_path, crash_in_close):
    reference = examples(drive(tmp_path / "reference", None))
    events, _ = scenario()
    for crash_at in range(1, len(events) + 4):  # every record, and the closes
        got = examples(drive(tmp_path / f"crash-{crash_at}-{crash_in_close}", crash_at,
                             crash_in_close))  # fmt: skip
        assert got == reference, f"crash after step {crash_at}"
