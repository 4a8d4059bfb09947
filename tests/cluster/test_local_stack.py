"""`pulumi up --stack local` on the real one-node cluster: every workload rolled out, Volcano
installed by the program and admitting (or refusing) Jobs, HDFS formatted with its datanode,
every container non-root on a read-only root writing only where a volume is mounted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import LocalStack, exec_in, iter_containers, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NS = LocalStack.NAMESPACE
# Ready only once training has published a first version (docs/architecture.md).
AFTER_FIRST_MODEL = {"cube", "serving"}


def _apps(api: Any) -> Any:
    from kubernetes import client

    return client.AppsV1Api(api)


def test_every_workload_rolls_out(local_stack: LocalStack) -> None:
    api = local_stack.api()
    apps = _apps(api)
    sets = [
        *apps.list_namespaced_deployment(NS).items,
        *apps.list_namespaced_stateful_set(NS).items,
    ]
    names = {s.metadata.name for s in sets}
    assert {
        "minio",
        "hdfs-namenode",
        "hdfs-datanode",
        "mlflow",
        "cube-transfer",
        "serving",
    } <= names
    for workload in sets:
        component = workload.metadata.labels["app.kubernetes.io/component"]
        if component in AFTER_FIRST_MODEL:
            continue
        assert (workload.status.ready_replicas or 0) == workload.spec.replicas, (
            workload.metadata.name
        )
    # Cube and serving wait for a first model: their containers run and stay up meanwhile.
    for pod, _ in iter_containers(api, NS):
        component = pod.metadata.labels.get("app.kubernetes.io/component")
        if component in AFTER_FIRST_MODEL:
            restarts = sum(s.restart_count for s in pod.status.container_statuses)
            assert all(s.state.running for s in pod.status.container_statuses), pod.metadata.name
            assert restarts == 0, f"{pod.metadata.name} restarted {restarts} times"
    print(f"\n[local stack] timings: {local_stack.timings}")


def test_volcano_runs_and_its_webhook_refuses_an_invalid_job(local_stack: LocalStack) -> None:
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = local_stack.api()
    for deployment in _apps(api).list_namespaced_deployment("volcano-system").items:
        assert deployment.status.ready_replicas == deployment.spec.replicas, (
            deployment.metadata.name
        )
    invalid = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "invalid", "namespace": NS},
        "spec": {
            # More members than the job has pods: Volcano's webhook refuses it.
            "minAvailable": 5,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "name": "only",
                    "replicas": 1,
                    "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}},
                }
            ],
        },
    }
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", NS, "jobs", invalid
        )
    assert refused.value.status in (400, 403, 422)
    assert "admission webhook" in refused.value.body and "minAvailable" in refused.value.body


def test_hdfs_is_formatted_and_its_datanode_registered(local_stack: LocalStack) -> None:
    api = local_stack.api()

    def report() -> str:
        code, out = exec_in(api, NS, "hdfs-namenode-0", "namenode", ["hdfs", "dfsadmin", "-report"])
        return out if code == 0 and "Live datanodes (1)" in out else ""

    wait_for(report, 120, "hdfs dfsadmin -report shows one live datanode")


def test_containers_are_non_root_on_a_read_only_root(local_stack: LocalStack) -> None:
    """uid 1000, and the only writable mounts are the volumes the program mounted (plus what
    the runtime itself provides: /dev/shm, /etc/hosts and the like)."""
    api = local_stack.api()
    runtime_mounts = {"/dev/shm", "/dev/termination-log", "/etc/hosts", "/etc/hostname"}
    runtime_mounts |= {"/etc/resolv.conf", "/dev/mqueue", "/sys/fs/cgroup"}
    checked = 0
    for pod, container in iter_containers(api, NS):
        if pod.metadata.name.startswith("probe-"):
            continue
        name = f"{pod.metadata.name}/{container.name}"
        code, uid = exec_in(api, NS, pod.metadata.name, container.name, ["id", "-u"])
        assert (code, uid.strip()) == (0, "1000"), name
        code, out = exec_in(api, NS, pod.metadata.name, container.name, ["cat", "/proc/mounts"])
        assert code == 0, name
        writable = {
            fields[1]
            for fields in (line.split() for line in out.splitlines())
            if "rw" in fields[3].split(",")
            and fields[0] not in ("proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2")
            and not fields[1].startswith(("/proc", "/sys", "/dev/pts"))
        }
        assert "/" not in writable, f"{name}: root file system is writable"
        mounted = {m.mount_path for m in container.volume_mounts or [] if not m.read_only}
        assert writable - runtime_mounts <= mounted, (
            f"{name} can write outside its volumes: {sorted(writable - runtime_mounts - mounted)}"
        )
        checked += 1
    assert checked >= 8, f"only {checked} containers were running"
