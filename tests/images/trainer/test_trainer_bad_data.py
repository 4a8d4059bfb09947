"""Over `runner.max_bad_line_fraction`, the pass fails: the job exits non-zero, the error
names the worst files, and no version is published."""

from __future__ import annotations

import re

import pytest
from elasticctr_trainer import BAD_DATA_EXIT_CODE

from components import training
from tests.images.trainer.trainertest import LocalJob, write_config

pytestmark = pytest.mark.slow


def test_pass_fails_over_the_bad_line_threshold(synthetic, tmp_path):
    data = tmp_path / "data" / "20191221" / "00"
    data.mkdir(parents=True)
    good = (synthetic.root / "heldout" / "part-00000").read_text().splitlines()[:1000]
    (data / "part-00000").write_text("".join(f"{line}\n" for line in good))
    (data / "part-00001").write_text("".join(f"{line}\n" for line in good[:900]) + "1 x\n" * 100)
    (data / "donefile").write_text("")
    runner = {
        "train_data_uri": f"file://{tmp_path}/data",
        "start_date_hr": "20191221/00",
        "end_date_hr": "20191221/00",
        "slot_conf": synthetic.slot_conf,
        "model_uri": f"file://{tmp_path}/models",
        "checkpoint_uri": f"file://{tmp_path}/checkpoints",
        "work_dir": str(tmp_path / "scratch"),
        "max_bad_line_fraction": 0.02,
    }
    config = write_config(tmp_path / "trainer.json", runner)
    job = LocalJob(config, tmp_path / "logs", pservers=1, trainers=2)
    assert job.wait() == 1
    # Exit code 3, which the Volcano Job answers with TerminateJob instead of a restart.
    assert re.search(r"local: trainer-[01] exited with 3;", job.output()), job.output()
    assert BAD_DATA_EXIT_CODE == training.BAD_DATA_EXIT_CODE == 3
    for trainer in ("trainer-0", "trainer-1"):
        log = job.log(trainer)
        assert "pass failed" in log and "pass 1: 100 of 2000 lines malformed (5.00%)" in log
        assert f"file://{data}/part-00001 (100/1000:" in log
    assert not (tmp_path / "models" / "donefile").exists()
    assert not (tmp_path / "checkpoints" / "index").exists()
