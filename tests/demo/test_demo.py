"""The one-command demo (tools/demo.py) as users run it: generated data -> 2 pservers + 2
trainers -> export -> 3 cube shards -> serving -> client predict. The client's
probabilities equal the trainer's own predictions on the same held-out examples, its AUC
is the trainer's, and no process outlives the demo."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 900


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "elasticctr" in _cmdline(pid)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def started_pids(work: Path) -> list[int]:
    """Every process the demo and the local training job recorded (PID files)."""
    pids = []
    listing = work / "demo-pids.txt"
    if listing.exists():
        pids += [int(line.split()[0]) for line in listing.read_text().splitlines() if line]
    pids += [int(p.read_text()) for p in (work / "logs" / "training").glob("*.pid")]
    return pids


def run_demo(work: Path, *args: str) -> str:
    """tools/demo.py as a user runs it; its output. Nothing it started outlives this."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_", "TRAINING_ROLE"))}
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "tools" / "demo.py"), "--work-dir", str(work), *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the demo stops what it started
            proc.wait(30)
        for pid in started_pids(work):  # backstop: nothing may outlive the test
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
    print(output[-3000:])
    assert proc.returncode == 0, output[-5000:]
    return output


def printed_auc(output: str) -> float:
    """The AUC the client's `predict` printed."""
    found = re.search(r"^AUC: (\S+)$", output, re.M)
    assert found is not None, output[-3000:]
    return float(found.group(1))


def assert_nothing_left(work: Path) -> None:
    time.sleep(0.5)
    left = [pid for pid in started_pids(work) if alive(pid)]
    assert not left, f"still running after the demo: {left}"


def test_demo_runs_the_pipeline_and_prints_the_auc(tmp_path):
    work = tmp_path / "demo"
    # Both versions published whatever their held-out AUCs (see test_trainer_job.py's job).
    output = run_demo(work, "--set", "runner.publish_every_version=true")
    auc = printed_auc(output)
    # 2 passes: versions 1 and 2, both rolled out; the client ran on version 2
    meta = json.loads((work / "models" / "2" / "dense" / "meta.json").read_text())
    trainer = np.loadtxt(work / "models" / "2" / "eval" / "predictions.txt")
    rows = np.loadtxt(work / "predictions.tsv", usecols=(0, 1, 2, 3))
    assert len(rows) == len(trainer) == 2000
    assert set(rows[:, 3]) == {2}  # every answer from version 2
    assert "switched to versions 1, 2 as cube committed them" in output
    assert np.max(np.abs(rows[:, 2] - trainer)) <= 1e-5
    assert auc == pytest.approx(meta["eval_auc"], abs=1e-3)
    # The generator's Bayes-optimal AUC is ~0.82 and chance 0.5; async training varies.
    assert auc > 0.72
    assert_nothing_left(work)


def test_demo_trains_and_serves_your_own_data(tmp_path):
    """`--data DIR` as README shows it: the user's hour directories, slot.conf and
    settings; the version is trained on the hours asked for, served with the slots,
    crosses and sparse_dim of its metadata, and every held-out example is answered."""
    from elasticctr_trainer.generate import generate_simple

    data = tmp_path / "mine"
    _, generated = generate_simple(
        f"file://{data}", slot_count=4, vocab=60, start="20200229/23", hours=3,
        examples_per_hour=6000, files_per_hour=2, heldout=1500, seed=3, first_slot=301,
    )  # fmt: skip
    work = tmp_path / "demo"
    output = run_demo(
        work, "--data", str(data), "--start", "20200229/23", "--end", "20200301/00",
        "--passes", "1", "--set", "hyper_parameters.sparse_dim=200003",
        "--set", "hyper_parameters.model=deepfm", "--set", "hyper_parameters.embedx_threshold=5",
        "--set", "training.crosses=[[301, 302], [304, 301]]",
    )  # fmt: skip
    meta = json.loads((work / "models" / "1" / "dense" / "meta.json").read_text())
    assert meta["hours"] == ["20200229/23", "20200301/00"]  # not 20200301/01
    assert meta["slots"] == [301, 302, 303, 304] and meta["sparse_dim"] == 200003
    # The crosses are inputs of their own; the client sends the slots, serving crosses them.
    assert meta["crosses"] == [[301, 302], [304, 301]] and len(meta["feed_names"]) == 6
    trained = json.loads((work / "trainer.json").read_text())["hyper_parameters"]
    assert trained["model"] == "deepfm" and trained["embedx_threshold"] == 5
    rows = np.loadtxt(work / "predictions.tsv", usecols=(0, 1, 2, 3))
    assert len(rows) == 1500 and set(rows[:, 3]) == {1}
    trainer = np.loadtxt(work / "models" / "1" / "eval" / "predictions.txt")
    assert np.max(np.abs(rows[:, 2] - trainer)) <= 1e-5
    auc = printed_auc(output)
    assert f"trainer's held-out AUC {meta['eval_auc']:.4f}" in output
    assert auc == pytest.approx(meta["eval_auc"], abs=1e-3)
    # Bayes-optimal is about 0.81 on this data, chance 0.5: the model learnt the user's
    # slots if it is well past halfway. One async pass over 12,000 examples is a short
    # training: the DNN alone stayed at chance (0.51) in about one run of seven; DeepFM's
    # first-order part learns the ids in one pass (the quality bars are
    # bench/model_quality.py's, docs/trainer.md).
    assert auc > 0.5 + 0.5 * (generated.bayes_auc - 0.5)
    assert_nothing_left(work)


def test_demo_serves_criteo_slot_format_data_with_your_own_network(tmp_path):
    """`--data DIR` on PaddleRec's slot format (13 dense features, 26 slots, no slot.conf:
    read off the data) with a user's network module named by a relative path: trained,
    exported, served and predicted, the client's probabilities the trainer's to 1e-5."""
    from elasticctr_trainer import synth
    from elasticctr_trainer.generate import generate_profile

    data = tmp_path / "criteo"
    _, generated = generate_profile(
        f"file://{data}", synth.criteo(), "20200229/23", hours=2, examples_per_hour=5000,
        files_per_hour=2, heldout=1500, seed=5, first_slot=1,
    )  # fmt: skip
    (data / "slot.conf").unlink()
    work = tmp_path / "demo"
    network = "tests/images/trainer/nets/two_tower.py"  # relative to the repository
    output = run_demo(
        work, "--data", str(data), "--start", "20200229/23", "--end", "20200301/00",
        "--passes", "1", "--set", "hyper_parameters.model=custom",
        "--set", f"hyper_parameters.network_module={network}",
    )  # fmt: skip
    assert (
        "data: PaddleRec's slot format, dense features [{'name': 'dense_feature', 'dim': 13}]"
        in output
    )
    meta = json.loads((work / "models" / "1" / "dense" / "meta.json").read_text())
    assert meta["model"] == "custom" and meta["data_format"] == "paddlerec"
    assert meta["slots"] == list(range(1, 27))
    assert meta["dense_features"] == [{"name": "dense_feature", "dim": 13}]
    trained = json.loads((work / "trainer.json").read_text())["hyper_parameters"]
    assert trained["network_module"] == str(REPO / network)
    rows = np.loadtxt(work / "predictions.tsv", usecols=(0, 1, 2, 3))
    assert len(rows) == 1500 and set(rows[:, 3]) == {1}
    trainer = np.loadtxt(work / "models" / "1" / "eval" / "predictions.txt")
    assert np.max(np.abs(rows[:, 2] - trainer)) <= 1e-5
    auc = printed_auc(output)
    assert auc == pytest.approx(meta["eval_auc"], abs=1e-3)
    # One async pass over 10,000 examples of a profile whose Bayes AUC is about 0.79: it
    # learnt from the slots and the dense features if it is clearly past chance.
    assert auc > 0.5 + 0.3 * (generated.bayes_auc - 0.5)
    assert_nothing_left(work)
