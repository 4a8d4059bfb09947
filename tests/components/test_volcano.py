"""Volcano: the official chart, pinned, in volcano-system."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from components.volcano import CHART_VERSION, Volcano, VolcanoArgs
from tests.support import pulumi_harness as harness


def test_official_chart_pinned() -> None:
    def program() -> None:
        Volcano("volcano", VolcanoArgs(provider=k8s.Provider("k8s")))

    release = harness.run(program, {}).one("kubernetes:helm.sh/v3:Release").inputs
    assert release["chart"] == "volcano" and release["version"] == CHART_VERSION == "1.15.0"
    assert release["repositoryOpts"] == {"repo": "https://volcano-sh.github.io/helm-charts"}
    assert release["namespace"] == "volcano-system" and release["createNamespace"] is True
    assert release.get("skipAwait") is False


def test_ready_waits_for_the_webhook_and_the_training_queue() -> None:
    def program() -> None:
        Volcano("volcano", VolcanoArgs(provider=k8s.Provider("k8s"), queue="ads"))

    graph = harness.run(program, {})
    job = graph.one("kubernetes:batch/v1:Job").inputs
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    script = container["command"][-1]
    assert "openssl s_client -connect volcano-admission-service.volcano-system.svc:443" in script
    assert "kubectl get queues.scheduling.volcano.sh ads" in script and "= Open ]" in script
    # Its token is mounted (it reads the queue), and it may read that queue alone.
    assert pod["automountServiceAccountToken"] is True
    account = graph.one("kubernetes:core/v1:ServiceAccount").inputs["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    role = graph.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole").inputs
    assert role["rules"] == [
        {
            "apiGroups": ["scheduling.volcano.sh"],
            "resources": ["queues"],
            "resourceNames": ["ads"],
            "verbs": ["get"],
        }
    ]
    binding = graph.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding").inputs
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": "volcano-system"}
    ]
