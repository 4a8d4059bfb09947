"""The README's local walkthrough run as written: the block under "Deploy: the local stack",
in one bash as a user pastes it, from the clone's root, as root: `tools/local.sh up` on the
machine's default local cluster, data generated and uploaded, `status --wait` until version
1 is served, `predict` printing its AUC, then `tools/local.sh down`, and the host as it was.

It runs after the session's own cluster is down (tests/conftest.py, LAST): one cluster at a
time on a machine. It refuses to start while a local cluster or a `local` stack of the
default cache exists: `down` at the end would take a developer's own away.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cluster import HostView, differences
from tests.support.readme import code_blocks
from tools.localcluster.settings import CACHE, DEFAULT_DIR, Layout

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
TITLE = "## Deploy: the local stack (one machine, one command)"
DATA = Path("/tmp/ctr")  # where the walkthrough writes its data
LOCAL_STACK_STATE = CACHE / "pulumi-state" / ".pulumi" / "stacks" / "elasticctr" / "local.json"
SECONDS = 3600.0


def local_stack_resources(state: Path = LOCAL_STACK_STATE) -> int:
    """Resources in the default cache's `local` stack: 0 when there is none, or when it
    was destroyed (`down` keeps the empty stack)."""
    if not state.exists():
        return 0
    latest = json.loads(state.read_text(encoding="utf-8"))["checkpoint"].get("latest") or {}
    return len(latest.get("resources") or [])


def test_a_destroyed_local_stack_is_no_reason_to_refuse(tmp_path: Path) -> None:
    state = tmp_path / "local.json"
    assert local_stack_resources(state) == 0
    state.write_text(json.dumps({"checkpoint": {"stack": "local", "latest": {}}}))
    assert local_stack_resources(state) == 0
    kept = {"resources": [{"urn": "urn:pulumi:local::elasticctr::pulumi:pulumi:Stack::x"}]}
    state.write_text(json.dumps({"checkpoint": {"stack": "local", "latest": kept}}))
    assert local_stack_resources(state) == 1


@pytest.mark.runs_last("walks_the_readme")
def test_the_local_walkthrough_reaches_a_prediction() -> None:
    if os.geteuid() != 0:
        pytest.skip("the walkthrough runs as root (sudo)")
    layout = Layout.at(DEFAULT_DIR)
    assert not layout.state_file.exists(), (
        f"a local cluster is up ({layout.state_file}): the walkthrough's `down` would take it "
        "away; `sudo tools/local.sh down` first"
    )
    assert local_stack_resources() == 0, (
        f"a local stack with resources exists ({LOCAL_STACK_STATE}): the walkthrough would "
        "destroy it; `sudo tools/local.sh down` first"
    )
    (block,) = code_blocks(TITLE)
    # local.sh keeps the passphrase's salt in its copy under the cache: the checkout's stack
    # file stays as it is (and is put back if not, so that no salt is ever committed).
    stack_file = ROOT / "stacks" / "Pulumi.local.yaml"
    stack_bytes = stack_file.read_bytes()
    before = HostView.take()
    shutil.rmtree(DATA, ignore_errors=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-euxo", "pipefail", "-c", block],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=SECONDS,
        )
    finally:
        shutil.rmtree(DATA, ignore_errors=True)
        if layout.state_file.exists():  # the block stopped halfway: leave nothing up
            subprocess.run(["bash", "tools/local.sh", "down"], cwd=ROOT, timeout=1200)
        stack_after = stack_file.read_bytes()
        stack_file.write_bytes(stack_bytes)
    seconds = time.monotonic() - started
    shown = f"exit {done.returncode} after {seconds:.0f} s\n{done.stdout}\n{done.stderr}"
    assert done.returncode == 0, shown
    assert stack_after == stack_bytes, "tools/local.sh changed stacks/Pulumi.local.yaml"
    # status: serving on version 1; predict: every held-out example answered by it.
    assert "serving: model version 1" in done.stdout, shown
    assert "(model version 1), skipped lines: 0" in done.stdout, shown
    auc = float(done.stdout.split("AUC: ", 1)[1].split()[0])
    assert auc > 0.6, shown  # the generated data is learnable: far above chance
    assert local_stack_resources() == 0  # destroyed by `down`
    assert differences(before, HostView.take()) == []
    print(f"\n[readme] the local walkthrough took {seconds:.0f} s; AUC {auc:.4f}")
    print(done.stdout[-2000:])  # what the user saw last: status and predict
