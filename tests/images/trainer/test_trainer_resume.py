"""Killing a trainer mid-pass fails the job; running it again resumes after the last
checkpointed pass, with the pservers' table restored (its show counts keep adding up)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from elasticctr_trainer.pipe import NATIVE_PIPE_ENV

from tests.support.trainer import (
    LocalJob,
    has_descendant,
    native_pipe_bin,
    run_job,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow


def test_killed_trainer_resumes_from_checkpoint(synthetic, tmp_path):
    runner = {
        "train_data_uri": synthetic.train_uri,
        "start_date_hr": "20191221/01",
        "end_date_hr": "20191221/01",
        "slot_conf": synthetic.slot_conf,
        "passes": 3,
        "model_uri": f"file://{tmp_path}/models",
        "checkpoint_uri": f"file://{tmp_path}/checkpoints",
        "work_dir": str(tmp_path / "scratch"),
    }
    config = write_config(tmp_path / "trainer.json", runner)
    index = tmp_path / "checkpoints" / "index"

    # Pass 2 is held inside train_from_dataset: once pass 1's checkpoint is indexed (trainer
    # 0 does it before any trainer starts pass 2), the dataset pipe waits instead of reading.
    # So the kill lands mid-pass 2 whatever the machine's load (a native pipe is through a
    # pass's file in milliseconds; waiting to catch it running failed CI).
    held = tmp_path / "pass-held"  # the marker the test looks for: only a held pipe runs it
    release = tmp_path / "release"  # held pipes end (empty) once it exists: none outlives us
    held.write_text(f"#!/bin/sh\nwhile [ ! -e {release} ]; do sleep 0.2; done\n")
    wrapper = tmp_path / "pipe-wrapper"
    wrapper.write_text(
        f'#!/bin/sh\nif [ -e {index} ]; then exec {held}; fi\nexec {native_pipe_bin()} "$@"\n'
    )
    for script in (held, wrapper):
        script.chmod(0o755)
    first = LocalJob(config, tmp_path / "logs-1", pservers=1, trainers=2,
                     env={NATIVE_PIPE_ENV: str(wrapper)})  # fmt: skip

    def held_in_pass_2() -> bool:
        assert first.proc.poll() is None, f"the job ended early:\n{first.output()}"
        pid_file = first.log_dir / "trainer-1.pid"
        return pid_file.exists() and has_descendant(int(pid_file.read_text()), b"pass-held")

    try:
        wait_for(held_in_pass_2, 600, "trainer 1 inside pass 2 (its pipe held)")
        trainer_1 = first.pid("trainer-1")
        assert '"pass_start", "pass": 2' in first.log("trainer-1")
        os.killpg(trainer_1, signal.SIGKILL)
        assert first.wait(timeout=120) == 1
    finally:
        first.stop()
        release.touch()  # Paddle's pipe processes are not in the trainers' process groups
    assert [json.loads(line)["pass_id"] for line in index.read_text().splitlines()] == [1]

    second = run_job(config, tmp_path / "logs-2", pservers=1, trainers=2)
    for trainer in ("trainer-0", "trainer-1"):
        assert second.events(trainer, "resume") == [
            {"event": "resume", "after_pass": 1, "version": 1}
        ]
        steps = [e["step"] for e in second.events(trainer, "metrics") if "examples" in e]
        assert steps == [2, 3]
    assert "restored checkpoint pass 1" in second.log("pserver-0")
    assert [json.loads(line)["pass_id"] for line in index.read_text().splitlines()] == [1, 2, 3]

    versions = [json.loads(line)["id"] for line in (tmp_path / "models/donefile").read_text().splitlines()]  # fmt: skip
    assert versions == [1, 2, 3]
    shows = [
        json.loads((tmp_path / f"models/{v}/dense/meta.json").read_text())["table_shows"]
        for v in versions
    ]
    # every pass pushes the same key occurrences: pass 3 holds three passes' worth only
    # if the restarted pservers started from pass 1's table
    assert shows[1] == pytest.approx(2 * shows[0]) and shows[2] == pytest.approx(3 * shows[0])
