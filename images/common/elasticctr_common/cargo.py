"""`cargo build --release --locked` of one of the project's Rust crates (the cube-server,
serving's request parser), for tests, benchmarks and local runs; images build theirs in a
Rust stage of their Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


class CargoBuildError(RuntimeError):
    """cargo is missing or the build failed; the message says which, with cargo's output."""


def cargo_build(crate_dir: Path, artifact: str, what: str, offline: bool = False) -> Path:
    """Build `crate_dir` (incremental, cached in its target/); the path of `artifact` in
    target/release. `what` names the crate in errors ("the native cube-server")."""
    cargo = shutil.which("cargo")
    if not cargo:
        raise CargoBuildError(f"cargo is not installed: cannot build {what}")
    cmd = [cargo, "build", "--release", "--locked", "--quiet"] + (["--offline"] if offline else [])
    done = subprocess.run(cmd, cwd=crate_dir, capture_output=True, text=True)
    if done.returncode != 0:
        raise CargoBuildError(
            f"cargo build of {what} failed in {crate_dir}:\n{done.stderr[-4000:]}"
        )
    return crate_dir / "target" / "release" / artifact
