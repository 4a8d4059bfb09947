"""Fast checks of the trainer's plain-Python parts: trainer.json, the role environment,
hour directories, the SequenceFile writer, markers between trainers, AUC."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from elasticctr_common.seqfile import SYNC_INTERVAL, SequenceFileWriter
from elasticctr_common.seqfile import read_sequence_file as shared_reader
from elasticctr_common.storage import open_store
from elasticctr_trainer.config import ConfigError, parse_config
from elasticctr_trainer.hours import hour_range, ready_hours, wait_for_hours
from elasticctr_trainer.metrics import auc, auc_from_histograms
from elasticctr_trainer.roles import RoleError, role_from_env
from elasticctr_trainer.sync import PassSync, SyncTimeout

from tests.images.trainer.trainertest import read_sequence_file

RUNNER = {
    "train_data_uri": "file:///data",
    "start_date_hr": "20191221/00",
    "end_date_hr": "20191221/23",
    "slot_conf": "/etc/elasticctr/slot.conf",
    "model_uri": "s3://b/models",
    "checkpoint_uri": "s3://b/checkpoints",
}


def test_architecture_example_config_parses_with_defaults():
    config = parse_config({"runner": {**RUNNER, "passes": 1}, "hyper_parameters": {}})
    assert config.runner.mode == "offline" and config.runner.max_bad_line_fraction == 0.01
    assert config.hyper_parameters.embedding_dim == 9
    assert config.hyper_parameters.fc_sizes == [400, 400, 400]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"runner": {**RUNNER, "pases": 2}}, "runner: unknown key(s) pases"),
        ({"runner": {**RUNNER, "mode": "batch"}}, "runner.mode: expected offline or online"),
        ({"runner": {**RUNNER, "end_date_hr": None}}, "runner.end_date_hr: required in offline"),
        ({"runner": {**RUNNER, "start_date_hr": "2019-12-21"}}, "runner.start_date_hr: expected"),
        ({"runner": {**RUNNER, "end_date_hr": "20191220/23"}}, "runner.end_date_hr: before"),
        ({"runner": {**RUNNER, "max_bad_line_fraction": 2}}, "runner.max_bad_line_fraction"),
        ({"runner": {**RUNNER, "mode": "online", "passes": 2}}, "runner.passes: online mode"),
        ({"hyper_parameters": {"sparse_dim": 1}}, "hyper_parameters.sparse_dim"),
        ({"hyper_parameters": {"fc_sizes": []}}, "hyper_parameters.fc_sizes"),
        ({"hyper_parameters": {"dim": 8}}, "hyper_parameters: unknown key(s) dim"),
    ],
)
def test_config_errors_name_the_key(change, message):
    data = {"runner": RUNNER, "hyper_parameters": {}, **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config(data)


CLUSTER = {
    "PADDLE_PSERVERS_IP_PORT_LIST": "job-pserver-0.job:30240,job-pserver-1.job:30240",
    "PADDLE_TRAINERS_NUM": "3",
    "PADDLE_PORT": "30240",
    "POD_IP": "10.1.2.3",
}


def test_cluster_roles_come_from_the_task_index_and_host_names():
    trainer = role_from_env({**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "2"})
    assert (trainer.is_server, trainer.index, trainer.trainers) == (False, 2, 3)
    server = role_from_env({**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "1"})
    assert (server.is_server, server.index, server.port, server.bind_host) == (
        True, 1, 30240, "10.1.2.3",
    )  # fmt: skip
    assert server.pserver_endpoints[1] == "job-pserver-1.job:30240"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "0"}, "PADDLE_PSERVERS_IP_PORT_LIST is not"),
        ({**CLUSTER, "VC_TASK_INDEX": "0"}, "TRAINING_ROLE is not set"),
        ({**CLUSTER, "TRAINING_ROLE": "WORKER"}, "TRAINING_ROLE='WORKER'"),
        ({**CLUSTER, "TRAINING_ROLE": "TRAINER"}, "neither PADDLE_TRAINER_ID nor VC_TASK_INDEX"),
        ({**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "3"}, "VC_TASK_INDEX=3 but"),
        (
            {**CLUSTER, "TRAINING_ROLE": "TRAINER", "VC_TASK_INDEX": "1", "PADDLE_TRAINER_ID": "0"},
            "PADDLE_TRAINER_ID and VC_TASK_INDEX disagree",
        ),
        ({**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "2"}, "only 2 pservers"),
        (
            {**CLUSTER, "TRAINING_ROLE": "PSERVER", "VC_TASK_INDEX": "0", "PADDLE_PORT": "1"},
            "PADDLE_PORT=1 but",
        ),
        (
            {**CLUSTER, "PADDLE_PSERVERS_IP_PORT_LIST": "a:1,a", "TRAINING_ROLE": "PSERVER"},
            "'a' is not host:port",
        ),
        ({**CLUSTER, "PADDLE_TRAINERS_NUM": "0", "TRAINING_ROLE": "TRAINER"}, "must be >= 1"),
    ],
)
def test_missing_or_inconsistent_env_names_the_variable(env, message):
    with pytest.raises(RoleError, match=message):
        role_from_env(env)


def test_offline_hours_skip_missing_donefiles(tmp_path):
    data = open_store(f"file://{tmp_path}")
    for hour in ("20191231/23", "20200101/01"):
        data.write_text(f"{hour}/donefile", "")
    assert hour_range("20191231/23", "20200101/01") == ["20191231/23", "20200101/00", "20200101/01"]
    assert ready_hours(data, "20191231/23", "20200101/01") == (
        ["20191231/23", "20200101/01"], ["20200101/00"],
    )  # fmt: skip


def test_online_waits_for_each_hour_in_turn(tmp_path):
    data = open_store(f"file://{tmp_path}")
    data.write_text("20191221/00/donefile", "")
    sleeps = []

    def sleep(seconds):  # the donefile of hour 01 appears while the trainer waits
        sleeps.append(seconds)
        data.write_text("20191221/01/donefile", "")

    hours = list(wait_for_hours(data, "20191221/00", "20191221/01", 5.0, sleep))
    assert hours == ["20191221/00", "20191221/01"] and sleeps == [5.0]


def test_sequence_file_round_trip_with_sync_markers():
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    values = rng.standard_normal((500, 9)).astype(np.float32)
    out = io.BytesIO()
    SequenceFileWriter(out).write_arrays(keys, values)
    data = out.getvalue()
    sync = data[80:96]  # after magic, two class names, flags and metadata count
    per_sync = -(-SYNC_INTERVAL // 44)  # like Paddle's writer: after 2000 bytes of key+value
    assert data.count(b"\xff\xff\xff\xff" + sync) == 500 // per_sync
    read_keys, read_values = read_sequence_file(data)
    np.testing.assert_array_equal(read_keys, keys)
    np.testing.assert_array_equal(read_values, values)


def test_sequence_file_is_readable_by_the_cube_builder_reader():
    keys = np.array([1, 2**63 + 5], dtype=np.uint64)
    values = np.arange(18, dtype=np.float32).reshape(2, 9)
    out = io.BytesIO()
    SequenceFileWriter(out).write_arrays(keys, values)
    read_keys, read_values = shared_reader(out.getvalue(), dim=9)
    np.testing.assert_array_equal(read_keys, keys)
    np.testing.assert_array_equal(read_values, values)


def test_markers_from_an_earlier_attempt_are_ignored(tmp_path):
    store = open_store(f"file://{tmp_path}")
    store.write_text("pass-1/result.json", json.dumps({"ok": True, "written_at": 100.0}))
    now = [1000.0]
    sync = PassSync(store, started_at=1000.0, timeout=3, clock=lambda: now[0],
                    sleep=lambda s: now.__setitem__(0, now[0] + s))  # fmt: skip
    with pytest.raises(SyncTimeout, match="pass 1: trainer 0's result"):
        sync.wait_result(1)
    sync.publish_result(1, {"ok": True, "version": 4})
    assert sync.wait_result(1)["version"] == 4


def test_auc_from_histograms_matches_exact_auc():
    rng = np.random.default_rng(0)
    labels = rng.random(20000) < 0.3
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.2), 0, 1)
    buckets = np.minimum((scores * 4096).astype(int), 4096)
    pos = np.bincount(buckets[labels], minlength=4097)
    neg = np.bincount(buckets[~labels], minlength=4097)
    assert auc_from_histograms(pos, neg) == pytest.approx(auc(labels, scores), abs=2e-3)


@pytest.mark.parametrize("package", ["elasticctr_trainer", "elasticctr_serving"])
def test_zlib_survives_importing_paddle(package):
    """Paddle 2.6.2 shadows zlib's symbols: the image packages load Python's zlib first."""
    code = (
        f"import {package}, paddle, gzip, zlib\n"
        "assert gzip.decompress(gzip.compress(b'x' * 100000)) == b'x' * 100000\n"
        "assert zlib.decompress(zlib.compress(b'y' * 100000)) == b'y' * 100000\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
