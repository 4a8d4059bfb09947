"""The `ci` stack file (stacks/Pulumi.ci.yaml) stays the dev stack on a throwaway control
plane: the end-to-end tests then say something about dev. Under mocks, no CLI needed."""

from __future__ import annotations

from typing import Any

from tests.support import pulumi_harness as harness
from tests.support.stacks import graph

# What ci may set differently from dev, and why (the file's comments say the same).
CI_ONLY = {
    "elasticctr:cluster",  # the control plane's kubeconfig, no readiness waits
    "elasticctr:volcano",  # Volcano's CRDs come with the control plane, not a chart
    "elasticctr:namespace",
    "elasticctr:images",  # pinned tags, never built
}
DEFAULT_KUBECONFIG = "/tmp/elasticctr-ci/admin.kubeconfig"  # docs/e2e.md


def _config(stack: str) -> dict[str, Any]:
    return harness.stack_config(stack)


def test_ci_is_the_dev_stack_apart_from_its_cluster() -> None:
    ci, dev = _config("ci"), _config("dev")
    shared = {k: v for k, v in ci.items() if k not in CI_ONLY}
    assert shared == {k: v for k, v in dev.items() if k not in CI_ONLY}
    assert set(ci) >= CI_ONLY


def test_ci_reaches_only_a_local_control_plane() -> None:
    ci = _config("ci")
    assert ci["elasticctr:cloud"] == "existing"
    assert ci["elasticctr:cluster"] == {"kubeconfig": DEFAULT_KUBECONFIG, "skip_await": True}
    assert ci["elasticctr:volcano"] == {"managed": True}
    assert ci["elasticctr:namespace"] == "elasticctr-ci"
    assert ci["elasticctr:images"]["build"] is False


def test_ci_declares_what_dev_declares_but_the_volcano_chart() -> None:
    ci = {(r.type, r.name) for r in graph("ci").resources}
    dev = {(r.type, r.name) for r in graph("dev").resources}
    assert dev - ci == {
        ("elasticctr:volcano:Volcano", "volcano"),
        ("kubernetes:helm.sh/v3:Release", "volcano-release"),
        # The Job that waits for Volcano's webhook to answer and the training queue to be
        # Open, its account, and what lets it read that queue.
        ("kubernetes:batch/v1:Job", "volcano-admission-ready"),
        ("kubernetes:core/v1:ServiceAccount", "volcano-admission-ready"),
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "volcano-admission-ready"),
        ("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding", "volcano-admission-ready"),
    }
    assert ci - dev == set()
    # Every pod of ci skips the readiness wait (nothing runs on the control plane).
    for manifest in graph("ci").manifests():
        annotations = manifest["metadata"].get("annotations") or {}
        if manifest["kind"] != "Namespace":
            assert annotations.get("pulumi.com/skipAwait") == "true", manifest["metadata"]["name"]
