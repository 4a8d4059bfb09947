"""no-privileged-containers, no-host-namespaces, run-as-non-root."""

from __future__ import annotations

import pytest

from tests.policy.support import GOOD_SECURITY, UNKNOWN_STRING, container, pod, violations

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


@pytest.mark.parametrize(
    "rule", ["no-privileged-containers", "no-host-namespaces", "run-as-non-root"]
)
def test_a_restricted_pod_passes(rule: str) -> None:
    props = pod([container()], securityContext={"runAsNonRoot": True, "runAsUser": 1000})
    assert violations(rule, DEPLOYMENT, props) == []


@pytest.mark.parametrize(
    ("security", "problem"),
    [
        ({"privileged": True}, "securityContext.privileged is true"),
        ({"allowPrivilegeEscalation": True}, "securityContext.allowPrivilegeEscalation is true"),
        (
            {"capabilities": {"add": ["NET_BIND_SERVICE", "SYS_ADMIN", "CAP_NET_RAW"]}},
            "securityContext.capabilities.add has SYS_ADMIN, CAP_NET_RAW",
        ),
    ],
)
def test_privileged_containers_fail(security: dict, problem: str) -> None:
    sidecar = container("sidecar", securityContext={**GOOD_SECURITY, **security})
    assert violations("no-privileged-containers", DEPLOYMENT, pod([container(), sidecar])) == [
        f'Deployment "web": container "sidecar" (spec.template.spec.containers[1]): {problem}. '
        "Remove this setting: a privileged container can take over its node."
    ]


def test_init_containers_may_not_be_privileged_either() -> None:
    init = container("init", securityContext={"privileged": True})
    props = pod([container()], initContainers=[init])
    assert len(violations("no-privileged-containers", DEPLOYMENT, props)) == 1


def test_net_bind_service_is_the_one_capability_a_container_may_add() -> None:
    app = container(
        securityContext={**GOOD_SECURITY, "capabilities": {"add": ["NET_BIND_SERVICE"]}}
    )
    assert violations("no-privileged-containers", DEPLOYMENT, pod([app])) == []


def test_host_namespaces_fail() -> None:
    props = pod([container()], hostNetwork=True, hostPID=True, hostIPC=False)
    assert violations("no-host-namespaces", DEPLOYMENT, props) == [
        'Deployment "web": spec.template.spec.hostNetwork, spec.template.spec.hostPID are true. '
        "Pods must not share the node's network, PID or IPC namespace; remove the setting."
    ]


def test_host_ipc_of_a_volcano_task_fails() -> None:
    props = {
        "spec": {
            "tasks": [
                {
                    "name": "pserver",
                    "template": {"spec": {"hostIPC": True, "containers": [container()]}},
                }
            ]
        }
    }
    [message] = violations("no-host-namespaces", "kubernetes:batch.volcano.sh/v1alpha1:Job", props)
    assert "spec.tasks[0] (pserver).template.spec.hostIPC is true" in message


def test_run_as_non_root_may_come_from_the_pod() -> None:
    props = pod([container(securityContext={})], securityContext={"runAsNonRoot": True})
    assert violations("run-as-non-root", DEPLOYMENT, props) == []


def test_a_container_overriding_its_pod_to_root_fails() -> None:
    app = container(securityContext={"runAsNonRoot": False})
    props = pod([app], securityContext={"runAsNonRoot": True})
    [message] = violations("run-as-non-root", DEPLOYMENT, props)
    assert "runAsNonRoot is not true" in message


def test_missing_run_as_non_root_fails() -> None:
    assert violations("run-as-non-root", DEPLOYMENT, pod([container(securityContext={})])) == [
        'Deployment "web": container "app" (spec.template.spec.containers[0]): runAsNonRoot is '
        "not true (set it in the pod's or the container's securityContext)."
    ]


def test_run_as_user_0_fails_even_with_run_as_non_root() -> None:
    app = container(securityContext={"runAsNonRoot": True, "runAsUser": 0})
    [message] = violations("run-as-non-root", DEPLOYMENT, pod([app]))
    assert message.endswith("runAsUser is 0 (root).")


def test_unknown_security_context_is_not_judged_during_preview() -> None:
    app = container(securityContext={"runAsNonRoot": UNKNOWN_STRING, "privileged": UNKNOWN_STRING})
    for rule in ("run-as-non-root", "no-privileged-containers"):
        assert violations(rule, DEPLOYMENT, pod([app])) == []
