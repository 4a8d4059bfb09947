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

import json
import operator
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from components import training
from tests.support.manifests import mismatches
from tests.support.pulumi_cli import CI_JOB as JOB
from tests.support.pulumi_cli import CI_NAMESPACE as NAMESPACE
from tests.support.pulumi_cli import VOLCANO_JOB_TYPE as JOB_TYPE
from tests.support.pulumi_cli import (
    Project,
    changed_steps,
    ci_project,
    resources_of,
    temp_dir,
    type_and_name,
)
from tests.support.volcano_admission import VolcanoJobWebhook, probe_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def project(
    control_plane: Any, cluster_path: str, volcano_webhook: VolcanoJobWebhook
) -> Iterator[Project]:
    work = temp_dir("elasticctr-e2e-noop-")
    try:
        yield ci_project(work, cluster_path, control_plane.kubeconfig)
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
    # Value for value: a quantity in another spelling is a change to the provider's diff.
    stored = stored_job(control_plane)["spec"]
    assert mismatches(job["inputs"]["spec"], stored, ".spec", operator.eq) == []


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
        ("training.mem", "3"),
        ("training.cpu", "1.5"),
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


def test_a_stack_deployed_with_the_old_training_type_previews_no_change(stack: Project) -> None:
    """The training component's type was PsJob, and every URN under it named that type. A
    stack deployed then (its state rewritten to the old type here) previews no change: the
    component's alias maps its URNs and, inherited, its children's; `up` then renames them
    in the state, replacing nothing."""
    old = json.dumps(stack.export()).replace(training.TYPE, training.OLD_TYPE)
    assert f"{training.OLD_TYPE}$" in old  # the children's URNs too
    saved = stack.work / "state-with-the-old-type.json"
    saved.write_text(old, encoding="utf-8")
    stack.run("stack", "import", "--file", str(saved))
    _, preview = stack.preview_json()
    assert changed_steps(preview) == {}, preview["changeSummary"]
    stack.up()
    assert training.OLD_TYPE not in json.dumps(stack.export())
    assert changed_steps(stack.preview_json()[1]) == {}


def test_a_stack_file_with_the_old_top_level_keys_previews_no_change(stack: Project) -> None:
    """`cpu` and `mem` moved into `training`. The stack file of a stack deployed before,
    which sets the old top-level keys, previews no change and says how to rename them."""
    values = {}
    for key in ("cpu", "mem"):
        values[key] = stack.run("config", "get", "--path", f"training.{key}").stdout.strip()
        stack.run("config", "rm", "--path", f"training.{key}")
        stack.config_set(key, values[key])
    try:
        result = stack.run("preview", "--diff", "--expect-no-changes", check=False)
        assert result.returncode == 0, result.describe()
        for key in ("cpu", "mem"):
            assert f"elasticctr:{key} is now elasticctr:training.{key}" in result.output
        assert changed_steps(stack.preview_json()[1]) == {}
    finally:
        for key, value in values.items():
            stack.run("config", "rm", key)
            stack.config_set(f"training.{key}", value, path=True)
    assert changed_steps(stack.preview_json()[1]) == {}
