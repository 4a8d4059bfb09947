"""`upload`: local ElasticCTR hour directories and slot.conf -> the stack's storage.

Source layout: `<dir>/YYYYMMDD/HH/<data files>` (+ `donefile`), as the trainer reads it
(docs/architecture.md). Each hour's data files go first and its donefile last, so the
trainer never sees a ready hour with missing files; an hour without a local donefile is
uploaded without one (not ready) and reported. The destination is any storage URI
(`s3://bucket/prefix`, `hdfs://host:port/path`, `file:///path`).
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from elasticctr_common.contract import DONEFILE
from elasticctr_common.slotconf import read_slot_conf
from elasticctr_common.storage import open_store

DAY, HOUR = re.compile(r"^\d{8}$"), re.compile(r"^\d{2}$")


@dataclass
class UploadReport:
    ready: list[str] = field(default_factory=list)  # hours uploaded with their donefile
    not_ready: list[str] = field(default_factory=list)  # hours uploaded without one
    files: int = 0
    bytes: int = 0


def hour_dirs(source: Path) -> list[Path]:
    """`YYYYMMDD/HH` directories under `source`, in time order."""
    days = sorted(d for d in source.iterdir() if d.is_dir() and DAY.match(d.name))
    return [h for d in days for h in sorted(d.iterdir()) if h.is_dir() and HOUR.match(h.name)]


def upload(
    source: Path, dest_uri: str, slot_conf: Path | None = None, log: TextIO = sys.stderr
) -> UploadReport:
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not a directory")
    hours = hour_dirs(source)
    if not hours:
        raise FileNotFoundError(f"{source} has no YYYYMMDD/HH hour directories")
    if slot_conf is not None:
        read_slot_conf(slot_conf)  # SlotConfError names the bad line before anything is sent
    store = open_store(dest_uri)
    report = UploadReport()
    for hour in hours:
        name = f"{hour.parent.name}/{hour.name}"
        files = sorted(f for f in hour.iterdir() if f.is_file() and f.name != DONEFILE)
        for f in files:
            store.upload(f, f"{name}/{f.name}")
            report.files += 1
            report.bytes += f.stat().st_size
        if (hour / DONEFILE).exists():
            store.upload(hour / DONEFILE, f"{name}/{DONEFILE}")  # last: the hour is ready
            report.ready.append(name)
        else:
            report.not_ready.append(name)
        print(
            f"{name}: {len(files)} files"
            + ("" if name in report.ready else " (no donefile: not ready for training)"),
            file=log,
        )
    if slot_conf is not None:
        store.upload(slot_conf, "slot.conf")
        print(
            f"slot.conf -> {store.uri('slot.conf')} (training reads the stack's slot_conf: "
            f"`pulumi config set slot_conf {shlex.quote(str(slot_conf.resolve()))}`)",
            file=log,
        )
    return report
