"""`store`: a fresh, empty storage root on each backend (file, S3 server, HDFS minicluster)."""

from __future__ import annotations

import uuid

import pytest
from elasticctr_common.storage import Store, open_store

BACKENDS = [
    pytest.param("file", id="file"),
    pytest.param("s3", id="s3", marks=pytest.mark.slow),
    pytest.param("hdfs", id="hdfs", marks=pytest.mark.slow),
]


@pytest.fixture(scope="session")
def s3_bucket(s3_server) -> str:
    return s3_server.create_bucket()


@pytest.fixture(params=BACKENDS)
def store_uri(request: pytest.FixtureRequest, tmp_path) -> str:
    """Root URI of an empty store; the in-process client env is set for the test."""
    name = f"t-{uuid.uuid4().hex[:10]}"  # tests share one bucket / one cluster
    if request.param == "file":
        return (tmp_path / name).as_uri()
    if request.param == "s3":
        request.getfixturevalue("s3_env")
        return f"s3://{request.getfixturevalue('s3_bucket')}/{name}"
    request.getfixturevalue("hdfs_env")
    return f"{request.getfixturevalue('hdfs_cluster').url}/{name}"


@pytest.fixture
def store(store_uri: str) -> Store:
    return open_store(store_uri)
