"""NetworkPolicies: the namespace denies all ingress and egress; each component opens the
ports it serves to its clients only, and reaches only what it needs (docs/architecture.md,
"Security").

Peers are named the same way both ways: a component of this stack (its pods, by their
component label), or `Outside` addresses (a CIDR, or anywhere) for what lives outside the
cluster (a cloud's S3 endpoint, an external HDFS, the clients of a public API).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from components.kube import KubeTarget, labels

DNS_PORT = 53
# Set by the API server on every namespace (Kubernetes >= 1.22).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Outside:
    """Addresses outside the stack's pods: one CIDR block, or anywhere (None)."""

    cidr: str | None = None


ANYWHERE = Outside()


@dataclass(frozen=True)
class InNamespace:
    """Every pod of another namespace of the cluster (a monitoring system's)."""

    name: str


Peer = str | Outside | InNamespace  # a component of this stack, or pods or addresses outside it


@dataclass(frozen=True)
class Route:
    """Egress to `ports` of `to`."""

    to: Peer
    ports: tuple[int, ...]
    protocols: tuple[str, ...] = ("TCP",)


# Every pod resolves names (the cluster's DNS, or a node-local cache: any address).
DNS = Route(ANYWHERE, (DNS_PORT,), ("UDP", "TCP"))


def host_block(host: str) -> Outside:
    """`host` as a peer: its own /32 (/128) when it is an IP address, else anywhere (a
    NetworkPolicy cannot name a DNS name; docs/architecture.md says what could)."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return ANYWHERE
    return Outside(f"{address}/{address.max_prefixlen}")


def url_route(url: str) -> Route:
    """The egress a client of `url` (http, https, hdfs://host:port) needs: its port (the
    scheme's default if none), on the host's address or anywhere."""
    parts = urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    port = parts.port or default
    if port is None or not parts.hostname:
        raise ValueError(f"{url!r} has no host and port")
    return Route(host_block(parts.hostname), (port,))


def _peer(peer: Peer) -> dict[str, Any] | None:
    """A NetworkPolicyPeer; None for anywhere (a rule without peers)."""
    if isinstance(peer, InNamespace):
        return {"namespace_selector": {"match_labels": {NAMESPACE_NAME_LABEL: peer.name}}}
    if isinstance(peer, Outside):
        return {"ip_block": {"cidr": peer.cidr}} if peer.cidr else None
    return {"pod_selector": {"match_labels": labels(peer)}}


def _ports(ports: Sequence[int], protocols: Sequence[str]) -> list[dict[str, Any]]:
    return [{"port": port, "protocol": protocol} for port in ports for protocol in protocols]


def egress_rule(route: Route) -> dict[str, Any]:
    rule: dict[str, Any] = {"ports": _ports(route.ports, route.protocols)}
    peer = _peer(route.to)
    if peer is not None:
        rule["to"] = [peer]
    return rule


def allow_ingress(
    target: KubeTarget,
    resource_name: str,
    component: str,
    ports: Sequence[int],
    clients: Sequence[Peer],
    parent: pulumi.Resource,
    policy_name: str | None = None,
) -> k8s.networking.v1.NetworkPolicy:
    """Let `clients` reach `component` on `ports` (TCP). A client is a component of this
    stack (not a pod of another namespace, nor another team's pod in a namespace the stack
    shares), an `Outside` CIDR, or ANYWHERE (any source: a public API)."""
    if not clients:
        raise ValueError(f"{resource_name}: no clients: the default deny already covers that")
    peers = [_peer(client) for client in clients]
    rule: dict[str, Any] = {"ports": _ports(ports, ("TCP",))}
    if None not in peers:
        rule["from_"] = peers
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


def allow_egress(
    target: KubeTarget,
    resource_name: str,
    component: str,
    routes: Sequence[Route | pulumi.Output[Route]],
    parent: pulumi.Resource,
) -> k8s.networking.v1.NetworkPolicy | None:
    """Let `component`'s pods open connections along `routes` (DNS is the namespace's, for
    every pod); None when it needs nothing more. A route may be an Output (an endpoint known
    once a cloud bucket exists)."""
    if not routes:
        return None
    rules = [
        route.apply(egress_rule) if isinstance(route, pulumi.Output) else egress_rule(route)
        for route in routes
    ]
    return k8s.networking.v1.NetworkPolicy(
        resource_name,
        metadata=target.metadata(f"egress-{component}", component),
        spec={
            "pod_selector": {"match_labels": labels(component)},
            "policy_types": ["Egress"],
            "egress": rules,
        },
        opts=target.opts(parent),
    )
