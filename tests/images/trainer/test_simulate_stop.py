"""The simulator stopped early (SIGTERM, as a test or a user's Ctrl-C does): its requests
end, the clicks already due are sent, and its record and summary are written as at the end
of --seconds. Against real serving (3 cube shards, version 1)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from elasticctr_cube.server import build_server
from elasticctr_serving.native import build_parser

from tests.support.lifecycle import workload_env
from tests.support.serving import Processes, Stack, start_stack

pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    build_server()
    build_parser()
    processes = Processes(tmp_path)
    try:
        yield start_stack(processes, tmp_path)
    finally:
        processes.stop_all()


def test_sigterm_ends_the_simulation_with_its_record_and_summary(stack, tmp_path):
    record = tmp_path / "impressions.jsonl"
    sim = subprocess.Popen(
        [sys.executable, "-m", "elasticctr_trainer", "simulate",
         "--serving-url", stack.serving.url, "--slots", "8", "--first-slot", "101",
         "--seconds", "600", "--qps", "20", "--batch", "2", "--click-delay", "0.1",
         "--late-share", "0", "--record", str(record)],
        env=workload_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        time.sleep(5)
        assert sim.poll() is None
        stopped = time.monotonic()
        sim.send_signal(signal.SIGTERM)
        out, err = sim.communicate(timeout=60)
    finally:
        if sim.poll() is None:
            sim.kill()
            sim.wait()
    assert sim.returncode == 0, err[-2000:]
    assert time.monotonic() - stopped < 30
    summary = json.loads(out.strip().splitlines()[-1])
    sent = [json.loads(line) for line in record.read_text().splitlines()]
    assert summary["impressions"] == len(sent) > 0 and summary["requests"] > 0
    assert {r["v"] for r in sent} == {1}
