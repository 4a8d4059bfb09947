"""The local cluster's volume provisioner against a real API server and PV controller: a
claim of the local-path class gets a hostPath volume it binds to; once released, the
volume and its directory are gone."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.localcluster import addons, provisioner
from tools.localcluster.api import Api

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _until(check: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s: {check.__doc__}")


@pytest.fixture
def api(control_plane: Any) -> Api:
    client = Api(control_plane.server, control_plane.dir / "pki", "admin")
    storage_class = next(o for o in addons.objects("127.0.0.1") if o["kind"] == "StorageClass")
    addons.apply(client, storage_class)
    return client


@pytest.fixture
def ns(api: Api) -> Iterator[str]:
    """A namespace per test: a deleted one lingers while the namespace controller empties it."""
    namespace = f"provisioner-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    yield namespace
    api.request("DELETE", f"/api/v1/namespaces/{namespace}")


def _claim(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        # No class named: the default class (local-path) is filled in by admission.
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def test_a_claim_is_bound_and_its_volume_reclaimed(api: Api, ns: str, tmp_path: Path) -> None:
    status, claim = api.request(
        "POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", _claim("data", ns)
    )
    assert status == 201, claim
    assert claim["spec"]["storageClassName"] == addons.STORAGE_CLASS

    def pending() -> dict[str, Any] | None:
        """the claim is Pending"""
        current = api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
        return current if current.get("status", {}).get("phase") == "Pending" else None

    name = provisioner.provision(api, tmp_path, _until(pending))
    assert name is not None
    volume = api.get(f"/api/v1/persistentvolumes/{name}")
    directory = Path(volume["spec"]["hostPath"]["path"])
    assert directory.parent == tmp_path and directory.is_dir()
    assert directory.stat().st_mode & 0o777 == 0o777  # any pod user may write

    def bound() -> bool:
        """the PV controller binds the claim to the volume"""
        current = api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
        return current["status"].get("phase") == "Bound" and current["spec"]["volumeName"] == name

    _until(bound)
    # Bound: nothing to provision again, nothing to reclaim.
    assert (
        provisioner.provision(
            api, tmp_path, api.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")
        )
        is None
    )
    assert provisioner.reclaim(api, tmp_path, api.get(f"/api/v1/persistentvolumes/{name}")) is False

    api.request("DELETE", f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data")

    def released() -> dict[str, Any] | None:
        """the volume is Released once its claim is gone"""
        current = api.get(f"/api/v1/persistentvolumes/{name}")
        return current if current.get("status", {}).get("phase") == "Released" else None

    assert provisioner.reclaim(api, tmp_path, _until(released)) is True
    assert not directory.exists()
    _until(lambda: api.request("GET", f"/api/v1/persistentvolumes/{name}")[0] == 404)


def test_claims_of_other_classes_are_left_alone(api: Api, ns: str, tmp_path: Path) -> None:
    other = _claim("other", ns)
    other["spec"]["storageClassName"] = "someone-elses"
    status, claim = api.request("POST", f"/api/v1/namespaces/{ns}/persistentvolumeclaims", other)
    assert status == 201, claim
    claim["status"] = {"phase": "Pending"}
    assert provisioner.provision(api, tmp_path, claim) is None
    assert list(tmp_path.iterdir()) == []
