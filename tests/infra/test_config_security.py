"""Config of the stack's exposure and credentials (docs/architecture.md, "Security"):
what reaches serving, the bucket keys per workload, the ports of an external HDFS."""

from __future__ import annotations

from typing import Any

import pytest

from infra.program import main
from tests.infra.test_config import problems_of
from tests.support import pulumi_harness as harness


def _egress(graph: harness.Graph, component: str) -> list[dict[str, Any]]:
    [policy] = [
        p.inputs["spec"]
        for p in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["name"] == f"egress-{component}"
    ]
    return list(policy["egress"])


def test_an_external_hdfs_is_reached_on_its_namenode_and_datanode_ports() -> None:
    graph = harness.run(
        main,
        {
            "elasticctr:hdfs": {
                "mode": "external",
                "address": "hdfs://10.20.0.4:9000",
                "datanode_port": 50010,
            },
            "elasticctr:data": {"ugi": "alice,pw"},
        },
        ("elasticctr:data",),
    )
    rules = _egress(graph, "trainer")
    namenode = {"ipBlock": {"cidr": "10.20.0.4/32"}}
    assert {"to": [namenode], "ports": [{"port": 9000, "protocol": "TCP"}]} in rules
    assert {"ports": [{"port": 50010, "protocol": "TCP"}]} in rules


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            {"hdfs": {"mode": "in-cluster", "datanode_port": 50010}},
            "elasticctr:hdfs.datanode_port is only for mode external, got 50010 with mode in-cluster",
        ),
        (
            {"hdfs": {"mode": "none", "address": "hdfs://nn:8020"}, "data": {"source": "storage"}},
            'elasticctr:hdfs.address is only for mode external, got "hdfs://nn:8020" with mode none',
        ),
    ],
)
def test_refused(config: dict[str, Any], expected: str) -> None:
    assert problems_of({f"elasticctr:{k}": v for k, v in config.items()}) == [expected]
