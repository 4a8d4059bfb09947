"""Hour directories `<dataset>/YYYYMMDD/HH/`, ready when their `donefile` exists.

Offline: the hours START..END that are ready once END is (or the wait is over), the rest
skipped and reported.
Online: hours from START on, waiting for each one's donefile in turn.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

from elasticctr_common.contract import DONEFILE, HOUR_FORMAT
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


def wait_for_hours(
    data: Store,
    start: str,
    end: str | None,
    poll_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[str]:
    """Online: yield each hour from START once its donefile exists; stop after END if set."""
    hour = start
    while end is None or parse_hour(hour) <= parse_hour(end):
        waited = False
        while not is_ready(data, hour):
            if not waited:
                log.info("online: waiting for %s/%s", data.uri(hour), DONEFILE)
                waited = True
            sleep(poll_seconds)
        yield hour
        hour = next_hour(hour)
