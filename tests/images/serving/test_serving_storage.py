"""Serving reads dense models from S3-compatible storage (moto), as in the cluster
(MODEL_URI=s3://<bucket>/models), with the slot.conf and sparse_dim checks on."""

from __future__ import annotations

import numpy as np
import pytest
from elasticctr_common.storage import open_store

from tests.support.cube import CubeCluster, wait_until
from tests.support.serving import (
    Serving,
    expected,
    http,
    probe_instances,
    publish,
)

pytestmark = pytest.mark.slow


def test_serving_loads_models_from_s3(procs, tmp_path, cube_server_bin, s3_server, s3_env):
    cluster = CubeCluster(procs, tmp_path, 3, ["--max-attempts", "1"])
    spec = publish(cluster, [1])
    cluster.wait_result(1)
    bucket = s3_server.create_bucket()
    models = open_store(f"s3://{bucket}/models")
    for name in ("meta.json", "model.pdmodel", "model.pdiparams"):
        models.upload(cluster.model_dir / "1" / "dense" / name, f"1/dense/{name}")
    slot_conf = tmp_path / "slot.conf"
    slot_conf.write_text("".join(f"{s}\n" for s in spec["slots"]))
    serving = Serving(
        procs,
        "serving",
        cluster,
        "--model-uri",
        f"s3://{bucket}/models",
        "--slot-conf",
        str(slot_conf),
        "--sparse-dim",
        str(spec["sparse_dim"]),
        env=s3_env,
    )
    # The version is read from S3 (moto) and checked in a child process that imports
    # Paddle: over a minute on a busy 2-core machine.
    serving.wait_version(1, timeout=240)
    instances = probe_instances(spec, 30)
    code, body, _ = http(
        "POST", serving.url + "/ElasticCTRPredictionService/inference", {"instances": instances}
    )
    assert code == 200
    got = np.array([p["prob1"] for p in body["predictions"]])
    assert np.max(np.abs(got - expected(spec, 1, instances))) <= 1e-5


def test_a_model_trained_on_other_slots_is_rejected(procs, tmp_path, cube_server_bin):
    cluster = CubeCluster(procs, tmp_path, 3, ["--max-attempts", "1"])
    publish(cluster, [1])
    cluster.wait_result(1)
    slot_conf = tmp_path / "slot.conf"
    slot_conf.write_text("101\n102\n")
    serving = Serving(
        procs, "serving", cluster, "--slot-conf", str(slot_conf), "--sparse-dim", "77"
    )
    status = wait_until(lambda: (s := serving.status())["rejected"] and s, 30, "a rejection")
    assert status["version"] is None
    assert (
        "trained on slots [101, 102, 103, 104, 105, 106, 107, 108], but slot.conf has "
        "[101, 102]" in status["rejected"]["1"]["error"]
    )
    assert http("GET", serving.url + "/readyz")[0] == 503
