"""The NetworkPolicy helpers: peers, routes to endpoints outside the cluster, policies."""

from __future__ import annotations

from typing import cast

import pulumi
import pytest

from components.hdfs import client_routes
from components.network import (
    ANYWHERE,
    DNS,
    Outside,
    Route,
    allow_egress,
    allow_ingress,
    egress_rule,
    url_route,
)
from tests.support.components import run_component

# These policies are made outside any component: parented to the stack itself.
NO_PARENT = cast(pulumi.Resource, None)


@pytest.mark.parametrize(
    ("url", "route"),
    [
        ("https://s3.us-west-2.amazonaws.com", Route(ANYWHERE, (443,))),
        ("http://minio.example.test", Route(ANYWHERE, (80,))),
        ("https://obs.example.test:8443/", Route(ANYWHERE, (8443,))),
        ("http://10.1.2.3:9000", Route(Outside("10.1.2.3/32"), (9000,))),
        ("http://[fd00::5]:9000", Route(Outside("fd00::5/128"), (9000,))),
        ("hdfs://namenode.example.test:8020", Route(ANYWHERE, (8020,))),
    ],
)
def test_an_endpoint_outside_is_reached_by_its_port_and_address(url: str, route: Route) -> None:
    assert url_route(url) == route


def test_an_endpoint_without_port_or_host_is_refused() -> None:
    with pytest.raises(ValueError, match="has no host and port"):
        url_route("hdfs://namenode.example.test")


def test_hdfs_clients_reach_namenode_and_datanodes() -> None:
    assert client_routes("in-cluster") == (
        Route("hdfs-namenode", (8020,)),
        Route("hdfs-datanode", (9866,)),
    )
    # External: the namenode's address (its IP block when it is one), datanodes anywhere.
    assert client_routes("external", "hdfs://192.168.7.1:9000", 50010) == (
        Route(Outside("192.168.7.1/32"), (9000,)),
        Route(ANYWHERE, (50010,)),
    )


def test_rules_name_pods_blocks_or_nothing_for_anywhere() -> None:
    assert egress_rule(DNS) == {
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    }
    pods = egress_rule(Route("cube", (8001, 8027)))
    assert pods["to"] == [
        {
            "pod_selector": {
                "match_labels": {
                    "app.kubernetes.io/part-of": "elasticctr",
                    "app.kubernetes.io/component": "cube",
                }
            }
        }
    ]
    assert egress_rule(Route(Outside("10.0.0.0/8"), (443,)))["to"] == [
        {"ip_block": {"cidr": "10.0.0.0/8"}}
    ]


def test_policies_of_one_component() -> None:
    def build(target):
        allow_ingress(target, "in", "mlflow", [5000], ["trainer", Outside("10.0.0.0/8")], NO_PARENT)
        assert allow_egress(target, "none", "hdfs-namenode", [], NO_PARENT) is None
        allow_egress(target, "out", "mlflow", [Route(ANYWHERE, (443,))], NO_PARENT)

    graph = run_component(build)
    ingress, egress = (
        graph.one("kubernetes:networking.k8s.io/v1:NetworkPolicy", n).inputs for n in ("in", "out")
    )
    assert ingress["metadata"]["name"] == "allow-mlflow"
    assert [list(peer) for peer in ingress["spec"]["ingress"][0]["from"]] == [
        ["podSelector"],
        ["ipBlock"],
    ]
    assert egress["metadata"]["name"] == "egress-mlflow"
    assert egress["spec"]["policyTypes"] == ["Egress"]
    assert egress["spec"]["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}]}]


def test_ingress_from_nobody_is_a_mistake() -> None:
    with pytest.raises(ValueError, match="no clients"):
        run_component(lambda t: allow_ingress(t, "in", "mlflow", [5000], [], NO_PARENT))
