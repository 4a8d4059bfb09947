"""A pass's data files: listed from the hour directories, split across trainers, made
local for Paddle's dataset, and the pipe's per-file reports mapped back to their URIs.

Paddle's dataset opens local paths only (its HDFS path shells out to a `hadoop` binary,
which this image does not have), so files on s3:// or hdfs:// are downloaded to
`<work_dir>/stage/`, only the ones this trainer reads; file:// paths are used in place.

Paddle puts `zcat` in front of the pipe command for a path ending in `.gz`: the pipe would
then read a pipe, not the file, could not name it in its report, and would not learn of a
truncated file (zcat's exit status goes nowhere). Such a file is staged under a name
without that ending (a symbolic link for file://), so the pipe reads the file itself and
decompresses it, like data of any compression it reads, by its first bytes.

Every staged file must come back with one pipe report; a file without one (the pipe was
killed, or the file vanished before it was read) is reported as failed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from elasticctr_common.storage import Store

from .hours import data_files


@dataclass
class StagedPass:
    local_paths: list[str] = field(default_factory=list)
    uri_of: dict[str, str] = field(default_factory=dict)  # local path -> source URI


def split_files(data: Store, hours: list[str], trainer: int, trainers: int) -> list[str]:
    """This trainer's share: file j of the pass (hours in order, names sorted) goes to
    trainer j % trainers."""
    files = [path for hour in hours for path in data_files(data, hour)]
    return files[trainer::trainers]


NO_REPORT = "the pipe command wrote no report for it (killed, or the file could not be read)"
PADDLE_UNZIPS = ".gz"  # Paddle's fs_open_read pipes such paths through zcat


def _local_name(number: int, name: str) -> str:
    name = f"{number:05d}-{name}"
    return name + ".data" if name.endswith(PADDLE_UNZIPS) else name


def stage(data: Store, paths: list[str], stage_dir: str) -> StagedPass:
    staged = StagedPass()
    shutil.rmtree(stage_dir, ignore_errors=True)
    if urlparse(data.uri()).scheme == "file":
        root = urlparse(data.uri()).path
        for number, path in enumerate(paths):
            local = os.path.join(root, path)
            if local.endswith(PADDLE_UNZIPS):
                link = os.path.join(stage_dir, _local_name(number, Path(path).name))
                os.makedirs(stage_dir, exist_ok=True)
                os.symlink(local, link)
                local = link
            staged.local_paths.append(local)
            staged.uri_of[os.path.realpath(local)] = data.uri(path)
        return staged
    for number, path in enumerate(paths):
        local = os.path.join(stage_dir, _local_name(number, Path(path).name))
        data.download(path, local)
        staged.local_paths.append(local)
        staged.uri_of[os.path.realpath(local)] = data.uri(path)
    return staged


def collect_reports(report_dir: str, staged: StagedPass) -> list[dict[str, Any]]:
    """The pipe's reports of this pass, with `file` set to the source URI, plus a failed
    report for each staged file that has none."""
    reports = []
    directory = Path(report_dir)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        report = json.loads(path.read_text(encoding="utf-8"))
        local = os.path.realpath(report.pop("path"))
        report["file"] = staged.uri_of.get(local, local)
        report.setdefault("failed", None)
        reports.append(report)
    reported = {r["file"] for r in reports}
    for local in staged.local_paths:
        uri = staged.uri_of[os.path.realpath(local)]
        if uri not in reported:
            reports.append(
                {"file": uri, "lines": 0, "bad": 0, "reasons": {}, "first_bad": [],
                 "failed": NO_REPORT}
            )  # fmt: skip
    return reports
