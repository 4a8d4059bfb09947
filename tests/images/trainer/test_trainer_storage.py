"""The same training, reading from and writing to an S3 server (moto, offline mode) and
HDFS (Hadoop's MiniDFSCluster, online mode: the job waits for the next hour's
donefile, then trains it)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from elasticctr_common.registry import ModelRegistry
from elasticctr_common.storage import Store, open_store

from tests.images.trainer.conftest import BAD_LINES, MISSING_HOUR
from tests.support.trainer import (
    AUC_TOLERANCE,
    LocalJob,
    heldout_auc,
    impressions,
    run_job,
    wait_for,
    write_config,
)

pytestmark = pytest.mark.slow


def copy_tree(local: Path, store: Store, skip: tuple[str, ...] = ()) -> None:
    for path in sorted(local.rglob("*")):
        relative = path.relative_to(local).as_posix()
        if path.is_file() and relative not in skip:
            store.write_bytes(relative, path.read_bytes())


def online_job_on(root: Store, synthetic, work_dir: Path) -> dict[str, object]:
    """The synthetic hours (the last without its donefile) and the held-out set copied
    into `root`, and the runner of an online job that trains them there and waits."""
    copy_tree(synthetic.root / "train", root.child("train"))  # hour 02 has no donefile yet
    copy_tree(synthetic.root / "heldout", root.child("heldout"))
    return {
        "mode": "online",
        "train_data_uri": root.uri("train"),
        "start_date_hr": "20191221/00",
        "end_date_hr": MISSING_HOUR,
        "slot_conf": synthetic.slot_conf,
        "model_uri": root.uri("models"),
        "checkpoint_uri": root.uri("checkpoints"),
        "eval_data_uri": root.uri("heldout"),
        "publish_every_version": True,  # no gate: see test_trainer_job.py's job
        "work_dir": str(work_dir),
        "online_poll_seconds": 0.5,
    }


def eval_auc(models: Store, version: int, synthetic) -> float:
    predictions = np.array(models.read_text(f"{version}/eval/predictions.txt").split(), float)
    auc = heldout_auc(synthetic.heldout, predictions)
    print(f"{models.uri()}: held-out AUC {auc:.4f}, Bayes-optimal {synthetic.bayes_auc:.4f}")
    return auc


def test_offline_training_on_s3(synthetic, s3_server, s3_env, mlflow_server, tmp_path):
    bucket = s3_server.create_bucket()
    root = open_store(f"s3://{bucket}/elasticctr")
    copy_tree(synthetic.root / "train", root.child("train"))
    copy_tree(synthetic.root / "heldout", root.child("heldout"))
    runner = {
        "train_data_uri": root.uri("train"),
        "start_date_hr": "20191221/00",
        "end_date_hr": "20191221/01",
        "slot_conf": synthetic.slot_conf,
        "passes": 2,
        "model_uri": root.uri("models"),
        "checkpoint_uri": root.uri("checkpoints"),
        "eval_data_uri": root.uri("heldout"),
        "publish_every_version": True,  # no gate: see test_trainer_job.py's job
        "work_dir": str(tmp_path / "scratch"),
    }
    experiment = f"s3-{bucket}"
    runner["mlflow_experiment"] = experiment
    config = write_config(tmp_path / "trainer.json", runner)
    run_job(config, tmp_path / "logs", pservers=1, trainers=2, env=s3_env | mlflow_server.env())
    models = root.child("models")
    # Each published version in MLflow's model registry, pointing at its directory.
    registry = ModelRegistry(mlflow_server.tracking_uri, experiment)
    for version in (1, 2):
        number = registry.find(version)
        assert number is not None, f"version {version} not registered"
        url = f"{mlflow_server.tracking_uri}/api/2.0/mlflow/model-versions/get"
        with urllib.request.urlopen(f"{url}?name={experiment}&version={number}") as answer:
            found = json.loads(answer.read())["model_version"]
        assert found["source"] == models.uri(str(version))
        assert found["run_id"], found
    assert [json.loads(line)["input"] for line in models.read_text("donefile").splitlines()] == [
        models.uri("1/sparse"), models.uri("2/sparse"),
    ]  # fmt: skip
    assert eval_auc(models, 2, synthetic) >= synthetic.bayes_auc - AUC_TOLERANCE
    assert root.child("checkpoints").exists("pass-2/pserver-0.done")


def test_online_training_on_hdfs_waits_for_the_next_hour(
    synthetic, hdfs_cluster, hdfs_env, tmp_path
):
    root = open_store(f"{hdfs_cluster.url}/elasticctr")
    runner = online_job_on(root, synthetic, tmp_path / "scratch")
    config = write_config(tmp_path / "trainer.json", runner)
    models = root.child("models")
    job = LocalJob(config, tmp_path / "logs", pservers=1, trainers=2, env=hdfs_env)
    try:

        def published() -> int:
            return (
                len(models.read_text("donefile").splitlines()) if models.exists("donefile") else 0
            )

        wait_for(lambda: published() == 2, timeout=400, what="versions of hours 00 and 01")
        assert job.proc.poll() is None  # waiting for hour 02
        root.write_text(f"train/{MISSING_HOUR}/donefile", "")
        assert job.wait() == 0, job.output()
    finally:
        job.stop()
    metas = [json.loads(models.read_text(f"{v}/dense/meta.json")) for v in (1, 2, 3)]
    hours = [meta["hours"] for meta in metas]
    assert hours == [["20191221/00"], ["20191221/01"], [MISSING_HOUR]]
    # Each version holds every trainer's updates of its hour: its table has counted exactly
    # the impressions of the hours trained so far.
    shown = 0
    for meta in metas:
        hour = synthetic.root / "train" / meta["hours"][0]
        lines = [
            line
            for path in sorted(hour.glob("part-*"))
            for line in path.read_text().splitlines()
            if line not in BAD_LINES
        ]
        shown += impressions(lines, 100003)
        assert meta["table_shows"] == shown
    assert eval_auc(models, 3, synthetic) >= synthetic.bayes_auc - AUC_TOLERANCE
    index = root.child("checkpoints").read_text("index").splitlines()
    assert [json.loads(line)["hour"] for line in index] == [h[0] for h in hours]
