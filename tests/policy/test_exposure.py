"""load-balancer-guarded, on the prod stacks' graphs and variations of them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.policy.support import policy_resources, replace_inputs, stack_violations, synthetic
from tests.support.stacks import graph

RULE = "load-balancer-guarded"
SERVICE = ("kubernetes:core/v1:Service", "serving-service")
DEPLOYMENT = ("kubernetes:apps/v1:Deployment", "serving-deployment")


def _open_to_all(inputs: dict[str, Any]) -> None:
    inputs["spec"].pop("loadBalancerSourceRanges", None)


def _no_token(inputs: dict[str, Any]) -> None:
    for container in inputs["spec"]["template"]["spec"]["containers"]:
        container["env"] = [e for e in container["env"] if e["name"] != "SERVING_AUTH_TOKEN"]


def _check(stack: str, *changes) -> list[tuple[str, str | None]]:
    edits = {key: change for key, change in changes}
    return stack_violations(RULE, policy_resources(replace_inputs(graph(stack), edits)))


@pytest.mark.parametrize("stack", ["aws-prod", "baidu-prod"])
def test_ranges_or_a_token_each_suffice(stack: str) -> None:
    assert _check(stack) == []
    assert _check(stack, (SERVICE, _open_to_all)) == []  # the token alone
    if stack == "aws-prod":
        assert _check(stack, (DEPLOYMENT, _no_token)) == []  # the ranges alone


@pytest.mark.parametrize("stack", ["aws-prod", "baidu-prod"])
def test_neither_is_a_violation(stack: str) -> None:
    [(message, urn)] = _check(stack, (SERVICE, _open_to_all), (DEPLOYMENT, _no_token))
    assert message.startswith(
        'Service "serving" is a LoadBalancer open to any address, and its pods check no token'
    )
    assert urn is not None and urn.endswith("::serving-service")


def test_a_token_from_a_config_map_or_a_literal_does_not_count() -> None:
    def literal(inputs: dict[str, Any]) -> None:
        _no_token(inputs)
        inputs["spec"]["template"]["spec"]["containers"][0]["env"].append(
            {"name": "SERVING_AUTH_TOKEN", "value": "not-from-a-secret"}
        )

    assert len(_check("baidu-prod", (SERVICE, _open_to_all), (DEPLOYMENT, literal))) == 1


def _service(annotations: dict[str, str] | None = None, **spec: Any):
    metadata: dict[str, Any] = {"name": "web", "namespace": "ns"}
    if annotations:
        metadata["annotations"] = annotations
    return synthetic(
        "kubernetes:core/v1:Service",
        "web",
        {
            "metadata": metadata,
            "spec": {"type": "LoadBalancer", "selector": {"app": "web"}, **spec},
        },
    )


def test_other_services_and_internal_load_balancers_pass() -> None:
    assert stack_violations(RULE, [_service(type="ClusterIP")]) == []
    assert stack_violations(RULE, [_service(type="NodePort")]) == []
    internal = {"service.beta.kubernetes.io/aws-load-balancer-internal": "true"}
    assert stack_violations(RULE, [_service(internal)]) == []
    assert (
        stack_violations(RULE, [_service({"networking.gke.io/load-balancer-type": "Internal"})])
        == []
    )
    # no workload behind it that checks a token
    assert len(stack_violations(RULE, [_service()])) == 1
