"""The control plane (tools/localcluster/controlplane.py, with the CRDs and CLI of
tests/support/controlplane.py): start, use, stop, nothing left behind."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from elasticctr_common.ports import free_ports

from tests.support.controlplane import start
from tools.localcluster import controlplane

REPO = Path(__file__).resolve().parents[2]

kubernetes = pytest.importorskip(
    "kubernetes", reason="the kubernetes Python client is not installed"
)

NAMESPACE = "elasticctr-e2e"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _require_binaries() -> None:
    missing = [
        n
        for n in controlplane.REQUIRED
        if n not in controlplane.find_binaries(controlplane.REQUIRED)
    ]
    if missing:
        pytest.skip(
            f"{', '.join(missing)} not built: run `bash tools/build-tools.sh kubernetes etcd`"
        )


def _volcano_job(trainers: int, pservers: int) -> dict:
    def task(name: str, replicas: int) -> dict:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": name,
                            "image": "elasticctr/trainer:e2e",
                            "env": [{"name": "TRAINING_ROLE", "value": name.upper()}],
                            "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                }
            },
        }

    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "ctr", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": trainers + pservers,
            "plugins": {"svc": [], "env": []},
            "tasks": [task("pserver", pservers), task("trainer", trainers)],
        },
    }


def test_control_plane_serves_volcano_jobs_and_stops_clean(volcano_crd_dir: Path):
    _require_binaries()
    cp = start([volcano_crd_dir])
    pids = dict(cp.pids)
    workdir = cp.dir
    assert workdir is not None  # set by start()
    try:
        assert {"etcd", "kube-apiserver"} <= set(pids)
        api_client = kubernetes.config.new_client_from_config(config_file=str(cp.kubeconfig))
        core = kubernetes.client.CoreV1Api(api_client)
        custom = kubernetes.client.CustomObjectsApi(api_client)

        core.create_namespace(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        )
        custom.create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", _volcano_job(trainers=2, pservers=1)
        )

        job = custom.get_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", "ctr"
        )
        assert job["spec"]["minAvailable"] == 3
        assert job["spec"]["plugins"] == {"svc": [], "env": []}
        assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [
            ("pserver", 1),
            ("trainer", 2),
        ]
        assert (
            job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"]
            == "elasticctr/trainer:e2e"
        )

        # The CRD schema is enforced: a wrong type is rejected by the API server.
        bad = _volcano_job(trainers=2, pservers=1)
        bad["metadata"]["name"] = "bad"
        bad["spec"]["minAvailable"] = "three"
        with pytest.raises(kubernetes.client.ApiException) as err:
            custom.create_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", NAMESPACE, "jobs", bad
            )
        assert err.value.status == 422

        if "kube-controller-manager" in pids:
            # The controller manager runs: the namespace gets its default ServiceAccount.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                names = [
                    sa.metadata.name for sa in core.list_namespaced_service_account(NAMESPACE).items
                ]
                if "default" in names:
                    break
                time.sleep(0.5)
            assert "default" in names
        api_client.close()
    finally:
        cp.stop()

    for name, pid in pids.items():
        assert not controlplane.pid_alive(pid), f"{name} (pid {pid}) still running"
    assert not workdir.exists()


def test_cli_up_and_down(tmp_path, volcano_crd_dir: Path):
    _require_binaries()
    state = tmp_path / "cp"
    tool = [sys.executable, "-m", "tests.support.controlplane"]
    up = subprocess.run(
        [*tool, "up", "--dir", str(state), "--crds", str(volcano_crd_dir), "--no-controllers"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip())
    assert kubeconfig.is_file()
    pids = [p["pid"] for p in json.loads((state / "controlplane.json").read_text())["processes"]]
    try:
        assert len(pids) == 2 and all(controlplane.pid_alive(p) for p in pids)
        api_client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        crds = kubernetes.client.ApiextensionsV1Api(api_client).list_custom_resource_definition()
        assert {c.metadata.name for c in crds.items} >= {
            "jobs.batch.volcano.sh",
            "podgroups.scheduling.volcano.sh",
            "queues.scheduling.volcano.sh",
        }
        api_client.close()
    finally:
        down = subprocess.run(
            [*tool, "down", "--dir", str(state)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
        )
    assert down.returncode == 0, down.stderr
    assert not any(controlplane.pid_alive(p) for p in pids)
    assert not state.exists()


def test_a_port_taken_before_etcd_binds_it_is_picked_again(monkeypatch: pytest.MonkeyPatch):
    """A port picked free and taken by another process before etcd binds it (seen in CI,
    by an outgoing connection, when ports came from the ephemeral range): the start is
    tried again with new ports, and the first attempt's processes are gone."""
    _require_binaries()
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    picks: list[list[int]] = []

    def first_pick_taken(count: int) -> list[int]:
        ports = free_ports(count)
        if not picks:
            ports[0] = port  # etcd's client port
        picks.append(ports)
        return ports

    monkeypatch.setattr(controlplane, "free_ports", first_pick_taken)
    launched: list[int] = []
    real_launch = controlplane.ControlPlane._launch

    def launch(self: controlplane.ControlPlane, server: controlplane._Server) -> None:
        real_launch(self, server)
        launched.append(self.pids[server.name])

    monkeypatch.setattr(controlplane.ControlPlane, "_launch", launch)
    try:
        cp = controlplane.ControlPlane(controllers=False).start()
        try:
            assert len(picks) == 2, picks
            assert cp.ports["etcd"] == picks[1][0] != port
            first_etcd = launched[0]
            assert not controlplane.pid_alive(first_etcd)
            assert cp.pids["etcd"] != first_etcd and controlplane.pid_alive(cp.pids["etcd"])
        finally:
            cp.stop()
    finally:
        taken.close()
