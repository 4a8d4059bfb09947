"""The namespace: restricted pod security, default-deny ingress, slot.conf, read-only viewer."""

from __future__ import annotations

from components.namespace import Namespace, NamespaceArgs
from tests.support.components import run_component


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
    deny = graph.one("kubernetes:networking.k8s.io/v1:NetworkPolicy").inputs["spec"]
    assert deny["podSelector"] == {"matchLabels": {"app.kubernetes.io/part-of": "elasticctr"}}
    assert graph.one("kubernetes:core/v1:ConfigMap").inputs["metadata"]["namespace"] == "test-ns"


def test_the_namespace_the_stack_creates_is_locked_down() -> None:
    graph = run_component(
        lambda t: Namespace("ns", NamespaceArgs(target=t, slot_conf="1\n")), skip_await=True
    )
    deny = graph.one("kubernetes:networking.k8s.io/v1:NetworkPolicy").inputs["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
