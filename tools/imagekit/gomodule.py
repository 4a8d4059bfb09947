"""A Go module's files from the module cache (`go mod download`): the Volcano chart, kwok's
stages. Read in place, never copied into this repository."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class ModuleUnavailable(RuntimeError):
    pass


@functools.cache
def module_dir(module: str, version: str) -> Path:
    """`module`@`version`'s directory in the Go module cache (downloaded once)."""
    # As tools/build-tools.sh finds it: sudo's PATH (secure_path) lacks Go's usual place.
    go = os.environ.get("GO") or shutil.which("go") or "/usr/local/go/bin/go"
    with tempfile.TemporaryDirectory() as outside_any_module:
        try:
            out = subprocess.run(
                [go, "mod", "download", "-json", f"{module}@{version}"],
                cwd=outside_any_module,
                env={**os.environ, "GOFLAGS": "-mod=mod"},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        except (OSError, subprocess.CalledProcessError) as why:
            raise ModuleUnavailable(f"go mod download {module}@{version} failed: {why}") from why
    return Path(json.loads(out)["Dir"])
