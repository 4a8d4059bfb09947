"""A pass's data files: listed from the hour directories, split across trainers, made
local for Paddle's dataset, and the pipe's per-file reports mapped back to their URIs.

Paddle's dataset opens local paths only (its HDFS path shells out to a `hadoop` binary,
which this image does not have), so files on s3:// or hdfs:// are downloaded to
`<work_dir>/stage/`, only the ones this trainer reads; file:// paths are used in place.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
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


def stage(data: Store, paths: list[str], stage_dir: str) -> StagedPass:
    staged = StagedPass()
    if urlparse(data.uri()).scheme == "file":
        root = urlparse(data.uri()).path
        for path in paths:
            local = os.path.join(root, path)
            staged.local_paths.append(local)
            staged.uri_of[os.path.realpath(local)] = data.uri(path)
        return staged
    shutil.rmtree(stage_dir, ignore_errors=True)
    for number, path in enumerate(paths):
        local = os.path.join(stage_dir, f"{number:05d}-{Path(path).name}")
        data.download(path, local)
        staged.local_paths.append(local)
        staged.uri_of[os.path.realpath(local)] = data.uri(path)
    return staged


def collect_reports(report_dir: str, staged: StagedPass) -> list[dict]:
    """The pipe's reports of this pass, with `file` set to the source URI."""
    reports = []
    directory = Path(report_dir)
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        report = json.loads(path.read_text(encoding="utf-8"))
        local = os.path.realpath(report.pop("path"))
        report["file"] = staged.uri_of.get(local, local)
        reports.append(report)
    return reports
