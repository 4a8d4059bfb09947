"""Hour directories `<dataset>/YYYYMMDD/HH/` (or N-minute partitions `YYYYMMDD/HHMM/`,
`runner.partition_minutes`), ready when their `donefile` exists.

Offline: the hours START..END that are ready once END is (or the wait is over), the rest
skipped and reported.
Online: partitions from START on, waiting for each one's donefile in turn. Partitions are
written in order (by the feedback joiner, or a log pipeline), so once a later one is
ready an earlier one that is not will not come: it is skipped and reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from elasticctr_common.contract import DONEFILE, HOUR_FORMAT
from elasticctr_common.feedback import (
    format_partition,
    is_partition_name,
    next_partition,
    parse_partition,
)
from elasticctr_common.storage import Store
from elasticctr_common.trainer_json import parse_hour

log = logging.getLogger(__name__)


def format_hour(hour: datetime) -> str:
    return hour.strftime(HOUR_FORMAT)


def hour_range(start: str, end: str) -> list[str]:
    first, last = parse_hour(start), parse_hour(end)
    hours = []
    while first <= last:
        hours.append(format_hour(first))
        first += timedelta(hours=1)
    return hours


def next_hour(hour: str) -> str:
    return format_hour(parse_hour(hour) + timedelta(hours=1))


def partition_name(text: str, minutes: int) -> str:
    """The canonical name of a partition given as YYYYMMDD/HH or YYYYMMDD/HHMM."""
    return format_partition(parse_partition(text, minutes), minutes)


def is_ready(data: Store, hour: str) -> bool:
    return data.exists(f"{hour}/{DONEFILE}")


def data_files(data: Store, hour: str) -> list[str]:
    """Paths (relative to the dataset root) of an hour's data files, sorted."""
    names = data.list(hour)
    return [f"{hour}/{n}" for n in names if n != DONEFILE and not n.startswith(("_", "."))]


def ready_hours(data: Store, start: str, end: str) -> tuple[list[str], list[str]]:
    """(ready, skipped) hours of START..END for offline training."""
    ready: list[str] = []
    skipped: list[str] = []
    for hour in hour_range(start, end):
        (ready if is_ready(data, hour) else skipped).append(hour)
    return ready, skipped


def wait_for_range(
    data: Store,
    start: str,
    end: str,
    wait_seconds: float,
    poll_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[list[str], list[str]]:
    """Offline: (ready, skipped) hours of START..END once END's donefile exists (hours are
    written in order, so a missing earlier hour will not come), or every hour is ready, or
    `wait_seconds` have passed: a job started before its data waits for it."""
    deadline = clock() + wait_seconds
    waited = False
    while True:
        ready, skipped = ready_hours(data, start, end)
        if not skipped or end in ready or clock() >= deadline:
            return ready, skipped
        if not waited:
            log.info(
                "offline: waiting up to %.0fs for %s", wait_seconds, data.uri(f"{end}/{DONEFILE}")
            )
            waited = True
        sleep(poll_seconds)


def first_ready(
    data: Store,
    start: str,
    minutes: int,
    wait_seconds: float,
    poll_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Online: the partition the first pass trains (START once its donefile exists, or a
    later one that is ready while START is not, as wait_for_hours skips), waiting up to
    `wait_seconds` for either; None if there is none by then."""
    part = partition_name(start, minutes)
    deadline = clock() + wait_seconds
    waited = False
    while True:
        if is_ready(data, part):
            return part
        later = later_ready(data, part, minutes)
        if later is not None or clock() >= deadline:
            return later
        if not waited:
            log.info(
                "online: waiting up to %.0fs for %s/%s", wait_seconds, data.uri(part), DONEFILE
            )
            waited = True
        sleep(poll_seconds)


def later_ready(data: Store, after: str, minutes: int) -> str | None:
    """The first partition after `after` whose donefile exists, looking in `after`'s day
    and the days after it that the dataset has; None if there is none."""
    first = parse_partition(after, minutes)
    day = first.strftime("%Y%m%d")
    days = sorted(d for d in data.list() if d.isdigit() and len(d) == 8 and d >= day)
    for d in days:
        names = sorted(f"{d}/{n}" for n in data.list(d) if is_partition_name(f"{d}/{n}", minutes))
        for name in names:
            if parse_partition(name, minutes) > first and is_ready(data, name):
                return name
    return None


def wait_for_hours(
    data: Store,
    start: str,
    end: str | None,
    poll_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    minutes: int = 60,
    skipped: Callable[[list[str]], None] | None = None,
) -> Iterator[str]:
    """Online: yield each partition from START once its donefile exists; stop after END if
    set. A partition still missing when a later one is ready is skipped (`skipped` hears
    of it): they are written in order, so it will not come."""
    part = partition_name(start, minutes)
    last = parse_partition(end, minutes) if end is not None else None
    while last is None or parse_partition(part, minutes) <= last:
        waited = False
        while not is_ready(data, part):
            later = later_ready(data, part, minutes)
            if later is not None and (last is None or parse_partition(later, minutes) <= last):
                gap = []
                while part != later:
                    gap.append(part)
                    part = next_partition(part, minutes)
                log.warning("online: %s not ready while %s is: skipped", ", ".join(gap), later)
                if skipped is not None:
                    skipped(gap)
                break
            if not waited:
                log.info("online: waiting for %s/%s", data.uri(part), DONEFILE)
                waited = True
            sleep(poll_seconds)
        yield part
        part = next_partition(part, minutes)
