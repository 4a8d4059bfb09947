"""The namespace: restricted pod security, default-deny ingress and egress (DNS allowed),
slot.conf, read-only viewer."""

from __future__ import annotations

from typing import Any

from components.namespace import Namespace, NamespaceArgs
from tests.support.components import run_component
from tests.support.pulumi_harness import Graph


def test_namespace_wide_objects() -> None:
    graph = run_component(
        lambda t: Namespace("ns", NamespaceArgs(target=t, slot_conf="1\n2\n")), skip_await=True
    )
    namespace = graph.one("kubernetes:core/v1:Namespace").inputs["metadata"]
    assert namespace["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    slot_conf = graph.one("kubernetes:core/v1:ConfigMap").inputs
    assert slot_conf["data"] == {"slot.conf": "1\n2\n"}
    assert slot_conf["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    binding = graph.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding").inputs
    assert binding["roleRef"]["kind"] == "Role"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "elasticctr-viewer", "namespace": "test-ns"}
    ]


def test_an_existing_namespace_is_used_as_it_is() -> None:
    """Not the stack's: never created (so never deleted), labelled or locked down for other
    pods; the default deny covers the stack's own pods only."""
    graph = run_component(
        lambda t: Namespace("ns", NamespaceArgs(target=t, slot_conf="1\n", create=False)),
        skip_await=True,
    )
    assert graph.of_type("kubernetes:core/v1:Namespace") == []
    ours = {"matchLabels": {"app.kubernetes.io/part-of": "elasticctr"}}
    policies = _policies(graph)
    assert {name: spec["podSelector"] for name, spec in policies.items()} == {
        "default-deny-ingress": ours,
        "default-deny-egress": ours,
        "allow-dns": ours,
    }
    assert graph.one("kubernetes:core/v1:ConfigMap").inputs["metadata"]["namespace"] == "test-ns"


def test_the_namespace_the_stack_creates_is_locked_down() -> None:
    graph = run_component(
        lambda t: Namespace("ns", NamespaceArgs(target=t, slot_conf="1\n")), skip_await=True
    )
    policies = _policies(graph)
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert policies["default-deny-egress"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    # Names resolve (DNS anywhere: the cluster's service, or a node-local cache); nothing else,
    # the API server included: none of the stack's pods calls it.
    assert policies["allow-dns"] == {
        "podSelector": {},
        "policyTypes": ["Egress"],
        "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}],
    }


def _policies(graph: Graph) -> dict[str, Any]:
    return {
        p.inputs["metadata"]["name"]: p.inputs["spec"]
        for p in graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    }
