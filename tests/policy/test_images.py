"""image-tag-pinned: a tag other than latest, or a digest; Helm charts with a version."""

from __future__ import annotations

import pytest

from tests.policy.support import container, pod, violations

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RULE = "image-tag-pinned"
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "image",
    [
        "docker.io/elasticctr/trainer:0.1.0",
        "apache/hadoop:3.4.1",
        "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z",
        "localhost:5000/elasticctr/cube:0.1.0",
        f"nginx@{DIGEST}",
        f"nginx:1.27@{DIGEST}",
        "000000000000.dkr.ecr.us-west-2.amazonaws.com/elasticctr/serving:0.1.0",
    ],
)
def test_pinned_images_pass(image: str) -> None:
    assert violations(RULE, DEPLOYMENT, pod([container(image=image)])) == []


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        ("nginx", 'image "nginx" has no tag (which means latest)'),
        ("nginx:latest", 'image "nginx:latest" uses the tag latest'),
        ("registry:5000/app:LATEST", 'image "registry:5000/app:LATEST" uses the tag latest'),
        ("registry:5000/app", 'image "registry:5000/app" has no tag (which means latest)'),
        ("nginx@md5:abc", 'image "nginx@md5:abc" has a bad digest'),
        ("", "no image is set"),
    ],
)
def test_unpinned_images_fail(image: str, problem: str) -> None:
    assert violations(RULE, DEPLOYMENT, pod([container(image=image)])) == [
        f'Deployment "web": container "app" (spec.template.spec.containers[0]): {problem}. Pin a '
        "tag (not latest) or a digest, so that a redeploy runs exactly what was reviewed."
    ]


def test_init_containers_are_checked_too() -> None:
    props = pod([container()], initContainers=[container("init", image="busybox")])
    [message] = violations(RULE, DEPLOYMENT, props)
    assert 'init container "init"' in message


def test_helm_releases_pin_their_chart_version() -> None:
    release = "kubernetes:helm.sh/v3:Release"
    pinned = {"chart": "volcano", "version": "1.15.0", "repositoryOpts": {"repo": "https://x"}}
    assert violations(RULE, release, pinned) == []
    assert violations(RULE, release, {"chart": "volcano"}, name="volcano-release") == [
        'Helm release "volcano-release" has no chart version: the newest chart (and its images) '
        "would be installed. Pin `version`."
    ]
