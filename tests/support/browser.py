"""A real headless browser for the pages a person looks at: Debian's
chromium-headless-shell (tools/setup.sh installs it), run on a page until its scripts
settle, for the DOM they built and a screenshot kept with the test run's artifacts."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.prerequisites import unavailable
from tools.localcluster.settings import CACHE

BROWSERS = ("chromium-headless-shell", "chromium", "google-chrome")
# Screenshots and such, kept after the run (CI's output names them).
ARTIFACTS = Path(os.environ.get("ELASTICCTR_TEST_ARTIFACTS", CACHE / "test-artifacts"))


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    unavailable(
        f"no headless browser ({', '.join(BROWSERS)}): apt-get install chromium-headless-shell"
    )
    raise AssertionError("unreachable")


def _run(url: str, *flags: str, budget_ms: int) -> str:
    with tempfile.TemporaryDirectory(prefix="elasticctr-browser-") as profile:
        done = subprocess.run(
            [
                browser(),
                # As root (CI) Chromium's sandbox cannot start; the pages are the tests' own.
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--window-size=1400,1000",
                # Scripts' timers run ahead to this much virtual time: the page settles.
                f"--virtual-time-budget={budget_ms}",
                "--run-all-compositor-stages-before-draw",
                *flags,
                url,
            ],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def render(url: str, screenshot: str, budget_ms: int = 20000) -> tuple[str, Path]:
    """The page's DOM once its scripts ran, and its screenshot saved as ARTIFACTS/<screenshot>."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / screenshot
    dom = _run(url, "--dump-dom", budget_ms=budget_ms)
    _run(url, f"--screenshot={path}", budget_ms=budget_ms)
    print(f"screenshot of {url}: {path}")
    return dom, path
