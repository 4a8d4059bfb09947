"""cube-shards-match, fed the program's resource graph (a stack rule)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components import cube as cube_component
from policy import cube as cube_rule
from tests.policy.support import (
    UNKNOWN_STRING,
    policy_resources,
    replace_inputs,
    stack_violations,
)
from tests.support.stacks import graph

RULE = "cube-shards-match"
STS = ("kubernetes:apps/v1:StatefulSet", "cube-shard-0")  # shard 0 of 2 in dev
CONF = ("kubernetes:core/v1:ConfigMap", "cube-conf")


def _shard(stack: str, shard: int) -> str:
    """The name the program gives shard `shard`'s StatefulSet (its layout's)."""
    layout = graph(stack).component_outputs("elasticctr:cube:Cube")["layout"]
    return f"cube-{layout}-{shard}"


def _conf(inputs: dict[str, Any]) -> dict[str, Any]:
    (conf,) = json.loads(inputs["data"]["cube.conf"])  # Paddle's form: a list of dicts
    return conf


def _set_conf(inputs: dict[str, Any], conf: dict[str, Any]) -> None:
    inputs["data"]["cube.conf"] = json.dumps([conf])


def test_the_rule_looks_for_what_the_program_names() -> None:
    assert cube_rule.DEFAULTS["configMap"] == cube_component.CONFIG_MAP
    sts = graph("dev").one(*STS)
    prefix, layout, shard = sts.inputs["metadata"]["name"].split("-")
    assert (prefix, shard) == (cube_rule.DEFAULTS["statefulSet"], "0") and len(layout) == 8


def test_the_dev_stack_passes_and_is_really_checked() -> None:
    dev = graph("dev")
    assert stack_violations(RULE, policy_resources(dev.resources)) == []
    # The same graph with one replica more fails: the rule found the program's shards.
    changed = replace_inputs(dev, {STS: lambda i: i["spec"].update(replicas=3)})
    found = stack_violations(RULE, policy_resources(changed))
    assert found == [
        (
            f'StatefulSet "{_shard("dev", 0)}" runs 3 replicas, but ConfigMap "cube-conf" '
            "cube.conf says dup 1 (config cube.replicas).",
            dev.one(*STS).urn,
        )
    ]


def test_a_shard_list_with_fewer_nodes_fails() -> None:
    def drop_node(inputs: dict[str, Any]) -> None:
        conf = _conf(inputs)
        conf["nodes"] = conf["nodes"][:1]
        _set_conf(inputs, conf)

    changed = replace_inputs(graph("dev"), {CONF: drop_node})
    [(message, _)] = stack_violations(RULE, policy_resources(changed))
    ran = f"{_shard('dev', 0)}, {_shard('dev', 1)}"
    assert f"says shard 2 and lists 1 nodes, but 2 shard StatefulSets run ({ran})" in message


def test_nodes_out_of_order_fail() -> None:
    def swap(inputs: dict[str, Any]) -> None:
        conf = _conf(inputs)
        conf["nodes"].reverse()
        _set_conf(inputs, conf)

    changed = replace_inputs(graph("dev"), {CONF: swap})
    messages = [m for m, _ in stack_violations(RULE, policy_resources(changed))]
    assert len(messages) == 4  # each node's replicas and Service
    assert messages[0].startswith(
        f'ConfigMap "cube-conf" cube.conf node 0 lists ["{_shard("dev", 1)}-0.cube-headless.'
        f'elasticctr-dev.svc.cluster.local"], not {_shard("dev", 0)}-0: keys k % shard == 0 '
        "would go to another shard."
    )


def test_replicas_listed_for_another_shard_fail() -> None:
    def wrong(inputs: dict[str, Any]) -> None:
        conf = _conf(inputs)
        conf["nodes"][1]["ipport_list"] = conf["nodes"][0]["ipport_list"]
        _set_conf(inputs, conf)

    changed = replace_inputs(graph("dev"), {CONF: wrong})
    [(message, _)] = stack_violations(RULE, policy_resources(changed))
    assert "node 1 lists" in message and f"not {_shard('dev', 1)}-0" in message


def test_a_shard_count_env_that_disagrees_fails() -> None:
    def env(inputs: dict[str, Any]) -> None:
        for container in inputs["spec"]["template"]["spec"]["containers"]:
            for var in container.get("env", []):
                if var["name"] == cube_rule.SHARD_COUNT_ENV:
                    var["value"] = "5"

    changed = replace_inputs(graph("dev"), {STS: env})
    messages = [m for m, _ in stack_violations(RULE, policy_resources(changed))]
    assert len(messages) == 2  # server and agent
    assert "has CUBE_SHARD_NUM=5, but it runs shard 0 of 2" in messages[0]


def test_a_shard_list_that_is_not_json_fails() -> None:
    changed = replace_inputs(graph("dev"), {CONF: lambda i: i["data"].update({"cube.conf": "{"})})
    [(message, urn)] = stack_violations(RULE, policy_resources(changed))
    assert message.startswith('ConfigMap "cube-conf" cube.conf is not JSON')
    assert urn == graph("dev").one(*CONF).urn


def test_a_stateful_set_without_its_shard_list_fails() -> None:
    dev = graph("dev")
    without = [r for r in dev.resources if (r.type, r.name) != CONF]
    assert stack_violations(RULE, policy_resources(without)) == [
        (
            f'StatefulSet "{_shard("dev", 0)}" (cube-shard-0) in namespace elasticctr-dev has no '
            'ConfigMap "cube-conf" (the shard list serving reads) beside it.',
            dev.one(*STS).urn,
        )
    ]


def test_unknown_values_are_not_judged_during_preview() -> None:
    changed = replace_inputs(
        graph("dev"), {CONF: lambda i: i["data"].update({"cube.conf": UNKNOWN_STRING})}
    )
    assert stack_violations(RULE, policy_resources(changed)) == []


@pytest.mark.parametrize("config", [{"statefulSet": "other"}, {"configMap": "other"}])
def test_names_come_from_policy_config(config: dict[str, str]) -> None:
    changed = replace_inputs(graph("dev"), {STS: lambda i: i["spec"].update(replicas=3)})
    # Looking for other names, the rule sees only part of the group.
    found = stack_violations(RULE, policy_resources(changed), config)
    assert [m for m, _ in found if "beside it" in m]
    assert not [m for m, _ in found if "runs 3 replicas" in m]
