"""Fixtures of the end-to-end tests: the real Pulumi CLI and a local Kubernetes control plane.

`pulumi_path` (the PATH the CLI runs with) and `cluster_path` (the same, when the control
plane's binaries are there too) skip a test, saying what is missing and how to build it,
unless ELASTICCTR_E2E_REQUIRED=1 (CI, once tools/setup.sh has built the tools): then a
missing tool is an error, so the suite cannot pass by skipping. `control_plane` is one
throwaway etcd + kube-apiserver + controller-manager + scheduler per test module, with
Volcano's CRDs registered; it is stopped by PID and its directory removed, also when a test
fails. `volcano_webhook` puts Volcano's Job-mutating webhook in front of it, as on a real
cluster. Projects (tests/support/pulumi_cli.py) are made per module by the tests themselves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import pulumi_cli
from tests.support.controlplane import load_controlplane
from tests.support.volcano_admission import BINARY, VolcanoJobWebhook, find_binary
from tests.support.volcano_crds import CrdsUnavailable, crd_dir

REQUIRED = os.environ.get("ELASTICCTR_E2E_REQUIRED") == "1"


def unavailable(reason: str) -> None:
    """Skip (or, with ELASTICCTR_E2E_REQUIRED=1, fail) for a missing prerequisite."""
    if REQUIRED:
        pytest.fail(f"ELASTICCTR_E2E_REQUIRED=1 and {reason}", pytrace=False)
    pytest.skip(reason)


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
def control_plane(cluster_path: str, volcano_crd_dir: Path) -> Iterator[Any]:
    """A fresh control plane for the module; `.kubeconfig` is its admin kubeconfig.

    The controller manager is required: `pulumi destroy` deletes the namespace, and only its
    namespace controller empties and removes a terminating namespace."""
    controlplane = load_controlplane()
    cp = controlplane.ControlPlane(crd_dirs=[volcano_crd_dir], controllers="required")
    try:
        cp.start()
    except controlplane.BinariesNotFound as why:
        unavailable(str(why))
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def volcano_webhook(control_plane: Any, cluster_path: str) -> Iterator[VolcanoJobWebhook]:
    """Volcano's Job-mutating webhook in front of the module's control plane: Jobs are then
    stored as on a real cluster (tests/support/volcano_admission.py)."""
    binary = find_binary(cluster_path)
    if binary is None:
        unavailable(f"{BINARY} not found: build it with `bash tools/build-tools.sh volcano`")
        raise AssertionError("unreachable: unavailable() raises")
    with VolcanoJobWebhook(control_plane, binary) as webhook:
        yield webhook
