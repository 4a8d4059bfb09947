"""Cube shards match the shard list serving reads (a stack rule: two resources together).

Serving and cube-transfer route key k to node k % shard of `cube.conf` (the `cube-conf`
ConfigMap); node i must be pod i of the `cube` StatefulSet, which must run exactly `shard`
pods. A mismatch sends lookups to a shard that does not exist or holds other keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
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

# The names components/cube.py gives them (tests/policy checks they agree).
DEFAULTS = {"statefulSet": "cube", "configMap": "cube-conf", "confKey": "cube.conf"}
SHARD_COUNT_ENV = "CUBE_SHARD_NUM"


@dataclass
class _Pair:
    stateful_set: PolicyResource | None = None
    config_map: PolicyResource | None = None


def _name(resource: PolicyResource) -> Any:
    return get(resource.props, "metadata", "name")


def _pairs(resources: list[PolicyResource], config: Mapping[str, Any]) -> dict[Any, _Pair]:
    """The cube StatefulSet and its cube-conf ConfigMap, per namespace."""
    pairs: dict[Any, _Pair] = {}
    for resource in resources:
        kind = resource.resource_type.removesuffix("Patch")
        namespace = get(resource.props, "metadata", "namespace")
        if kind == STATEFUL_SET and _name(resource) == config["statefulSet"]:
            pairs.setdefault(namespace, _Pair()).stateful_set = resource
        elif kind == CONFIG_MAP and _name(resource) == config["configMap"]:
            pairs.setdefault(namespace, _Pair()).config_map = resource
    return pairs


def _check(pair: _Pair, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(message, urn) for each mismatch of one StatefulSet and its shard list."""
    sts, cm = pair.stateful_set, pair.config_map
    if sts is None or cm is None:
        present = sts or cm
        assert present is not None
        namespace = get(present.props, "metadata", "namespace")
        where = f" in namespace {namespace}" if isinstance(namespace, str) else ""
        if cm is None:
            what = f'StatefulSet "{config["statefulSet"]}" ({present.name}){where}'
            missing = f'ConfigMap "{config["configMap"]}" (the shard list serving reads)'
        else:
            what = f'ConfigMap "{config["configMap"]}" ({present.name}){where}'
            missing = f'StatefulSet "{config["statefulSet"]}" (the shard servers)'
        return [(f"{what} has no {missing} beside it.", present.urn)]
    name = config["statefulSet"]
    replicas = get(sts.props, "spec", "replicas", default=1.0)
    text = get(cm.props, "data", config["confKey"])
    if replicas is UNKNOWN or text is UNKNOWN:
        return []
    where = f'ConfigMap "{config["configMap"]}" {config["confKey"]}'
    try:
        conf = json.loads(text) if isinstance(text, str) else None
    except ValueError as err:
        return [(f"{where} is not JSON ({err}).", cm.urn)]
    if not isinstance(conf, dict):
        return [(f"{where} is missing or not a JSON object.", cm.urn)]
    pods = number(replicas)
    shard = number(conf.get("shard"))
    nodes = conf.get("nodes") if isinstance(conf.get("nodes"), list) else []
    problems = []
    if pods is None or shard != pods or len(nodes) != pods:
        problems.append(
            (
                f'StatefulSet "{name}" runs {show(pods) if pods is not None else "?"} shard pods, '
                f"but {where} says shard {conf.get('shard')} and lists {len(nodes)} nodes. All "
                "three must be equal (config cube_shards).",
                sts.urn,
            )
        )
    for i, node in enumerate(nodes):
        host = node.get("ip") if isinstance(node, dict) else None
        if not isinstance(host, str) or host.split(".", 1)[0] != f"{name}-{i}":
            problems.append(
                (
                    f'{where} node {i} is {json.dumps(host)}, not pod "{name}-{i}": keys '
                    f"k % shard == {i} would go to another shard.",
                    cm.urn,
                )
            )
    for container in containers(sts.resource_type, sts.props):
        for var in items(get(container.spec, "env")):
            value = get(var, "value")
            if (
                get(var, "name") == SHARD_COUNT_ENV
                and isinstance(value, str)
                and pods is not None
                and value.strip() != show(pods)
            ):
                problems.append(
                    (
                        f'StatefulSet "{name}" {container.label} has {SHARD_COUNT_ENV}={value}, '
                        f"but runs {show(pods)} shard pods.",
                        sts.urn,
                    )
                )
    return problems


def validate_cube_shards(args: StackValidationArgs, report: ReportViolation) -> None:
    config = {**DEFAULTS, **args.get_config()}
    for pair in _pairs(args.resources, config).values():
        for message, urn in _check(pair, config):
            report(message, urn)


cube_shards_match = StackValidationPolicy(
    name="cube-shards-match",
    description=(
        "The cube StatefulSet's replicas equal the shard count and the node list of cube.conf "
        "(node i is pod i)."
    ),
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=validate_cube_shards,
    config_schema=PolicyConfigSchema(
        properties={
            "statefulSet": {
                "type": "string",
                "default": DEFAULTS["statefulSet"],
                "description": "name of the cube shard StatefulSet",
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
