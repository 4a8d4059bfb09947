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


TOKEN_VARIABLES = ("SERVING_AUTH_TOKEN", "SERVING_AUTH_TOKEN_FILE")


def _no_token(inputs: dict[str, Any]) -> None:
    for container in inputs["spec"]["template"]["spec"]["containers"]:
        container["env"] = [e for e in container["env"] if e["name"] not in TOKEN_VARIABLES]


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


def test_a_token_file_counts_only_in_a_mounted_secret() -> None:
    """SERVING_AUTH_TOKEN_FILE naming a file of the mounted Secret is a token from a
    Secret; naming a file of a ConfigMap, or of a Secret the container does not mount, not."""

    def token_file(path: str) -> Any:
        def edit(inputs: dict[str, Any]) -> None:
            _no_token(inputs)
            inputs["spec"]["template"]["spec"]["containers"][0]["env"].append(
                {"name": "SERVING_AUTH_TOKEN_FILE", "value": path}
            )

        return edit

    secret_dir = "/var/run/secrets/elasticctr/serving-auth"
    open_service = (SERVICE, _open_to_all)
    assert _check("baidu-prod", open_service, (DEPLOYMENT, token_file(f"{secret_dir}/x"))) == []
    for elsewhere in ("/etc/elasticctr/token", "/var/run/secrets/elasticctr/other/token"):
        assert len(_check("baidu-prod", open_service, (DEPLOYMENT, token_file(elsewhere)))) == 1


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
