"""NetworkPolicies: the namespace denies all ingress; each port opens to its clients only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components.kube import PART_OF, KubeTarget, labels


def allow_ingress(
    target: KubeTarget,
    resource_name: str,
    component: str,
    ports: Sequence[int],
    clients: Sequence[str] | Literal["namespace", "anywhere"],
    parent: pulumi.Resource,
    policy_name: str | None = None,
) -> k8s.networking.v1.NetworkPolicy:
    """Let `clients` reach `component` on `ports`.

    `clients` lists client components (pods of this namespace); "namespace" means any pod
    of this stack in the namespace (not another team's, in a namespace the stack shares);
    "anywhere" any source, for a public API such as serving.
    """
    rule: dict[str, Any] = {
        "ports": [{"port": port, "protocol": "TCP"} for port in ports],
    }
    if clients == "namespace":
        rule["from_"] = [{"pod_selector": {"match_labels": {"app.kubernetes.io/part-of": PART_OF}}}]
    elif clients != "anywhere":
        rule["from_"] = [{"pod_selector": {"match_labels": labels(c)}} for c in clients]
    return k8s.networking.v1.NetworkPolicy(
        resource_name,
        metadata=target.metadata(policy_name or f"allow-{component}", component),
        spec={
            "pod_selector": {"match_labels": labels(component)},
            "policy_types": ["Ingress"],
            "ingress": [rule],
        },
        opts=target.opts(parent),
    )
