"""The feedback loop as processes, end to end (tools/feedback_loop.py): a real KRaft broker,
cube and serving logging impressions, the simulator sending predictions and clicks under
a drifting truth, the joiner at 1-minute partitions, the online job training each one and
serving moving to each version; the joiner SIGKILLed and restarted mid-run, the broker
SIGKILLed and back 30 s later. Counted against the simulator's own record: every
impression on the stream is in the partitions exactly once, and what the stream lacks is
what serving counted as dropped; after the drift the served versions close part of their
gap to the truth's ranking."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import KafkaBroker
from tests.support.trainer import RECOVERY_GAP_CLOSED

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_the_loop_holds_every_impression_once_across_a_joiner_and_a_broker_kill(tmp_path):
    missing = KafkaBroker.missing_prerequisite()
    if missing:
        pytest.fail(missing)
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable, str(REPO / "tools" / "feedback_loop.py"),
            "--work-dir", str(tmp_path / "work"), "--report", str(report_path),
            "--seconds", "240", "--drift-at", "60",
            "--kill-joiner-at", "70", "--kill-broker-at", "140", "--broker-down", "30",
            "--bad-at", "200",
        ],
        capture_output=True, text=True, timeout=3000,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(report_path.read_text())
    once = report["exactly_once"]
    assert once["on_stream"] > 4000, once  # 4 minutes at 32 impressions a second, less outages
    assert (once["lost"], once["duplicated"]) == (0, 0), once
    assert once["joined"] == once["on_stream"], once
    assert once["not_sent_by_simulator"] == 0, once
    # What serving could not deliver is counted (dropped) or failed, never silently gone.
    assert once["sent_not_on_stream"] <= once["serving_dropped"] + once["serving_failed"], once
    assert once["simulator_sent"] == once["on_stream"] + once["sent_not_on_stream"], once
    assert report["joiner"]["late_clicks"] > 0, report["joiner"]  # clicks sent past the window
    # The bad input written to the stream: every malformed record counted by its reason
    # and skipped; clicks on ids nobody answered unknown, one sent twice a duplicate (the
    # simulator's own late clicks may add to both); malformed clicks to /click refused.
    bad = report["bad_input"]
    malformed = {k: v for k, v in bad["expected"].items() if ":" in k}
    assert {k: bad["joiner_counted"][k] for k in malformed} == malformed, bad
    assert set(report["joiner"]["bad"]) == set(malformed), report["joiner"]
    assert bad["joiner_counted"]["unknown_clicks"] >= bad["expected"]["unknown_clicks"], bad
    assert bad["joiner_counted"]["duplicate_clicks"] >= bad["expected"]["duplicate_clicks"], bad
    assert bad["serving_clicks"] == {"sent": 5, "refused_400": 5, "counted_rejected": 5}, bad
    latency = report["latency"]["impression_to_partition_closed"]
    assert latency["n"] == once["joined"] and 0 < latency["median"] <= latency["max"], latency
    # Every partition closed was trained, and its version or a later one served, in order.
    parts = [f["partition"] for f in report["freshness"]]
    versions = [f["version"] for f in report["freshness"]]
    assert len(parts) == report["partitions"] >= 4, report["freshness"]
    assert parts == sorted(parts) and versions == sorted(versions)
    assert all(f["served_version"] >= f["version"] for f in report["freshness"])
    served = {row["version"] for row in report["versions"]}
    assert len(served) >= 3, report["versions"]  # serving moved on while users were there
    assert all(f["seconds"] > 0 for f in report["freshness"])
    # After the drift the online versions come back towards the truth: a version trained
    # on a minute that is mostly drifted traffic serves at least 500 impressions of it.
    back = report["simulator"]["recovery"]
    assert back and back["last"]["version"] > back["first"]["version"], report["versions"]
    assert back["gap_closed"] >= RECOVERY_GAP_CLOSED, report["versions"]
