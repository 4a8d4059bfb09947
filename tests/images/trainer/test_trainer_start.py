"""Trainers start from trainer 0's dense parameters, however late trainer 0 starts.

Paddle's `init_worker` orders trainer 0's push of the initial dense parameters before the
others' pull with Gloo barriers, which are no-ops without Gloo: on a busy machine a trainer
that started first pulled the pservers' zero-initialised dense table and trained a whole
pass on it (its pass AUC was 0.50), and if it finished that pass more than 2 s before
trainer 0 started, trainer 0 took its pass marker for a leftover of an earlier attempt and
waited for it until `sync_timeout_seconds`. Here trainer 0 is held (SIGSTOP) from its first
instant until trainer 1 is ready to train, then let go."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.support.trainer import LocalJob, wait_for, write_config

pytestmark = pytest.mark.slow


def test_a_late_trainer_0_still_initialises_every_trainer(synthetic, tmp_path):
    runner = {
        "train_data_uri": synthetic.train_uri,
        "start_date_hr": "20191221/01",
        "end_date_hr": "20191221/01",
        "slot_conf": synthetic.slot_conf,
        "model_uri": f"file://{tmp_path}/models",
        "checkpoint_uri": f"file://{tmp_path}/checkpoints",
        "work_dir": str(tmp_path / "scratch"),
        "sync_timeout_seconds": 90,
    }
    config = write_config(tmp_path / "trainer.json", runner)
    job = LocalJob(config, tmp_path / "logs", pservers=1, trainers=2)
    try:
        pid_file = tmp_path / "logs" / "trainer-0.pid"
        wait_for(pid_file.exists, timeout=60, what="trainer 0's process")
        os.kill(int(pid_file.read_text()), signal.SIGSTOP)

        def trainer_1_ready() -> bool:
            log = job.log("trainer-1")
            # waiting to be admitted; or (without the handshake) done with its pass already
            return '"event": "joining"' in log or '"examples_per_sec"' in log

        wait_for(trainer_1_ready, timeout=180, what="trainer 1 ready to train")
        time.sleep(3.0)  # more than the 2 s clock-skew margin of the old marker rule
        os.kill(int(pid_file.read_text()), signal.SIGCONT)
        assert job.wait(timeout=300) == 0, job.output()
    finally:
        job.stop()
    joined = {t: job.events(t, "joined") for t in ("trainer-0", "trainer-1")}
    assert [len(e) for e in joined.values()] == [1, 1], joined
    zero, one = joined["trainer-0"][0], joined["trainer-1"][0]
    assert zero["dense_mean_abs"] > 0.01  # trainer 0's initial values, not the table's zeros
    assert one["dense_sha256"] == zero["dense_sha256"] and one["attempt"] == zero["attempt"]
    assert (tmp_path / "models" / "donefile").read_text().count("\n") == 1
