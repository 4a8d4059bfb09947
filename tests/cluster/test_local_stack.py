"""`pulumi up --stack local` on the real one-node cluster: every workload rolled out, Volcano
installed by the program and admitting (or refusing) Jobs, HDFS formatted with its datanode,
every container non-root on a read-only root writing only where a volume is mounted."""

from __future__ import annotations

from typing import Any

import pytest

from components import hdfs, kafka, kube
from tests.support.cluster import LocalStack, exec_in, iter_containers, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NS = LocalStack.NAMESPACE
# Ready only once training has published a first version (docs/architecture.md).
AFTER_FIRST_MODEL = {"cube", "serving"}
# Pods of official images that run as the image's own user.
IMAGE_USERS = {
    "hdfs-namenode": hdfs.IMAGE_USER,
    "hdfs-datanode": hdfs.IMAGE_USER,
    "kafka": kafka.IMAGE_USER,
}


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
    """uid 10001 (the official Hadoop and Kafka images: their own users, uid 1000,
    docs/architecture.md); the root file system is read-only; and every other writable mount that is
    not a volume the program mounted refuses the container's user (the runtime's /dev, for
    one), but the IPC mounts every container has (/dev/shm, /dev/mqueue)."""
    api = local_stack.api()
    checked = 0
    for pod, container in iter_containers(api, NS):
        if pod.metadata.name.startswith("probe-"):
            continue
        name = f"{pod.metadata.name}/{container.name}"

        def run(
            *argv: str, pod_name: str = pod.metadata.name, c: str = container.name
        ) -> tuple[int, str]:
            return exec_in(api, NS, pod_name, c, list(argv))

        component = pod.metadata.labels.get(kube.COMPONENT_LABEL, "")
        uid = IMAGE_USERS.get(component, kube.RUN_AS_USER)
        assert run("id", "-u") == (0, f"{uid}\n"), name
        code, out = run("cat", "/proc/mounts")
        assert code == 0, name
        mounts = [line.split() for line in out.splitlines()]
        root = next(fields for fields in mounts if fields[1] == "/")
        assert "ro" in root[3].split(","), f"{name}: root file system is writable: {root}"
        assert run("touch", "/.elasticctr-probe")[0] != 0, f"{name} wrote to /"
        volumes = {m.mount_path for m in container.volume_mounts or [] if not m.read_only}
        for fields in mounts:
            point, options = fields[1], fields[3].split(",")
            if "rw" not in options or point in volumes or point in ("/dev/shm", "/dev/mqueue"):
                continue
            if point.startswith(("/proc", "/sys")):
                continue
            # Files the runtime mounts (/etc/hosts, ...) are not directories to write into.
            code, _ = run("test", "-d", point)
            if code != 0:
                continue
            code, out = run("touch", f"{point}/.elasticctr-probe")
            assert code != 0, f"{name} can write to {point}, which is no volume of its pod"
        checked += 1
    assert checked >= 8, f"only {checked} containers were running"
