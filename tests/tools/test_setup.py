"""tools/setup.sh's arguments: `--demo` needs only Python and cargo, anything else is refused
before the set-up touches anything."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setup(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """setup.sh with a PATH holding nothing but `dirname`: no cargo, pip or apt-get to reach."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    dirname = shutil.which("dirname")
    assert dirname is not None
    (bin_dir / "dirname").symlink_to(dirname)
    return subprocess.run(
        ["/bin/bash", str(ROOT / "tools" / "setup.sh"), *argv],
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_an_unknown_argument_is_refused_naming_what_is_allowed(tmp_path: Path) -> None:
    done = setup(tmp_path, "--bogus")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "set-up: unknown argument '--bogus'; allowed: --demo (only what the demo needs), or none"
    )


def test_the_demo_set_up_asks_for_cargo_first(tmp_path: Path) -> None:
    done = setup(tmp_path, "--demo")
    assert done.returncode == 1
    assert "'cargo' is missing: install Rust with rustup" in done.stderr


def test_the_full_set_up_installs_what_the_demo_does() -> None:
    assert "-r requirements-demo.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
