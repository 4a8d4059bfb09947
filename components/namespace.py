"""The namespace and what every workload in it shares: pod security, default-deny ingress
and egress (DNS allowed), slot.conf, and a read-only role for people and the client CLI
(`logs`, `status`).

A namespace the stack creates is its own: labelled restricted, every pod in it denied
ingress and egress but what the components allow, deleted by `pulumi destroy`. An existing
namespace (`create=False`, another team's perhaps) is never labelled, locked down or
deleted: only the stack's own pods are denied by default, and only the stack's objects are
removed.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.kube import PART_OF, PART_OF_LABEL, KubeTarget, object_labels
from components.network import DNS, egress_rule

SLOT_CONF_MAP = "slot-conf"
VIEWER = "elasticctr-viewer"


@dataclass(frozen=True)
class NamespaceArgs:
    target: KubeTarget  # target.namespace is the name of the namespace to create
    slot_conf: str  # slot.conf text, already validated
    create: bool = True  # False: the namespace exists and is not the stack's


class Namespace(pulumi.ComponentResource):
    name: pulumi.Output[str]
    slot_conf_map: pulumi.Output[str]
    viewer_service_account: pulumi.Output[str]

    def __init__(
        self, name: str, args: NamespaceArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("elasticctr:namespace:Namespace", name, None, opts)
        target = args.target
        name_of_namespace: pulumi.Input[str] = target.namespace
        if args.create:
            namespace = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata={
                    "name": target.namespace,
                    # Pods that break the restricted Pod Security Standard are refused.
                    "labels": {
                        **object_labels("namespace"),
                        "pod-security.kubernetes.io/enforce": "restricted",
                        "pod-security.kubernetes.io/enforce-version": "v1.28",
                    },
                },
                opts=target.opts(self),
            )
            name_of_namespace = namespace.metadata["name"]
        # Everything below lives in the namespace: create it first.
        inside = KubeTarget(
            provider=target.provider,
            namespace=name_of_namespace,
            image_pull_policy=target.image_pull_policy,
            skip_await=target.skip_await,
        )
        # Traffic is denied but what the components allow, both ways: for every pod of a
        # namespace of our own, for our pods only in someone else's. None of our pods calls
        # the API server: it is not allowed either.
        own_pods = {} if args.create else {"match_labels": {PART_OF_LABEL: PART_OF}}
        for direction in ("Ingress", "Egress"):
            k8s.networking.v1.NetworkPolicy(
                f"{name}-default-deny-{direction.lower()}",
                metadata=inside.metadata(f"default-deny-{direction.lower()}", "namespace"),
                spec={"pod_selector": own_pods, "policy_types": [direction]},
                opts=inside.opts(self),
            )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-allow-dns",
            metadata=inside.metadata("allow-dns", "namespace"),
            spec={
                "pod_selector": own_pods,
                "policy_types": ["Egress"],
                "egress": [egress_rule(DNS)],
            },
            opts=inside.opts(self),
        )
        slot_conf = k8s.core.v1.ConfigMap(
            f"{name}-slot-conf",
            metadata=inside.metadata(SLOT_CONF_MAP, "namespace"),
            data={"slot.conf": args.slot_conf},
            opts=inside.opts(self),
        )
        viewer = self._viewer(name, inside)

        self.name = pulumi.Output.from_input(name_of_namespace)
        self.slot_conf_map = slot_conf.metadata["name"]
        self.viewer_service_account = viewer.metadata["name"]
        self.target = inside
        self.register_outputs(
            {
                "name": self.name,
                "slot_conf_map": self.slot_conf_map,
                "viewer_service_account": self.viewer_service_account,
            }
        )

    def _viewer(self, name: str, target: KubeTarget) -> k8s.core.v1.ServiceAccount:
        """Read-only access to this namespace's workloads and logs; never to Secrets."""
        role = k8s.rbac.v1.Role(
            f"{name}-viewer-role",
            metadata=target.metadata(VIEWER, "namespace"),
            rules=[
                {
                    "api_groups": [""],
                    "resources": ["pods", "pods/log", "services", "endpoints", "configmaps"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "api_groups": ["apps"],
                    "resources": ["deployments", "statefulsets"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "api_groups": ["batch.volcano.sh"],
                    "resources": ["jobs"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
            opts=target.opts(self),
        )
        account = k8s.core.v1.ServiceAccount(
            f"{name}-viewer",
            metadata=target.metadata(VIEWER, "namespace"),
            automount_service_account_token=False,
            opts=target.opts(self),
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-viewer-binding",
            metadata=target.metadata(VIEWER, "namespace"),
            role_ref={"api_group": "rbac.authorization.k8s.io", "kind": "Role", "name": VIEWER},
            subjects=[{"kind": "ServiceAccount", "name": VIEWER, "namespace": target.namespace}],
            opts=target.opts(self, depends_on=[role, account]),
        )
        return account
