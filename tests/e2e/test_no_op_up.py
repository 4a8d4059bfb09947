"""A `pulumi up` of an unchanged program changes nothing, with the training Job admitted by
Volcano's own mutating webhook as on a real cluster (tests/support/volcano_admission.py).

The webhook re-encodes a Job's tasks whenever it defaults one of them (tests/support/
volcano_webhook.py); a Job stored other than sent is then a change at every preview, and
`replace_on_changes` turns it into a replacement: every `up` restarted training. Here the `ci`
stack goes up once; the Job is stored exactly as sent; a second preview and `up` see no
change anywhere in the stack; and a real change (memory, cpu, image, the trainers' config)
still replaces the Job.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.pulumi_cli import (
    Project,
    changed_steps,
    resources_of,
    temp_dir,
    type_and_name,
)
from tests.support.volcano_admission import VolcanoJobWebhook, probe_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STACK = "ci"
NAMESPACE = "elasticctr-ci"
JOB = "elasticctr-train"
JOB_TYPE = "kubernetes:batch.volcano.sh/v1alpha1:Job"
UGI = "ci-user,ci-ugi-password-0f3a"


@pytest.fixture(scope="module")
def project(
    control_plane: Any, cluster_path: str, volcano_webhook: VolcanoJobWebhook
) -> Iterator[Project]:
    work = temp_dir("elasticctr-e2e-noop-")
    try:
        project = Project.create(work, STACK, cluster_path, kubeconfig=control_plane.kubeconfig)
        project.config_set("cluster.kubeconfig", str(control_plane.kubeconfig), path=True)
        project.config_set("data.ugi", UGI, path=True, secret=True)
        yield project
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the control plane goes with its etcd


@pytest.fixture(scope="module")
def stack(project: Project) -> Project:
    """The project after its first `up`."""
    project.up()
    return project


def stored_job(control_plane: Any) -> dict[str, Any]:
    path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs/{JOB}"
    status, job = control_plane.request("GET", path)
    assert status == 200, job
    return job


def not_as_sent(sent: Any, stored: Any, path: str = "") -> list[str]:
    """Where `stored` differs from `sent`, exactly (no quantity read as another spelling of
    the same value): the API server may only add fields (the CRD's defaults, such as a port's
    protocol), never change or drop one."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [f"{path}: {stored!r}, sent {sent!r}"]
        return [
            m
            for key, value in sent.items()
            for m in (
                not_as_sent(value, stored[key], f"{path}.{key}")
                if key in stored
                else [f"{path}.{key}: dropped (sent {value!r})"]
            )
        ]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [f"{path}: {stored!r}, sent {sent!r}"]
        return [
            m
            for i, (a, b) in enumerate(zip(sent, stored, strict=True))
            for m in not_as_sent(a, b, f"{path}[{i}]")
        ]
    return [] if sent == stored else [f"{path}: {stored!r}, sent {sent!r}"]


def test_the_webhook_defaults_and_re_encodes_a_job(volcano_webhook: VolcanoJobWebhook) -> None:
    """What the fixture runs is Volcano's webhook, and it does what made every `up` replace
    the Job: a task without minAvailable is re-encoded, its quantities made canonical."""
    job = probe_job()
    (container,) = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    container["resources"] = {"limits": {"cpu": "1000m", "memory": "2048Mi"}}
    status, stored = volcano_webhook.mutate(job)
    assert status == 201, stored
    (task,) = stored["spec"]["tasks"]
    assert (task["minAvailable"], task["maxRetry"]) == (2, 3)
    assert (stored["spec"]["minAvailable"], stored["spec"]["queue"]) == (2, "default")
    (container,) = task["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}


def test_the_job_is_stored_as_sent(stack: Project, control_plane: Any) -> None:
    (job,) = [r for r in resources_of(stack.export(show_secrets=True)) if r["type"] == JOB_TYPE]
    assert not_as_sent(job["inputs"]["spec"], stored_job(control_plane)["spec"]) == []


def test_a_second_preview_and_up_change_nothing(stack: Project, control_plane: Any) -> None:
    uid = stored_job(control_plane)["metadata"]["uid"]
    diff = stack.run("preview", "--diff", "--expect-no-changes", check=False)
    assert diff.returncode == 0, diff.describe()
    _, preview = stack.preview_json()
    assert changed_steps(preview) == {}, diff.stdout
    assert set(preview["changeSummary"]) == {"same"}, preview["changeSummary"]
    result = stack.up("--expect-no-changes", check=False)
    assert result.returncode == 0, result.describe()
    assert stored_job(control_plane)["metadata"]["uid"] == uid


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mem", "3"),
        ("cpu", "1.5"),
        ("images.tags.trainer", "0.1.1"),
        ("data.end", "20191221/06"),  # trainer.json: its hash is on the pod template
    ],
)
def test_a_real_change_still_replaces_the_job(stack: Project, key: str, value: str) -> None:
    path = "." in key  # a top-level key is set as the stack file writes it: a string
    flags = ["--path"] if path else []
    original = stack.run("config", "get", *flags, key, check=False)  # unset: fails
    stack.config_set(key, value, path=path)
    try:
        _, preview = stack.preview_json()
    finally:
        if original.returncode == 0:
            stack.config_set(key, original.stdout.strip(), path=path)
        else:
            stack.run("config", "rm", *flags, key)
    jobs = {urn: op for urn, (op, kind) in changed_steps(preview).items() if kind == JOB_TYPE}
    assert [(type_and_name(urn)[1], op) for urn, op in jobs.items()] == [
        ("training-job", "replace")
    ], preview["changeSummary"]
