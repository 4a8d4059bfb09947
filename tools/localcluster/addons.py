"""Cluster objects the node's host processes need: their RBAC, the kube-dns Service in front
of CoreDNS, and the default StorageClass of the volume provisioner."""

from __future__ import annotations

from typing import Any, Protocol

from tools.localcluster.settings import DNS_SERVICE_IP

PROVISIONER = "elasticctr.io/local-path"
STORAGE_CLASS = "local-path"
# Users of the daemons' client certificates (tools/localcluster/cluster.py makes them).
COREDNS_USER = "elasticctr:coredns"
KUBE_ROUTER_USER = "elasticctr:kube-router"
PROVISIONER_USER = "elasticctr:local-path-provisioner"

READ = ["get", "list", "watch"]


class Api(Protocol):
    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]: ...


def _role(user: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    name = user.replace(":", "-")
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        },
    ]


def objects(node_ip: str) -> list[dict[str, Any]]:
    """Everything `up` applies once the API server answers."""
    return [
        *_role(
            COREDNS_USER,
            [
                {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": READ},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
            ],
        ),
        *_role(
            KUBE_ROUTER_USER,
            [
                {
                    "apiGroups": [""],
                    "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                    "verbs": READ,
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": READ,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ},
            ],
        ),
        *storage_objects(),
        # CoreDNS runs on the host, not in a pod: a Service without a selector, and its
        # endpoints written here.
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kube-dns",
                "namespace": "kube-system",
                "labels": {"k8s-app": "kube-dns"},
            },
            "spec": {
                "clusterIP": DNS_SERVICE_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                ],
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-node",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "elasticctr-localcluster",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [node_ip], "conditions": {"ready": True}}],
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
            ],
        },
    ]


def storage_objects() -> list[dict[str, Any]]:
    """The volume provisioner's RBAC and its default StorageClass (also the simulated
    cluster's, tools/localcluster/simulated.py)."""
    return [
        *_role(
            PROVISIONER_USER,
            [
                {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": READ},
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": [*READ, "create", "delete"],
                },
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": READ},
                {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
            ],
        ),
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": STORAGE_CLASS,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
            },
            "provisioner": PROVISIONER,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        },
    ]


def _path(obj: dict[str, Any]) -> str:
    """The collection URL of an object's kind (only the kinds `objects` uses)."""
    group_version = obj["apiVersion"]
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    plural = {
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "StorageClass": "storageclasses",
        "Service": "services",
        "EndpointSlice": "endpointslices",
    }[obj["kind"]]
    namespace = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def apply(api: Api, obj: dict[str, Any]) -> None:
    """Create `obj`, or replace it if it exists (idempotent `up`)."""
    base = _path(obj)
    status, resp = api.request("POST", base, obj)
    if status == 409:
        url = f"{base}/{obj['metadata']['name']}"
        _, current = api.request("GET", url)
        version = current["metadata"]["resourceVersion"]
        replaced = {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
        if obj["kind"] == "Service":  # a Service keeps the fields the API server set
            replaced["spec"] = {**current["spec"], **obj["spec"]}
        status, resp = api.request("PUT", url, replaced)
    if status not in (200, 201):
        raise RuntimeError(
            f"{obj['kind']} {obj['metadata']['name']}: HTTP {status}: {resp.get('message')}"
        )
