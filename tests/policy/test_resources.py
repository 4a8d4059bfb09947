"""container-resources: every container has CPU and memory requests and limits."""

from __future__ import annotations

import pytest

from tests.policy.support import UNKNOWN_STRING, container, pod, violations

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RULE = "container-resources"


def test_containers_with_requests_and_limits_pass() -> None:
    assert violations(RULE, DEPLOYMENT, pod([container(), container("sidecar")])) == []


def test_a_container_without_limits_is_reported_with_what_is_missing() -> None:
    bare = container(resources={"requests": {"cpu": "1", "memory": "1Gi"}})
    assert violations(RULE, DEPLOYMENT, pod([container(), bare])) == [
        'Deployment "web": container "app" (spec.template.spec.containers[1]) has no '
        "resources.limits.cpu, resources.limits.memory. Set CPU and memory requests and limits "
        "on every container (components/kube.py container() does)."
    ]


def test_init_containers_count_and_ephemeral_ones_cannot_have_resources() -> None:
    props = pod([container()], initContainers=[container("init", resources={})])
    props["spec"]["template"]["spec"]["ephemeralContainers"] = [container("debug", resources={})]
    [message] = violations(RULE, DEPLOYMENT, props)
    assert 'init container "init" (spec.template.spec.initContainers[0])' in message
    assert "debug" not in message


@pytest.mark.parametrize(
    ("resource_type", "props"),
    [
        ("kubernetes:core/v1:Pod", {"spec": {"containers": [container(resources={})]}}),
        (
            "kubernetes:batch/v1:CronJob",
            {
                "spec": {
                    "jobTemplate": {
                        "spec": {"template": {"spec": {"containers": [container(resources={})]}}}
                    }
                }
            },
        ),
        (
            "kubernetes:apps/v1:StatefulSetPatch",
            {"spec": {"template": {"spec": {"containers": [container(resources={})]}}}},
        ),
        (
            "kubernetes:batch.volcano.sh/v1alpha1:Job",
            {
                "spec": {
                    "tasks": [
                        {"name": "t", "template": {"spec": {"containers": [container()]}}},
                        {
                            "name": "u",
                            "template": {"spec": {"containers": [container(resources={})]}},
                        },
                    ]
                }
            },
        ),
    ],
)
def test_every_kind_of_workload_is_checked(resource_type: str, props: dict) -> None:
    assert len(violations(RULE, resource_type, props)) == 1


def test_a_volcano_task_is_named_in_the_message() -> None:
    props = {"spec": {"tasks": [{"name": "trainer", "template": {"spec": {"containers": [{}]}}}]}}
    [message] = violations(RULE, "kubernetes:batch.volcano.sh/v1alpha1:Job", props)
    assert "(spec.tasks[0] (trainer).template.spec.containers[0])" in message


def test_values_unknown_during_preview_are_not_reported() -> None:
    props = pod([container(resources={"requests": UNKNOWN_STRING, "limits": UNKNOWN_STRING})])
    assert violations(RULE, DEPLOYMENT, props) == []


def test_objects_without_pods_are_ignored() -> None:
    assert violations(RULE, "kubernetes:core/v1:Service", {"spec": {"ports": []}}) == []
    assert violations(RULE, "aws:s3/bucket:Bucket", {"bucket": "b"}) == []
