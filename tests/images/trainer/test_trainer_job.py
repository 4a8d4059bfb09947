"""The whole training job as real processes (local mode): 2 pservers + 2 trainers on
file:// data, logging to a real MLflow server. One run, many checks: AUC against the
generator's Bayes-optimal AUC, the model version layout, an independent read of the
SequenceFile, the exported dense model + embeddings reproducing the trainer's own
predictions, skipped hours and bad-line reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.images.trainer.conftest import BAD_FILE, BAD_LINES, HOURS, MISSING_HOUR
from tests.support.trainer import (
    AUC_TOLERANCE,
    exported_predictions,
    full_table,
    heldout_auc,
    impressions,
    read_sequence_file,
    run_job,
    write_config,
)

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent


def pooled_embeddings(lines, slots, sparse_dim, keys, values, feed_names) -> dict:
    """Sum of each slot's exported vectors per example, as serving computes it; keys
    absent from the export (never trained, or the padding key 0) are zero vectors."""
    table = {int(k): v for k, v in zip(keys, values, strict=True)}
    zero = np.zeros(values.shape[1], dtype=np.float32)
    pooled = {name: np.zeros((len(lines), values.shape[1]), np.float32) for name in feed_names}
    index = {slot: name for slot, name in zip(slots, feed_names, strict=True)}
    for row, line in enumerate(lines):
        for token in line.split()[2:]:
            feasign, slot = token.split(":")
            pooled[index[int(slot)]][row] += table.get(int(feasign) % sparse_dim, zero)
    return pooled


@pytest.fixture(scope="module")
def job(synthetic, mlflow_server, tmp_path_factory):
    work = tmp_path_factory.mktemp("job")
    runner = {
        "train_data_uri": synthetic.train_uri,
        "start_date_hr": "20191221/00",
        "end_date_hr": MISSING_HOUR,
        "slot_conf": synthetic.slot_conf,
        "passes": 2,
        "model_uri": f"file://{work}/models",
        "checkpoint_uri": f"file://{work}/checkpoints",
        "eval_data_uri": f"file://{synthetic.root}/heldout",
        # Every version published: async training is not repeatable (pass 2's held-out AUC
        # was 0.0009 below pass 1's in one of three runs); one more than the gate's 0.002
        # below holds version 2 back and the donefile test fails by chance, as it did once
        # on a busy machine. The gate has its own tests (test_trainer_quality.py).
        "publish_every_version": True,
        "work_dir": str(work / "scratch"),
        "mlflow_experiment": "trainer-job-test",
    }
    config = write_config(work / "trainer.json", runner)
    run = run_job(config, work / "logs", pservers=2, trainers=2, env=mlflow_server.env())
    return run, work


def test_auc_is_within_tolerance_of_bayes_optimal(job, synthetic):
    _, work = job
    predictions = np.loadtxt(work / "models/2/eval/predictions.txt")
    auc = heldout_auc(synthetic.heldout, predictions)
    meta = json.loads((work / "models/2/dense/meta.json").read_text())
    assert meta["eval_auc"] == pytest.approx(auc, abs=1e-9)
    print(f"held-out AUC {auc:.4f}, Bayes-optimal {synthetic.bayes_auc:.4f}")
    assert auc >= synthetic.bayes_auc - AUC_TOLERANCE


def test_each_pass_reports_metrics_per_trainer(job):
    run, _ = job
    for trainer in ("trainer-0", "trainer-1"):
        passes = [e for e in run.events(trainer, "metrics") if "examples_per_sec" in e]
        assert [e["step"] for e in passes] == [1, 2]
        for metrics in passes:
            assert metrics["examples"] > 0 and metrics["examples_per_sec"] > 0
            assert 0 < metrics["loss"] < 1 and 0.5 < metrics["auc"] <= 1


def test_metrics_reach_mlflow(job, mlflow_server):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server.tracking_uri)
    experiment = client.get_experiment_by_name("trainer-job-test")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["trainer-0", "trainer-1"]
    for run in runs:
        history = client.get_metric_history(run.info.run_id, "examples_per_sec")
        assert [m.step for m in history] == [1, 2]
        assert {"loss", "auc", "examples"} <= set(run.data.metrics)
        # What it was trained with, as params MLflow's UI compares runs by.
        params = run.data.params
        assert (params["job.pservers"], params["job.trainers"]) == ("2", "2")
        assert params["runner.start_date_hr"] == "20191221/00"
        assert params["runner.end_date_hr"] == MISSING_HOUR
        assert params["hyper_parameters.sparse_dim"] == "100003"  # write_config's
        assert params["hyper_parameters.learning_rate"] == "0.003"
        assert "hyper_parameters.model" in params


def test_every_trainer_starts_from_trainer_0s_parameters(job):
    run, _ = job
    (zero,), (one,) = run.events("trainer-0", "joined"), run.events("trainer-1", "joined")
    assert zero["dense_mean_abs"] > 0.01
    assert one["dense_sha256"] == zero["dense_sha256"] and one["attempt"] == zero["attempt"]


def test_a_new_model_starts_at_the_log_odds_of_its_data(job, synthetic):
    """Trainer 0 set the output bias from the ready hours' click rate before it pushed the
    dense parameters (trainer 1 pulled the same ones, above); the other trainers do not."""
    run, _ = job
    (prior,) = run.events("trainer-0", "prior")
    assert prior["applied"] and prior["hours"] == HOURS, prior
    labels = []
    for hour in HOURS:
        for part in sorted((synthetic.root / "train" / hour).glob("part-*")):
            for line in part.read_text().splitlines():
                fields = line.split()
                if len(fields) > 2 and fields[1].isdigit():
                    labels.append(int(fields[1]) > 0)
    assert prior["examples"] == 60000 and len(labels) >= 60000
    rate = sum(labels[:60000]) / 60000
    assert abs(prior["click_rate"] - rate) < 0.002, (prior, rate)
    assert prior["logit"] == pytest.approx(math.log(rate / (1 - rate)), abs=0.01)
    assert run.events("trainer-1", "prior") == []


def test_each_version_holds_every_update_of_its_passes(job, synthetic):
    """The table's show counts of version V are exactly the impressions of V passes over
    the data: no trainer's pushes of a pass were still on their way when it was exported."""
    _, work = job
    lines = [
        line
        for hour in HOURS
        for path in sorted((synthetic.root / "train" / hour).glob("part-*"))
        for line in path.read_text().splitlines()
        if line not in BAD_LINES
    ]
    per_pass = impressions(lines, 100003)
    for version in (1, 2):
        meta = json.loads((work / f"models/{version}/dense/meta.json").read_text())
        assert meta["table_shows"] == version * per_pass


def test_missing_hour_is_skipped_and_reported(job):
    run, _ = job
    for trainer in ("trainer-0", "trainer-1"):
        assert run.events(trainer, "skipped_hours") == [
            {"event": "skipped_hours", "hours": [MISSING_HOUR], "reason": "no donefile"}
        ]


def test_bad_lines_are_reported_per_file(job, synthetic):
    run, _ = job
    reports = run.events("trainer-0", "bad_lines") + run.events("trainer-1", "bad_lines")
    assert len(reports) == 2  # the bad file, once per pass
    for report in reports:
        assert report["file"] == f"{synthetic.train_uri}/{BAD_FILE}"
        assert report["bad"] == len(BAD_LINES)
        assert sum(report["reasons"].values()) == len(BAD_LINES) and len(report["reasons"]) == 8


def test_versions_are_published_by_the_donefile_last(job):
    _, work = job
    models = work / "models"
    lines = [json.loads(line) for line in (models / "donefile").read_text().splitlines()]
    # Version 1 is a base; version 2 a delta on it (trainer 0 kept version 1's table).
    assert lines == [
        {"id": 1, "key": 1, "input": f"file://{models}/1/sparse"},
        {"id": 2, "key": 2, "input": f"file://{models}/2/sparse", "parent": 1},
    ]
    for version, sparse in ((1, ["part-00000"]), (2, ["_deleted", "part-00000"])):
        assert sorted(p.name for p in (models / str(version) / "dense").iterdir()) == [
            "meta.json", "model.pdiparams", "model.pdmodel",
        ]  # fmt: skip
        assert sorted(p.name for p in (models / str(version) / "sparse").iterdir()) == sparse
    index = (work / "checkpoints/index").read_text().splitlines()
    assert [json.loads(line)["pass_id"] for line in index] == [1, 2]


def test_the_delta_on_the_base_is_the_table_trainer_0_dumped_bit_for_bit(job):
    _, work = job
    models = work / "models"
    meta = json.loads((models / "2/dense/meta.json").read_text())
    delta_keys, _ = read_sequence_file((models / "2/sparse/part-00000").read_bytes())
    assert meta["parent"] == 1 and meta["delta_keys"] == len(delta_keys) > 0
    # Pass 2 trained every key again: nothing was left out, and nothing deleted.
    assert meta["deleted_keys"] == 0
    keys, values = full_table(models, 2)
    assert len(keys) == meta["sparse_keys"]
    # trainer 0's snapshot of version 2 is every row it pulled for it
    snapshot = work / "scratch" / "export-snapshot"
    assert json.loads((snapshot / "meta.json").read_text())["version"] == 2
    np.testing.assert_array_equal(np.fromfile(snapshot / "keys.u64", "<u8"), keys)
    np.testing.assert_array_equal(
        np.fromfile(snapshot / "values.f32", "<u4"), values.view(np.uint32).ravel()
    )


def test_sequence_file_reads_back_independently(job, synthetic):
    _, work = job
    meta = json.loads((work / "models/2/dense/meta.json").read_text())
    keys, values = full_table(work / "models", 2)
    assert len(keys) == meta["sparse_keys"] == len(set(keys.tolist()))
    assert values.shape == (len(keys), meta["embedding_dim"]) == (len(keys), 9)
    assert keys.min() >= 1 and keys.max() < meta["sparse_dim"]
    trained = {
        int(f) % meta["sparse_dim"] for feasigns in synthetic.model.feasigns for f in feasigns
    }
    assert set(keys.tolist()) <= trained  # only keys the data holds
    assert len(keys) >= 0.95 * len(trained)
    assert np.all(np.isfinite(values)) and np.abs(values).max() > 0


def test_exported_model_reproduces_the_trainers_predictions(job, synthetic, tmp_path):
    _, work = job
    dense = work / "models/2/dense"
    meta = json.loads((dense / "meta.json").read_text())
    keys, values = full_table(work / "models", 2)
    pooled = pooled_embeddings(
        synthetic.heldout, meta["slots"], meta["sparse_dim"], keys, values, meta["feed_names"]
    )
    served = exported_predictions(dense, pooled, tmp_path)
    trainer = np.loadtxt(work / "models/2/eval/predictions.txt")
    assert served.shape == trainer.shape == (len(synthetic.heldout),)
    assert np.max(np.abs(served - trainer)) <= 1e-5
