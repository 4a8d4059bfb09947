"""The simulated cluster's nodes (tools/localcluster/simulated.py): shaped like a stack's
pools, spread over zones, managed by kwok; and its CLI against the real servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.kube import POOL_LABEL
from tools.localcluster import controlplane
from tools.localcluster.simulated import (
    KWOK_ANNOTATION,
    ZONE_LABEL,
    NodePool,
    node_manifests,
)

REPO = Path(__file__).resolve().parents[3]


def test_a_pool_is_read_from_the_command_line() -> None:
    assert NodePool.parse("serving:20:96:384Gi") == NodePool("serving", 20, "96", "384Gi")


@pytest.mark.parametrize("text", ["serving:20:96", "serving:zero:96:1Gi", "serving:0:96:1Gi"])
def test_a_malformed_pool_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        NodePool.parse(text)
    assert str(refused.value) == (
        f"--pool must be NAME:NODES:CPU:MEMORY with NODES >= 1, e.g. training:34:16:64Gi, "
        f"got {text!r}"
    )


def test_nodes_carry_their_pool_and_zone_and_go_round_the_zones() -> None:
    pools = [
        NodePool("training", 4, "32", "128Gi"),
        NodePool("serving", 2, "96", "384Gi", taints=(("dedicated", "serving", "NoSchedule"),)),
    ]
    nodes = node_manifests(pools, zones=3)
    assert [n["metadata"]["name"] for n in nodes] == [
        "training-000", "training-001", "training-002", "training-003", "serving-000",
        "serving-001",
    ]  # fmt: skip
    assert [n["metadata"]["labels"][ZONE_LABEL] for n in nodes] == [
        "zone-a", "zone-b", "zone-c", "zone-a", "zone-a", "zone-b",
    ]  # fmt: skip
    for node in nodes:
        assert node["metadata"]["annotations"][KWOK_ANNOTATION] == "fake"
        pool = node["metadata"]["labels"][POOL_LABEL]
        shape = next(p for p in pools if p.name == pool)
        assert node["status"]["allocatable"] == {
            "cpu": shape.cpu, "memory": shape.memory, "pods": "110",
        }  # fmt: skip
    assert nodes[-1]["spec"]["taints"] == [
        {"key": "dedicated", "value": "serving", "effect": "NoSchedule"}
    ]
    assert nodes[0]["spec"]["taints"] == []


def test_without_zones_nodes_have_no_zone() -> None:
    nodes = node_manifests([NodePool("any", 2, "4", "8Gi")], zones=0)
    assert all(ZONE_LABEL not in n["metadata"]["labels"] for n in nodes)


@pytest.mark.e2e
@pytest.mark.slow
def test_the_cli_starts_ready_kwok_nodes_and_stops_every_process(tmp_path: Path) -> None:
    state = tmp_path / "sim"
    up = subprocess.run(
        [sys.executable, "-m", "tools.localcluster.simulated", "up", f"--dir={state}",
         "--pool=training:2:16:64Gi", "--pool=serving:1:8:32Gi", "--zones=2"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    processes: list[dict[str, object]] = []
    try:
        assert up.returncode == 0, up.stderr
        processes = json.loads((state / controlplane.STATE_FILE).read_text())["processes"]
        kubeconfig = up.stdout.strip()
        assert Path(kubeconfig).is_file()
        names = {p["name"] for p in processes}
        assert {"vc-scheduler", "vc-controller-manager", "kwok", "provisioner"} <= names
        nodes = subprocess.run(
            ["kubectl", f"--kubeconfig={kubeconfig}", "get", "nodes", "-o", "json"],
            capture_output=True, text=True, check=True, timeout=60,
            # kubectl keeps its discovery cache under HOME: never the checkout's.
            env={"PATH": os.pathsep.join(controlplane.tool_path_dirs()), "HOME": str(tmp_path)},
        )  # fmt: skip
        ready = {
            n["metadata"]["name"]: n["metadata"]["labels"].get(ZONE_LABEL)
            for n in json.loads(nodes.stdout)["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
        }
        assert ready == {
            "training-000": "zone-a",
            "training-001": "zone-b",
            "serving-000": "zone-a",
        }
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "tools.localcluster.simulated", "down", f"--dir={state}"],
            cwd=REPO, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert not state.exists()
    assert not [p["pid"] for p in processes if controlplane.pid_alive(int(str(p["pid"])))]
