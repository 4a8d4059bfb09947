"""The program's NetworkPolicies, enforced by kube-router on the real node, both ways: every
path the design needs works, and paths it does not need are refused (at once: kube-router
rejects, it does not drop).

Probes are pods of the cube image (it has Python) labelled as the component whose traffic
they stand for, in the stack's namespace or in a namespace of their own; each opens TCP
connections to pod IPs and Service names and reports what happened.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.cluster import LocalStack, exec_in, pods, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
NS = LocalStack.NAMESPACE
OUTSIDE = "np-outsider"
PROBE = """
import json, socket, sys
results = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=4).close()
        results[target] = "open"
    except ConnectionRefusedError:
        results[target] = "refused"
    except OSError as e:
        results[target] = type(e).__name__
print(json.dumps(results))
"""


def _probe_pod(name: str, namespace: str, component: str, image: str) -> dict[str, Any]:
    """A pod that passes the restricted Pod Security Standard and sleeps until deleted."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/part-of": "elasticctr",
                "app.kubernetes.io/component": component,
            },
        },
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["python", "-c", "import time; time.sleep(86400)"],
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "64Mi"},
                        "limits": {"cpu": "10m", "memory": "64Mi"},
                    },
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def probes(local_stack: LocalStack) -> Iterator[dict[str, str]]:
    """Probe pods: name -> namespace."""
    from kubernetes import client

    api = local_stack.api()
    core = client.CoreV1Api(api)
    image = next(p for p in pods(api, NS, "app.kubernetes.io/component=cube-transfer"))
    cube_image = image.spec.containers[0].image
    core.create_namespace({"metadata": {"name": OUTSIDE}})
    wanted = {
        "probe-trainer": (NS, "trainer"),
        "probe-serving": (NS, "serving"),
        "probe-transfer": (NS, "cube-transfer"),
        "probe-cube": (NS, "cube"),
        "probe-outsider": (OUTSIDE, "trainer"),
    }
    for name, (namespace, component) in wanted.items():
        core.create_namespaced_pod(namespace, _probe_pod(name, namespace, component, cube_image))
    for name, (namespace, _) in wanted.items():

        def running(n: str = name, ns: str = namespace) -> bool:
            return bool(core.read_namespaced_pod(n, ns).status.phase == "Running")

        wait_for(running, 120, f"probe pod {name} running")
    try:
        yield {name: namespace for name, (namespace, _) in wanted.items()}
    finally:
        for name, (namespace, _) in wanted.items():
            core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        core.delete_namespace(OUTSIDE)


def _reach(stack: LocalStack, probe: str, namespace: str, targets: list[str]) -> dict[str, str]:
    code, out = exec_in(stack.api(), namespace, probe, "probe", ["python", "-c", PROBE, *targets])
    assert code == 0, out
    return dict(json.loads(out.strip().splitlines()[-1]))


def _pod_ip(stack: LocalStack, selector: str) -> str:
    def running() -> str:
        found = [p for p in pods(stack.api(), NS, selector) if p.status.phase == "Running"]
        return found[0].status.pod_ip if found else ""

    return str(wait_for(running, 300, f"a running pod of {selector}"))


def test_paths_the_design_needs_are_open(local_stack: LocalStack, probes: dict[str, str]) -> None:
    svc = f"{NS}.svc.cluster.local"
    pserver = _pod_ip(local_stack, "app.kubernetes.io/component=pserver")
    cube = _pod_ip(local_stack, "app.kubernetes.io/component=cube")
    wanted = {
        "probe-trainer": [
            f"{pserver}:30240",
            f"minio.{svc}:9000",
            f"hdfs-namenode.{svc}:8020",
            f"mlflow.{svc}:5000",
        ],
        "probe-serving": [f"{cube}:8027", f"cube-transfer.{svc}:8099", f"minio.{svc}:9000"],
        "probe-transfer": [f"{cube}:8001", f"{cube}:8027", f"minio.{svc}:9000"],
        "probe-cube": [f"minio.{svc}:9000"],
    }
    for probe, targets in wanted.items():
        # kube-router learns of a new pod (the probe) within its sync: a path may open a
        # few seconds late, never stay shut. How late is printed.
        started, result = time.monotonic(), {}
        while time.monotonic() - started < 30:
            result = _reach(local_stack, probe, probes[probe], targets)
            if result == dict.fromkeys(targets, "open"):
                break
            time.sleep(2)
        print(f"\n[network] {probe}: all open after {time.monotonic() - started:.1f}s")
        assert result == dict.fromkeys(targets, "open"), (
            f"{probe}: {result}; endpoints: {_endpoints(local_stack)}"
        )


def _endpoints(stack: LocalStack) -> dict[str, str]:
    """Each workload pod's readiness and restarts: a closed path to a pod that was not
    ready is not the policy's doing."""
    return {
        p.metadata.name: ",".join(
            f"{c.name} ready={c.ready} restarts={c.restart_count}"
            for c in p.status.container_statuses or []
        )
        for p in pods(stack.api(), NS)
    }


def test_paths_it_does_not_need_are_refused(
    local_stack: LocalStack, probes: dict[str, str]
) -> None:
    pserver = _pod_ip(local_stack, "app.kubernetes.io/component=pserver")
    cube = _pod_ip(local_stack, "app.kubernetes.io/component=cube")
    refused = {
        # Another namespace's pod, labelled like ours: to cube and the pservers.
        "probe-outsider": [f"{cube}:8027", f"{cube}:8001", f"{pserver}:30240"],
        # Serving needs cube's lookups only: not the pservers, not the agents.
        "probe-serving": [f"{pserver}:30240", f"{cube}:8001"],
        # Cube shards talk to no trainer.
        "probe-cube": [f"{pserver}:30240"],
    }
    for probe, targets in refused.items():
        result = _reach(local_stack, probe, probes[probe], targets)
        assert result == dict.fromkeys(targets, "refused"), f"{probe}: {result}"
