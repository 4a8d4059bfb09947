"""The accessor's shrink (decay and deletion) in a real job: between an offline job's
passes, which repeat the data, and not after its last, so the checkpoint that the online
job resumes holds every id the last version served (trainer.shrinks_after); and before the
first pass of that job resumed with more passes (trainer.shrinks_at_resume)."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.support.trainer import full_table, impressions, run_job, write_config

pytestmark = pytest.mark.slow
HOUR = "20191221/01"  # the synthetic set's hour without bad lines


def test_the_last_offline_checkpoint_keeps_the_ids_a_shrink_would_delete(synthetic, tmp_path):
    runner = {
        "train_data_uri": synthetic.train_uri,
        "start_date_hr": HOUR,
        "end_date_hr": HOUR,
        "slot_conf": synthetic.slot_conf,
        "passes": 2,
        "model_uri": f"file://{tmp_path}/models",
        "checkpoint_uri": f"file://{tmp_path}/checkpoints",
        "work_dir": str(tmp_path / "scratch"),
        "publish_every_version": True,
    }
    # Every id scores below it: a shrink deletes the whole table.
    config = write_config(tmp_path / "trainer.json", runner, {"delete_threshold": 1e12})
    run_job(config, tmp_path / "logs", pservers=1, trainers=1)

    lines = [
        line
        for path in sorted((synthetic.root / "train" / HOUR).glob("part-*"))
        for line in path.read_text().splitlines()
    ]
    per_pass = impressions(lines, 100003)
    shows = [
        json.loads((tmp_path / f"models/{v}/dense/meta.json").read_text())["table_shows"]
        for v in (1, 2)
    ]
    # Between the passes the table was emptied: version 2 counted pass 2's shows alone.
    assert shows == [per_pass, per_pass]
    # After the last pass it was not: the checkpoint holds version 2's ids, every one.
    checkpoint = tmp_path / "checkpoints" / "pass-2"
    kept = {
        int(line.split()[0])
        for part in checkpoint.glob("pserver-*/*/part-*-*.gz")
        for line in gzip.decompress(part.read_bytes()).splitlines()
    }
    served = set(full_table(tmp_path / "models", 2)[0].tolist())
    assert served and kept == served

    # `passes` raised after the job finished: the whole table is shrunk before pass 3, which
    # repeats the data, as it was between passes 1 and 2.
    config = write_config(
        tmp_path / "trainer.json", {**runner, "passes": 3}, {"delete_threshold": 1e12}
    )
    run_job(config, tmp_path / "logs-3", pservers=1, trainers=1)
    meta = json.loads((tmp_path / "models/3/dense/meta.json").read_text())
    assert meta["table_shows"] == per_pass
    index = (tmp_path / "checkpoints" / "index").read_text().splitlines()
    assert [json.loads(line)["table_shrunk"] for line in index] == [True, False, False]
