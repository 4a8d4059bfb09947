"""What the NetworkPolicies of a set of manifests let through, as NetworkPolicy semantics
define it: a pod selected by no policy of a direction is open that way; selected by some,
only what one of their rules allows passes. A connection between two pods of the stack
needs both the client's egress and the server's ingress.

Pods are named by their component label; destinations outside the stack's pods by their
CIDR, or "*" (any address: a rule without peers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tests.support.manifests import pod_templates

COMPONENT = "app.kubernetes.io/component"
ANY = "*"


@dataclass(frozen=True)
class Path:
    client: str  # a component
    server: str  # a component, a CIDR, or ANY
    port: int
    protocol: str = "TCP"

    def __str__(self) -> str:
        suffix = "" if self.protocol == "TCP" else f"/{self.protocol}"
        return f"{self.client} -> {self.server}:{self.port}{suffix}"


def components(manifests: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """component -> the labels of its pods."""
    found = {}
    for manifest in manifests:
        for _, template in pod_templates(manifest):
            pod_labels = template["metadata"]["labels"]
            found[pod_labels[COMPONENT]] = pod_labels
    return found


def _selects(selector: dict[str, Any], pod_labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, f"unsupported selector {selector}"
    wanted = selector.get("matchLabels", {})
    return all(pod_labels.get(k) == v for k, v in wanted.items())


def _policies(manifests: Iterable[dict[str, Any]], direction: str) -> list[dict[str, Any]]:
    return [
        m["spec"]
        for m in manifests
        if m["kind"] == "NetworkPolicy" and direction in m["spec"].get("policyTypes", [])
    ]


def _peers(rule: dict[str, Any], key: str, pods: dict[str, dict[str, str]]) -> list[str]:
    """Components, CIDRs and other namespaces ("namespace <name>") a rule names (ANY when
    it names none)."""
    if key not in rule:
        return [ANY]
    found = []
    for peer in rule[key]:
        if "namespaceSelector" in peer:
            assert "podSelector" not in peer, f"unsupported peer {peer}"
            labels = peer["namespaceSelector"]["matchLabels"]
            found.append(f"namespace {labels['kubernetes.io/metadata.name']}")
        elif "ipBlock" in peer:
            found.append(peer["ipBlock"]["cidr"])
        else:
            found += [c for c, pod in pods.items() if _selects(peer["podSelector"], pod)]
    return found


def allowed(manifests: list[dict[str, Any]], direction: str) -> tuple[set[Path], set[str]]:
    """The paths the policies of `direction` ("Ingress" or "Egress") allow, and the
    components no policy of that direction selects (open that way)."""
    pods = components(manifests)
    key = "from" if direction == "Ingress" else "to"
    paths: set[Path] = set()
    selected: set[str] = set()
    for spec in _policies(manifests, direction):
        mine = [c for c, pod in pods.items() if _selects(spec["podSelector"], pod)]
        selected.update(mine)
        for rule in spec.get(direction.lower(), []):
            for component in mine:
                for peer in _peers(rule, key, pods):
                    for port in rule.get("ports", []):
                        ends = (peer, component) if direction == "Ingress" else (component, peer)
                        paths.add(Path(*ends, port["port"], port.get("protocol", "TCP")))
    return paths, set(pods) - selected


def connections(manifests: list[dict[str, Any]]) -> set[Path]:
    """Every path that works: to pods of the stack when the client's egress and the
    server's ingress both allow it, to addresses outside when the egress does ("*": any
    address)."""
    (ingress, open_in), (egress, open_out) = (
        allowed(manifests, "Ingress"),
        allowed(manifests, "Egress"),
    )
    assert not open_in and not open_out, f"open to all: ingress {open_in}, egress {open_out}"
    pods = components(manifests)

    def admitted(client: str, server: str, port: int, protocol: str) -> bool:
        return any(Path(c, server, port, protocol) in ingress for c in (client, ANY))

    works = set()
    for path in egress:
        if path.server in pods:
            if admitted(path.client, path.server, path.port, path.protocol):
                works.add(path)
            continue
        works.add(path)  # outside the stack's pods
        if path.server == ANY:  # any address: the stack's pods too
            works |= {
                Path(path.client, pod, path.port, path.protocol)
                for pod in pods
                if admitted(path.client, pod, path.port, path.protocol)
            }
    return works
