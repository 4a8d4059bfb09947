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
