"""tools/local.sh's commands that need no cluster: its usage, and `env` refusing while the
local cluster is down (the walkthrough that uses it on a running cluster is
tests/cluster/test_readme_walkthrough.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def local_sh(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """local.sh with a cache of its own: no cluster and no stack state there."""
    env = {**os.environ, "ELASTICCTR_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "local.sh"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_usage_lists_every_command(tmp_path: Path) -> None:
    done = local_sh(tmp_path)
    assert done.returncode == 2
    for command in ("up", "destroy", "down", "env"):
        assert f"tools/local.sh {command}" in done.stderr, done.stderr


def test_env_refuses_while_the_cluster_is_down(tmp_path: Path) -> None:
    done = local_sh(tmp_path, "env")
    assert done.returncode == 1
    assert done.stdout == ""  # nothing for the caller's `eval`
    assert done.stderr.strip() == (
        "error: the local cluster is not up: run `sudo tools/local.sh up` first"
    )
