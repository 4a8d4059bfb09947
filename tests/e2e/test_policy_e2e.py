"""`pulumi preview --policy-pack policy` on the `ci` stack, with the real Pulumi CLI.

The program and the pack run under the CLI as a reviewer's PR preview runs them: once as
they are (the pack passes: no mandatory violation), once with a deliberately bad change (a
Deployment with a privileged container, an unpinned image and no resources), which the
preview must reject, naming the rules and the resource, and a cube StatefulSet without its
shard list, which the stack rule must reject.

The stack needs no cluster: its Kubernetes provider renders manifests to a directory
(`cluster.render_dir`), Volcano counts as managed (no chart download), and the state lives
in a local file backend. The project is copied to a temporary directory, so the `ci` stack
file the CLI writes never lands in stacks/. Skips, saying why, when the CLI or its
Kubernetes provider plugin is not installed (tools/build-tools.sh builds both offline).

The CLI runs as tests/support/pulumi_cli.py sets it up for every e2e test (a private
PULUMI_HOME, file backend, passphrase, no plugin downloads, the copy first on PYTHONPATH).
The program's dynamic resources (GeneratedCredential) run under the engine's `pulumi-python`
provider, which the engine starts in infra/: the `pulumi-resource-pulumi-python` shim beside
the language host (the official CLI's, or the one tools/build-tools.sh installs) finds the
virtualenv there through the committed infra/.venv link.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.pulumi_cli import ROOT, Project, Result, temp_dir

STACK = "ci"
PACK = "elasticctr-guardrails"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BAD_CHANGE = '''
"""A deliberately bad change (tests/e2e/test_policy_e2e.py)."""

import pulumi
import pulumi_kubernetes as k8s

provider = k8s.Provider("e2e-bad-provider", render_yaml_to_directory={render_dir!r})
k8s.apps.v1.Deployment(
    "e2e-bad",
    metadata={{"name": "e2e-bad", "namespace": "elasticctr-ci"}},
    spec={{
        "selector": {{"match_labels": {{"app": "e2e-bad"}}}},
        "template": {{
            "metadata": {{"labels": {{"app": "e2e-bad"}}}},
            "spec": {{
                "containers": [
                    {{
                        "name": "web",
                        "image": "nginx:latest",
                        "security_context": {{"privileged": True}},
                    }}
                ]
            }},
        }},
    }},
    opts=pulumi.ResourceOptions(provider=provider),
)
# A compliant cube StatefulSet without its shard list: only the stack rule objects.
k8s.apps.v1.StatefulSet(
    "e2e-lonely-cube",
    metadata={{"name": "cube-0", "namespace": "e2e-other"}},
    spec={{
        "service_name": "cube-headless",
        "replicas": 2,
        "selector": {{"match_labels": {{"app": "cube"}}}},
        "template": {{
            "metadata": {{"labels": {{"app": "cube"}}}},
            "spec": {{
                "security_context": {{"run_as_non_root": True, "run_as_user": 1000}},
                "containers": [
                    {{
                        "name": "server",
                        "image": "docker.io/elasticctr/cube:0.1.0",
                        "resources": {{
                            "requests": {{"cpu": "1", "memory": "1Gi"}},
                            "limits": {{"cpu": "1", "memory": "1Gi"}},
                        }},
                    }}
                ],
            }},
        }},
    }},
    opts=pulumi.ResourceOptions(provider=provider),
)
'''


def _stack_config(render_dir: Path) -> dict[str, Any]:
    """The `ci` stack: stacks/Pulumi.ci.yaml when the project has one, else the dev stack;
    rendered to a directory, no readiness waits, Volcano treated as installed."""
    source = ROOT / "stacks" / f"Pulumi.{STACK}.yaml"
    if not source.is_file():
        source = ROOT / "stacks" / "Pulumi.dev.yaml"
    config = dict(yaml.safe_load(source.read_text(encoding="utf-8"))["config"])
    cluster = dict(config.get("elasticctr:cluster") or {})
    cluster.update(render_dir=str(render_dir), skip_await=True)
    config["elasticctr:cloud"] = "existing"
    config["elasticctr:cluster"] = cluster
    config["elasticctr:namespace"] = "elasticctr-ci"
    config["elasticctr:volcano"] = {**(config.get("elasticctr:volcano") or {}), "managed": True}
    return config


@pytest.fixture(scope="module")
def project(pulumi_path: str) -> Iterator[Project]:
    """A copy of the project with the `ci` stack in a local file backend."""
    work = temp_dir("elasticctr-policy-e2e-")
    try:
        yield Project.create(work, STACK, pulumi_path, config=_stack_config(work / "render"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _preview(project: Project, *flags: str) -> Result:
    return project.run("preview", "--policy-pack", "policy", *flags, check=False)


# `- [mandatory]  <policy>  (<type>: <resource name>)`, one line per violation.
VIOLATION = re.compile(
    r"\[(?P<level>mandatory|advisory)\]\s+(?P<policy>[\w-]+)\s+\((?P<target>[^)]*)\)"
)


def test_the_program_passes_the_policy_pack(project: Project) -> None:
    result = _preview(project)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"✅ {PACK}@v0.1.0 (local: policy)" in output, output
    mandatory = [m.groupdict() for m in VIOLATION.finditer(output) if m["level"] == "mandatory"]
    assert mandatory == [], output


def test_a_bad_change_is_rejected(project: Project) -> None:
    infra = project.dir / "infra"
    render_dir = project.work / "bad-render"
    (infra / "e2e_bad_change.py").write_text(BAD_CHANGE.format(render_dir=str(render_dir)))
    main = infra / "__main__.py"
    original = main.read_text(encoding="utf-8")
    main.write_text(original + "\nimport infra.e2e_bad_change  # noqa: E402, F401\n")
    try:
        # --diff, as the PR preview runs it: violations appear beside the resource's diff.
        result = _preview(project, "--diff")
    finally:
        main.write_text(original, encoding="utf-8")
        (infra / "e2e_bad_change.py").unlink()
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    found = {
        (m["policy"], m["target"]) for m in VIOLATION.finditer(output) if m["level"] == "mandatory"
    }
    target = "kubernetes:apps/v1:Deployment: e2e-bad"
    assert {
        ("no-privileged-containers", target),
        ("image-tag-pinned", target),
        ("container-resources", target),
        ("run-as-non-root", target),
    } <= found, output
    # The stack rule runs on the engine's view of the whole stack, and names the resource.
    lonely = "kubernetes:apps/v1:StatefulSet: e2e-lonely-cube"
    assert ("cube-shards-match", lonely) in found, output
    # Only the bad change is rejected: the program's own resources still pass.
    assert {t for _, t in found} == {target, lonely}, output
    assert 'image "nginx:latest" uses the tag latest' in output
    assert (
        'StatefulSet "cube-0" (e2e-lonely-cube) in namespace e2e-other has no ConfigMap '
        '"cube-conf" (the shard list serving reads) beside it.'
    ) in output
