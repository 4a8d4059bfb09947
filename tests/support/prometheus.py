"""Prometheus's own tools for the tests: promtool (built by tools/build-tools.sh
prometheus) and the HTTP API of a running server."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.prerequisites import unavailable
from tests.support.pulumi_cli import search_path


def promtool() -> str:
    """promtool's path; the test is skipped (failed in CI) without it."""
    path = shutil.which("promtool", path=search_path())
    if path is None:
        unavailable("no promtool: tools/build-tools.sh prometheus builds it")
        raise AssertionError("unreachable")
    return path


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def api_get(base_url: str, path: str, **params: str) -> Any:
    """`data` of a Prometheus HTTP API answer (fails on an error status)."""
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{base_url.rstrip('/')}{path}{query}", timeout=30) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return body["data"]
