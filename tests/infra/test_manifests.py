"""Every Kubernetes object the program declares, for every stack: valid against the
Kubernetes OpenAPI schema (strict), Volcano Jobs against Volcano's CRD, and every pod
bounded, unprivileged and non-root."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tests.support import pulumi_harness as harness
from tests.support.manifests import (
    KUBERNETES_VERSIONS,
    VOLCANO_JOB,
    core_errors,
    pod_templates,
    volcano_job_schema,
)
from tests.support.volcano_crds import CrdsUnavailable


def all_pods(graph: harness.Graph) -> list[tuple[str, dict[str, Any]]]:
    return [pod for manifest in graph.manifests() for pod in pod_templates(manifest)]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_objects_match_the_kubernetes_schema(
    stack_graph: tuple[str, harness.Graph], version: str
) -> None:
    _, graph = stack_graph
    checked = 0
    for manifest in graph.manifests():
        # A Volcano Job's pod templates are core objects: validated as such, strictly.
        errors = core_errors(manifest, version)
        if errors:
            pytest.fail("\n".join(errors))
        checked += (manifest["apiVersion"], manifest["kind"]) != VOLCANO_JOB
    assert checked >= 25


def test_volcano_jobs_match_the_volcano_crd(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    try:
        schema = volcano_job_schema()
    except CrdsUnavailable as why:
        pytest.skip(f"Volcano CRD schema unavailable: {why}")
    jobs = [m for m in graph.manifests() if (m["apiVersion"], m["kind"]) == VOLCANO_JOB]
    assert len(jobs) == 1
    for job in jobs:
        jsonschema.validate(job, schema)


def test_the_crd_check_rejects_unknown_fields() -> None:
    try:
        schema = volcano_job_schema()
    except CrdsUnavailable as why:
        pytest.skip(f"Volcano CRD schema unavailable: {why}")
    job = next(
        m for m in harness_graph_dev().manifests() if m["kind"] == "Job" and "tasks" in m["spec"]
    )
    job["spec"]["min_available"] = 3  # a snake_case leak, as an untranslated pod template would be
    with pytest.raises(jsonschema.ValidationError, match="min_available"):
        jsonschema.validate(job, schema)


def harness_graph_dev() -> harness.Graph:
    from tests.support.stacks import graph

    return graph("dev")


def test_every_container_has_requests_and_limits(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    for owner, template in all_pods(graph):
        for container in template["spec"]["containers"]:
            resources = container.get("resources", {})
            for bound in ("requests", "limits"):
                assert set(resources.get(bound, {})) >= {"cpu", "memory"}, (
                    f"{owner}/{container['name']} {bound}"
                )


def test_every_pod_runs_unprivileged_and_non_root(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    pods = all_pods(graph)
    assert len(pods) >= 6  # mlflow, cube, transfer, serving, pserver, trainer (+ minio, hdfs)
    for owner, template in pods:
        spec = template["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, owner
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, owner
        assert spec.get("automountServiceAccountToken") is False, owner
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), owner
        for container in spec["containers"]:
            context = container["securityContext"]
            where = f"{owner}/{container['name']}"
            assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert not context.get("privileged"), where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            image = container["image"]
            assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), where


def test_read_only_root_everywhere(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    writable = {
        f"{owner}/{c['name']}"
        for owner, template in all_pods(graph)
        for c in template["spec"]["containers"]
        if not c["securityContext"]["readOnlyRootFilesystem"]
    }
    # HDFS too: its *-site.xml files come from a ConfigMap, not from the image's starter.
    assert writable == set()


def test_no_cluster_wide_rbac(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    kinds = {m["kind"] for m in graph.manifests()}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    role = next(m for m in graph.manifests() if m["kind"] == "Role")
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs == {"get", "list", "watch"}
    assert not any("secrets" in rule["resources"] for rule in role["rules"])


def test_ingress_is_denied_by_default_and_opened_per_port(
    stack_graph: tuple[str, harness.Graph],
) -> None:
    stack, graph = stack_graph
    policies = {
        m["metadata"]["name"]: m["spec"] for m in graph.manifests() if m["kind"] == "NetworkPolicy"
    }
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}

    def opened(name: str) -> tuple[list[int], Any]:
        rule = policies[name]["ingress"][0]
        return [p["port"] for p in rule["ports"]], rule.get("from")

    def component(name: str) -> dict[str, Any]:
        labels = {"app.kubernetes.io/part-of": "elasticctr", "app.kubernetes.io/component": name}
        return {"podSelector": {"matchLabels": labels}}

    assert opened("allow-pserver") == ([30240], [component("trainer"), component("pserver")])
    assert opened("allow-cube-server") == (
        [8027],
        [component("serving"), component("cube-transfer")],
    )
    assert opened("allow-cube-agent") == ([8001], [component("cube-transfer")])
    assert opened("allow-cube-transfer") == ([8099], [component("serving")])
    assert opened("allow-mlflow") == ([5000], [component("trainer")])
    assert opened("allow-serving") == ([8010], None)  # the public API
    if stack == "dev":
        # Any pod of the stack (not any pod of the namespace): part-of elasticctr.
        own = {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "elasticctr"}}}
        assert opened("allow-minio") == ([9000], [own])


def test_every_pod_has_its_own_service_account(stack_graph: tuple[str, harness.Graph]) -> None:
    _, graph = stack_graph
    accounts = {m["metadata"]["name"] for m in graph.manifests() if m["kind"] == "ServiceAccount"}
    for owner, template in all_pods(graph):
        name = template["spec"].get("serviceAccountName")
        assert name and name != "default" and name in accounts, owner
