"""A trainer's /metrics while it runs (an online job waiting for its next hour), read with
prometheus_client's parser and checked against the metrics contract: the passes it
trained, examples, loss and AUC, the malformed lines it counted, the versions trainer 0
published and the data lag (newest hour trained vs now)."""

from __future__ import annotations

import time

import pytest
from elasticctr_common.feedback import partition_bounds
from elasticctr_common.metrics import TRAINER
from elasticctr_common.storage import open_store

from tests.images.trainer.conftest import BAD_LINES
from tests.images.trainer.test_trainer_storage import online_job_on
from tests.support.metrics import scrape, value
from tests.support.trainer import LocalJob, wait_for, write_config

pytestmark = pytest.mark.slow


def test_a_running_trainer_serves_its_pass_metrics(synthetic, tmp_path):
    root = open_store((tmp_path / "store").as_uri())
    runner = online_job_on(root, synthetic, tmp_path / "scratch")
    job = LocalJob(write_config(tmp_path / "trainer.json", runner), tmp_path / "logs", 1, 1)
    try:
        wait_for(lambda: job.events("trainer-0", "metrics_port"), 300, "the trainer's metrics port")
        port = job.events("trainer-0", "metrics_port")[0]["port"]
        url = f"http://127.0.0.1:{port}/metrics"
        t = "elasticctr_trainer_"

        def trained_two() -> bool:
            families = scrape(url, TRAINER)  # the contract's families, complete
            return value(families, t + "versions_total", outcome="published") == 2

        wait_for(trained_two, 600, "versions of hours 00 and 01")
        assert job.proc.poll() is None  # waiting for hour 02, still serving its metrics
        families = scrape(url, TRAINER)
        assert value(families, t + "pass") == 2
        assert value(families, t + "examples_total") == 60000
        assert value(families, t + "bad_lines_total") == len(BAD_LINES)
        assert value(families, t + "lines_total") == 60000 + len(BAD_LINES)
        assert 0.5 < value(families, t + "auc") < 1 and value(families, t + "loss") > 0
        assert 0.5 < value(families, t + "eval_auc") < 1
        assert value(families, t + "pass_seconds_count") == 2
        end = partition_bounds("20191221/01", 60)[1]
        assert value(families, t + "newest_partition_end_timestamp_seconds") == end
        lag = value(families, t + "data_lag_seconds")
        assert end + lag == pytest.approx(time.time(), abs=60)
    finally:
        job.stop()
