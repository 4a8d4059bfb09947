"""A user's first stack sets only what it must; the engine fills every other key from
Pulumi.yaml's defaults, and those defaults pass the config's own checks.

tests/e2e/test_minimal_stack.py runs the same through the real engine."""

from __future__ import annotations

from typing import Any

import pytest

from infra.program import main
from tests.support import pulumi_harness as harness

# Per cloud, the keys a stack cannot do without (infra/config.py, CLOUD_TRAITS).
MINIMAL: dict[str, dict[str, Any]] = {
    "existing": {},
    "aws": {"cloud": "aws", "cluster": {"aws": {"region": "us-west-2"}}},
    "huawei": {
        "cloud": "huawei",
        "cluster": {"huawei": {"region": "cn-north-4", "key_pair": "ops"}},
    },
    "baidu": {
        "cloud": "baidu",
        "cluster": {
            "baidu": {
                "region": "bj",
                "vpc_id": "vpc-a1",
                "subnet_id": "sbn-a1",
                "ssh_key_id": "k-a1",
                "ccr_instance_id": "ccr-a1",
            }
        },
    },
}


def test_every_project_default_is_declared_as_the_engine_passes_it() -> None:
    defaults = harness.project_defaults()
    assert "elasticctr:storage" in defaults and "elasticctr:trainers" in defaults


@pytest.mark.parametrize("cloud", list(MINIMAL))
def test_a_minimal_stack_with_the_engine_defaults_deploys(cloud: str) -> None:
    config = {f"elasticctr:{key}": value for key, value in MINIMAL[cloud].items()}
    graph = harness.run(main, harness.with_project_defaults(config), stack=f"first-{cloud}")
    job = graph.one("kubernetes:batch.volcano.sh/v1alpha1:Job")
    assert job.inputs["spec"]["minAvailable"] == 4  # 2 trainers + 2 pservers by default


def test_a_queue_that_cannot_be_looked_up_only_warns() -> None:
    # No cluster answers under mocks (the harness points KUBECONFIG nowhere): the lookup
    # of infra/preflight.py says what it could not check and the program goes on.
    graph = harness.run(main, {"elasticctr:training": {"queue": "nightly"}})
    job = graph.one("kubernetes:batch.volcano.sh/v1alpha1:Job")
    assert job.inputs["spec"]["queue"] == "nightly"
