"""`--cpu-top`: a test's CPU counts the processes it waited for, and the list is sorted."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
import subprocess, sys

def test_idle():
    pass

def test_busy_child():
    burn = "import time\\nend = time.process_time() + 0.6\\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
"""


def test_the_tests_that_cost_most_cpu_are_listed_first(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.cpu_report", "--cpu-top", "2",
         "-p", "no:cacheprovider", str(tmp_path / "test_suite.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    listed = re.findall(r"^\s*([\d.]+)s cpu  \S+::(\w+)$", done.stdout, re.M)
    assert [name for _, name in listed] == ["test_busy_child", "test_idle"], done.stdout
    assert float(listed[0][0]) >= 0.6 > float(listed[1][0]), listed
    assert "most CPU: top 2 of" in done.stdout
