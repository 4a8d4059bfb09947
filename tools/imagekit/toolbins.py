"""Binaries the runtime stand-ins carry, built from Go modules by tools/build-tools.sh:
`minio` and `mc` (two tools), `volcano` (vc-scheduler, vc-controller-manager,
vc-webhook-manager), each tool in `<tools>/<tool>-<version>/bin`.

Where each binary is looked for, first hit wins: the explicit directory (--<tool>-bin-dir),
the directories of the environment variable ELASTICCTR_<TOOL>_BIN_DIR (colon-separated,
as PATH: minio and mc live in two), then those `tools/build-tools.sh --print-path` prints.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .paths import REPO_ROOT


@dataclass(frozen=True)
class ToolBins:
    tool: str
    paths: dict[str, Path]  # binary -> where it is (only those found)
    missing: tuple[str, ...]
    searched: tuple[str, ...]  # where it looked, for the error message

    @property
    def version(self) -> str | None:
        """From the name of the directory holding the binary named after the tool (or the
        first one): `<tool>-<version>/bin`, the build-tools layout."""
        path = self.paths.get(self.tool) or next(iter(self.paths.values()), None)
        if path is None:
            return None
        parent = path.parent.parent.name
        prefix = f"{self.tool}-"
        return parent[len(prefix) :] if parent.startswith(prefix) else None

    def missing_reason(self) -> str:
        return (
            f"{', '.join(self.missing)} not found (looked in: {', '.join(self.searched)}); "
            f"build with tools/build-tools.sh, or pass --{self.tool}-bin-dir "
            f"or set ELASTICCTR_{self.tool.upper()}_BIN_DIR"
        )


@functools.cache
def _build_tools_dirs() -> tuple[Path, ...]:
    script = REPO_ROOT / "tools" / "build-tools.sh"
    try:
        out = subprocess.run(
            ["bash", str(script), "--print-path"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return ()
    return tuple(Path(part) for part in out.strip().split(":") if part)


def find(tool: str, binaries: Sequence[str], explicit: Path | None = None) -> ToolBins:
    candidates: list[tuple[str, Path]] = []
    if explicit is not None:
        candidates.append((f"--{tool}-bin-dir", explicit))
    variable = f"ELASTICCTR_{tool.upper()}_BIN_DIR"
    for part in os.environ.get(variable, "").split(":"):
        if part:
            candidates.append((variable, Path(part)))
    candidates += [("tools/build-tools.sh --print-path", d) for d in _build_tools_dirs()]
    paths: dict[str, Path] = {}
    for binary in binaries:
        for _, directory in candidates:
            if (directory / binary).is_file():
                paths[binary] = directory / binary
                break
    missing = tuple(binary for binary in binaries if binary not in paths)
    searched = tuple(dict.fromkeys(source for source, _ in candidates)) or ("nowhere",)
    return ToolBins(tool, paths, missing, searched)
