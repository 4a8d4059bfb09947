"""cube-transfer starting before its bucket answers (a new stack's MinIO starts, and its
users are made by a Job, maybe after this pod): it waits and retries, and gives up with
the storage error after its wait. The bucket not there yet is a closed port here (the
S3 test server takes any key)."""

from __future__ import annotations

import socket
import time

import pytest
from elasticctr_common.cube.conf import CubeConf
from elasticctr_cube.rollout import RolloutRunner
from elasticctr_cube.transfer import Transfer, _with_storage_retry

pytestmark = pytest.mark.slow


def make(bucket: str, tmp_path) -> Transfer:
    conf = CubeConf.parse(
        {"dict_name": "ctr", "shard": 1, "nodes": [{"ip": "127.0.0.1", "port": 1, "agent_port": 2}]}
    )
    return Transfer(
        model_uri=f"s3://{bucket}/models", cube_uri=f"s3://{bucket}/cube", conf=conf,
        work_dir=str(tmp_path), runner=RolloutRunner(conf),
    )  # fmt: skip


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_waits_for_the_bucket_then_starts(s3_server, s3_env, monkeypatch, tmp_path):
    bucket = s3_server.create_bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed_port())
    pauses = []

    def sleep(seconds):  # the bucket comes up while the transfer waits
        pauses.append(seconds)
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env["AWS_ENDPOINT_URL"])

    monkeypatch.setattr(time, "sleep", sleep)
    started = _with_storage_retry(lambda: make(bucket, tmp_path), "s3://b/cube", wait=60)
    # (botocore retries a refused connection itself first, with pauses under a second)
    assert isinstance(started, Transfer) and [p for p in pauses if p >= 1] == [1.0]


def test_gives_up_with_the_storage_error(s3_server, s3_env, monkeypatch, tmp_path):
    from botocore.exceptions import EndpointConnectionError

    bucket = s3_server.create_bucket()
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed_port())
    clock = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    with pytest.raises(EndpointConnectionError):
        _with_storage_retry(lambda: make(bucket, tmp_path), "s3://b/cube", wait=30)
    assert 20 <= clock[0] <= 30
