"""Where Prometheus may reach the API server (infra/preflight.py `api_server_ports`): the
port a real API server's `kubernetes` Service points at, the cloud's, the config's, and
the common two with a warning when the cluster cannot be asked."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from infra import preflight
from infra.config import StackConfig
from tests.support.controlplane import api_client

REQUIRED_AWS = {"cluster": {"aws": {"region": "eu-west-1"}}}


def _config(**values: Any) -> StackConfig:
    return StackConfig.model_validate({"monitoring": {"prometheus": "in-cluster"}, **values})


def test_an_existing_cluster_is_asked_for_its_api_servers_port(control_plane: Any) -> None:
    from kubernetes import client

    config = _config(cluster={"kubeconfig": str(control_plane.kubeconfig)})
    # This control plane runs no node, so its API server keeps the `kubernetes` Service
    # without endpoints (tools/localcluster/controlplane.py): they are written here as a
    # cluster's API server writes them, with the port this one chose, as the local cluster's.
    port = control_plane.ports["kube-apiserver"]
    assert port not in (443, 6443)
    with api_client(control_plane) as api:
        client.DiscoveryV1Api(api).create_namespaced_endpoint_slice(
            "default",
            {
                "metadata": {
                    "name": "kubernetes",
                    "labels": {"kubernetes.io/service-name": "kubernetes"},
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["192.0.2.2"]}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        )
    assert preflight.api_server_ports(config) == (443, port)


def test_the_config_and_the_cloud_decide_without_asking() -> None:
    assert preflight.api_server_ports(
        _config(monitoring={"prometheus": "in-cluster", "api_server_ports": [8443, 8443]})
    ) == (8443,)
    assert preflight.api_server_ports(_config(cloud="aws", **REQUIRED_AWS)) == (443,)


def test_a_cluster_that_cannot_be_asked_gets_the_common_ports_and_a_warning(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    warnings: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", warnings.append)
    config = _config(cluster={"kubeconfig": str(tmp_path / "missing")})
    assert preflight.api_server_ports(config) == (443, 6443)
    (warning,) = warnings
    assert "monitoring.api_server_ports" in warning and "no usable kubeconfig" in warning
