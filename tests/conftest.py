"""Session fixtures for the whole suite: real servers on 127.0.0.1 (tests/support/services.py).

Each starts the first time a test asks for it and stops at the end of the session. They skip
only when a prerequisite cannot exist on this machine (no java for HDFS); a server that should
start and does not is an error, with its log in the message.

The Pulumi CLI and a Kubernetes control plane (the end-to-end tests, the local cluster's
provisioner test): `pulumi_path` (the PATH the CLI runs with) and `cluster_path` (the same,
when the control plane's binaries are there too) skip a test, saying what is missing and how
to build it, unless ELASTICCTR_E2E_REQUIRED=1 (CI, once tools/setup.sh has built the tools):
then a missing tool is an error, so the suite cannot pass by skipping. `control_plane` is one
throwaway etcd + kube-apiserver + controller-manager + scheduler per test module, with
Volcano's CRDs registered; it is stopped by PID and its directory removed, also when a test
fails.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import controlplane, pulumi_cli
from tests.support.prerequisites import unavailable
from tests.support.services import HdfsMiniCluster, MlflowServer, S3Server
from tests.support.volcano_crds import CrdsUnavailable, crd_dir
from tools.localcluster.controlplane import BinariesNotFound, ControlPlane

# `--cpu-top N`: the tests that cost the most CPU (tools/test.sh lists them).
pytest_plugins = ["tests.support.cpu_report"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """S3 API (moto). Subprocess env: `s3_server.env()`; buckets: `s3_server.create_bucket()`."""
    with S3Server() as server:
        yield server


@pytest.fixture(scope="session")
def hdfs_cluster() -> Iterator[HdfsMiniCluster]:
    """HDFS (MiniDFSCluster, 1 datanode) at `hdfs_cluster.url`; env: `hdfs_cluster.env()`."""
    reason = HdfsMiniCluster.missing_prerequisite()
    if reason:
        pytest.skip(reason)
    with HdfsMiniCluster(datanodes=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def mlflow_server() -> Iterator[MlflowServer]:
    """MLflow tracking server; env: `mlflow_server.env()` (MLFLOW_TRACKING_URI, telemetry off)."""
    with MlflowServer() as server:
        yield server


@pytest.fixture(scope="session")
def pulumi_path() -> str:
    """PATH with the Pulumi CLI, its Python host and the Kubernetes provider."""
    path = pulumi_cli.search_path()
    reason = pulumi_cli.skip_reason(path)
    if reason:
        unavailable(reason)
    return path


@pytest.fixture(scope="session")
def cluster_path(pulumi_path: str) -> str:
    """`pulumi_path`, which also has kube-apiserver and etcd."""
    reason = pulumi_cli.skip_reason(pulumi_path, cluster=True)
    if reason:
        unavailable(reason)
    return pulumi_path


@pytest.fixture(scope="session")
def volcano_crd_dir() -> Path:
    try:
        return crd_dir()
    except CrdsUnavailable as why:
        unavailable(f"Volcano's CRDs are unavailable: {why}")
        raise  # unreachable: unavailable() raises


@pytest.fixture(scope="module")
def control_plane(cluster_path: str, volcano_crd_dir: Path) -> Iterator[ControlPlane]:
    """A fresh control plane for the module; `.kubeconfig` is its admin kubeconfig.

    The controller manager is required: `pulumi destroy` deletes the namespace, and only its
    namespace controller empties and removes a terminating namespace."""
    try:
        cp = controlplane.start([volcano_crd_dir], controllers="required")
    except BinariesNotFound as why:
        unavailable(str(why))
        raise  # unreachable: unavailable() raises
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """boto3 in this test process talks to `s3_server` (restored after the test)."""
    env = s3_server.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def hdfs_env(hdfs_cluster: HdfsMiniCluster, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """hdfs-native in this test process acts as the cluster's user (restored after the test)."""
    env = hdfs_cluster.env()
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HDFS_UGI", raising=False)
    return env


# ---- the local one-node cluster and the local stack on it (tests/cluster, tests/lifecycle) --
# Tests that must run after every other test on the cluster, in this order: the stack's
# destroy, the check that the host is as it was before the cluster, then the README's
# walkthrough (its own cluster: one at a time).
LAST = ("destroys_the_stack", "restores_the_host", "walks_the_readme")


def pytest_configure(config: pytest.Config) -> None:
    # A session started as a script's background job (tools/test.sh, CI's runner) inherits
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: Ctrl-C or CI's
    # timeout could not stop it, and its fixtures (the cluster, the servers) would stay up.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        marker = item.get_closest_marker("runs_last")
        return 1 + LAST.index(marker.args[0]) if marker else 0

    items.sort(key=rank)  # stable: everything else keeps its order


@pytest.fixture(scope="session")
def local_cluster() -> Iterator[Any]:
    """The one-node cluster (tools/localcluster), with the local stack's images loaded; taken
    down at the end of the session (the last test checks the host; see LAST)."""
    from tests.support import cluster

    reason = cluster.unavailable_reason()
    if reason:
        unavailable(reason)
    session = cluster.ClusterSession.for_tests().start()
    try:
        yield session
    finally:
        session.stop()
        print(f"\n[cluster] timings: {session.timings}")


@pytest.fixture(scope="session")
def local_stack(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """`pulumi up --stack local` on the local cluster, as a user runs it (awaiting on), with
    a user's own network and a held-out set (cluster.LocalStack.up); the stack is destroyed
    by the test that checks destroy, or here at the end."""
    from tests.support import cluster

    deployed = cluster.LocalStack.up(local_cluster, tmp_path_factory.mktemp("local-stack"))
    try:
        yield deployed
    finally:
        deployed.destroy(check=False)
