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

import yaml
from elasticctr_common.ports import free_port

from tests.support.prerequisites import unavailable
from tests.support.pulumi_cli import search_path
from tests.support.services import ServerProcess, http_ready


def binary(name: str) -> str:
    """`prometheus` or `promtool` (tools/build-tools.sh prometheus); the test is skipped
    (failed in CI) without it."""
    path = shutil.which(name, path=search_path())
    if path is None:
        unavailable(f"no {name}: tools/build-tools.sh prometheus builds it")
        raise AssertionError("unreachable")
    return path


def promtool() -> str:
    return binary("promtool")


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


class PrometheusServer(ServerProcess):
    """A Prometheus on 127.0.0.1 evaluating `rules` (a rule file's dict) every second, with
    no scrape job but its own."""

    name = "prometheus"

    def __init__(self, rules: dict[str, Any]) -> None:
        super().__init__()
        self.rules = rules
        self.port = free_port()
        self.exe = binary("prometheus")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        assert self.workdir is not None
        (self.workdir / "rules.yml").write_text(yaml.safe_dump(self.rules))
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yml"],
        }
        (self.workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        return [
            self.exe,
            "--config.file=prometheus.yml",
            f"--storage.tsdb.path={self.workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]

    def _ready(self) -> bool:
        return http_ready(f"{self.url}/-/ready")

    def _pick_new_port(self) -> bool:
        self.port = free_port()
        return True
