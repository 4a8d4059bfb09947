"""Cube shards match the shard list serving reads (a stack rule: several resources together).

Serving and cube-transfer route key k to node k % shard of `cube.conf` (the `cube-conf`
ConfigMap, Paddle Serving's list form); node i must be shard i: its `ipport_list` the pods
`cube-<L>-<i>-<r>` of StatefulSet `cube-<L>-<i>` (L: the layout, components/cube.py; older
programs name them `cube-<i>`), which must run exactly `dup` replicas, and its `ip` the
Service `cube-<L>-<i>`; there must be exactly `shard` such StatefulSets. A mismatch sends
lookups to a shard that does not exist or holds other keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyResource,
    ReportViolation,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy.kube import (
    CONFIG_MAP,
    STATEFUL_SET,
    UNKNOWN,
    containers,
    get,
    items,
    number,
    show,
)

# The names components/cube.py gives them (tests/policy checks they agree): StatefulSets
# "<statefulSet>-<layout>-<shard>", or "<statefulSet>-<shard>".
DEFAULTS = {"statefulSet": "cube", "configMap": "cube-conf", "confKey": "cube.conf"}
SHARD_COUNT_ENV = "CUBE_SHARD_NUM"
SHARD_INDEX_ENV = "CUBE_SHARD_INDEX"


@dataclass
class _Group:
    """One layout's shard StatefulSets in a namespace, and that namespace's shard list."""

    prefix: str  # of the StatefulSets' names: <statefulSet> or <statefulSet>-<layout>
    shards: dict[int, PolicyResource] = field(default_factory=dict)
    config_map: PolicyResource | None = None


def _name(resource: PolicyResource) -> Any:
    return get(resource.props, "metadata", "name")


def _groups(resources: list[PolicyResource], config: Mapping[str, Any]) -> list[_Group]:
    """The shard StatefulSets (by layout, then shard) and the cube-conf ConfigMap, per
    namespace."""
    base = config["statefulSet"]
    pattern = re.compile(re.escape(base) + r"-(?:(?P<layout>[0-9a-f]+)-)?(?P<shard>\d+)")
    layouts: dict[Any, dict[str, _Group]] = {}
    config_maps: dict[Any, PolicyResource] = {}
    for resource in resources:
        kind = resource.resource_type.removesuffix("Patch")
        namespace = get(resource.props, "metadata", "namespace")
        name = _name(resource)
        if kind == STATEFUL_SET and isinstance(name, str) and (m := pattern.fullmatch(name)):
            prefix = f"{base}-{m['layout']}" if m["layout"] else base
            group = layouts.setdefault(namespace, {}).setdefault(prefix, _Group(prefix))
            group.shards[int(m["shard"])] = resource
        elif kind == CONFIG_MAP and name == config["configMap"]:
            config_maps[namespace] = resource
    groups = []
    for namespace in {*layouts, *config_maps}:
        found = list(layouts.get(namespace, {}).values()) or [_Group(base)]
        for group in found:
            group.config_map = config_maps.get(namespace)
            groups.append(group)
    return groups


def _missing(group: _Group, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    present = group.config_map or group.shards[min(group.shards)]
    namespace = get(present.props, "metadata", "namespace")
    where = f" in namespace {namespace}" if isinstance(namespace, str) else ""
    if group.config_map is None:
        what = f'StatefulSet "{_name(present)}" ({present.name}){where}'
        missing = f'ConfigMap "{config["configMap"]}" (the shard list serving reads)'
    else:
        what = f'ConfigMap "{config["configMap"]}" ({present.name}){where}'
        missing = f'StatefulSet "{group.prefix}-0" (the servers of shard 0)'
    return [(f"{what} has no {missing} beside it.", present.urn)]


def _entry(text: Any) -> dict[str, Any] | str:
    """The dict of cube.conf (Paddle's list of one, or the older single object), or why
    there is none."""
    try:
        conf = json.loads(text) if isinstance(text, str) else None
    except ValueError as err:
        return f"is not JSON ({err})"
    if isinstance(conf, list) and len(conf) == 1:
        conf = conf[0]
    return conf if isinstance(conf, dict) else "is missing or not a list of one JSON object"


def _check(group: _Group, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(message, urn) for each mismatch of the shard StatefulSets and their shard list."""
    cm = group.config_map
    if cm is None or not group.shards:
        return _missing(group, config)
    prefix = group.prefix
    text = get(cm.props, "data", config["confKey"])
    counts = {s: get(sts.props, "spec", "replicas", default=1.0) for s, sts in group.shards.items()}
    if text is UNKNOWN or UNKNOWN in counts.values():
        return []
    where = f'ConfigMap "{config["configMap"]}" {config["confKey"]}'
    conf = _entry(text)
    if isinstance(conf, str):
        return [(f"{where} {conf}.", cm.urn)]
    shard, dup = number(conf.get("shard")), number(conf.get("dup", 1))
    listed = conf.get("nodes")
    nodes: list[Any] = listed if isinstance(listed, list) else []
    problems = []
    if shard != len(group.shards) or len(nodes) != len(group.shards):
        ran = ", ".join(f"{prefix}-{s}" for s in sorted(group.shards))
        problems.append(
            (
                f"{where} says shard {conf.get('shard')} and lists {len(nodes)} nodes, but "
                f"{len(group.shards)} shard StatefulSets run ({ran}). All three must be "
                "equal (config cube_shards).",
                cm.urn,
            )
        )
    for i, node in enumerate(nodes):
        problems += _node_problems(i, node, dup, prefix, where, cm.urn)
    for s, sts in sorted(group.shards.items()):
        problems += _shard_problems(s, sts, number(counts[s]), dup, shard, prefix, where)
    return problems


def _node_problems(
    i: int, node: Any, dup: float | None, prefix: str, where: str, urn: str
) -> list[tuple[str, str]]:
    """Node i must be shard i: its Service, then its pods in replica order."""
    if not isinstance(node, dict):
        return [(f"{where} node {i} is not an object.", urn)]
    listed = node.get("ipport_list")
    hosts = [node.get("ip")]
    if isinstance(listed, str):
        hosts = [item.rpartition(":")[0] for item in listed.removeprefix("list://").split(",")]
    pods = [f"{prefix}-{i}-{r}" for r in range(int(dup or 1))]
    wanted = pods if isinstance(listed, str) else [f"{prefix}-{i}"]
    found = [h.split(".", 1)[0] if isinstance(h, str) else h for h in hosts]
    problems = []
    if found != wanted:
        problems.append(
            (
                f"{where} node {i} lists {json.dumps(hosts)}, not {', '.join(wanted)}: keys "
                f"k % shard == {i} would go to another shard.",
                urn,
            )
        )
    ip = node.get("ip")
    if isinstance(listed, str) and isinstance(ip, str) and ip.split(".", 1)[0] != f"{prefix}-{i}":
        problems.append(
            (f'{where} node {i} has ip {json.dumps(ip)}, not the Service "{prefix}-{i}".', urn)
        )
    return problems


def _shard_problems(
    s: int,
    sts: PolicyResource,
    pods: float | None,
    dup: float | None,
    shard: float | None,
    prefix: str,
    where: str,
) -> list[tuple[str, str]]:
    name = f"{prefix}-{s}"
    problems = []
    if pods != dup:
        problems.append(
            (
                f'StatefulSet "{name}" runs {show(pods) if pods is not None else "?"} replicas, '
                f"but {where} says dup {show(dup) if dup is not None else '?'} (config "
                "cube.replicas).",
                sts.urn,
            )
        )
    wanted = {SHARD_COUNT_ENV: show(shard) if shard is not None else None, SHARD_INDEX_ENV: str(s)}
    for container in containers(sts.resource_type, sts.props):
        for var in items(get(container.spec, "env")):
            var_name, value = get(var, "name"), get(var, "value")
            expected = wanted.get(var_name) if isinstance(var_name, str) else None
            if expected is not None and isinstance(value, str) and value.strip() != expected:
                problems.append(
                    (
                        f'StatefulSet "{name}" {container.label} has {var_name}={value}, '
                        f"but it runs shard {s} of {wanted[SHARD_COUNT_ENV]}.",
                        sts.urn,
                    )
                )
    return problems


def validate_cube_shards(args: StackValidationArgs, report: ReportViolation) -> None:
    config = {**DEFAULTS, **args.get_config()}
    for group in _groups(args.resources, config):
        for message, urn in _check(group, config):
            report(message, urn)


cube_shards_match = StackValidationPolicy(
    name="cube-shards-match",
    description=(
        "One cube StatefulSet per shard of cube.conf, each running its dup replicas, and node "
        "i of cube.conf lists the pods of shard i."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_cube_shards,
    config_schema=PolicyConfigSchema(
        properties={
            "statefulSet": {
                "type": "string",
                "default": DEFAULTS["statefulSet"],
                "description": (
                    "name prefix of the cube shard StatefulSets (<name>-<layout>-<shard>)"
                ),
            },
            "configMap": {
                "type": "string",
                "default": DEFAULTS["configMap"],
                "description": "name of the ConfigMap holding the shard list",
            },
            "confKey": {
                "type": "string",
                "default": DEFAULTS["confKey"],
                "description": "key of the shard list (JSON) in that ConfigMap",
            },
        }
    ),
)
