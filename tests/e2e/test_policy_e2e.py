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

The program's dynamic resources (GeneratedCredential) run under the engine's `pulumi-python`
provider, which the engine starts in the program's directory (`main: infra/`). There the
shim the official CLI ships (`pulumi-resource-pulumi-python`) looks for the virtualenv at
infra/.venv, and `components` (whose provider classes dill pickled by reference) cannot be
imported; a CLI built from Go modules has no shim at all. Neither is the policy pack's
business: the test puts its own two-line shim (the project's .venv, python -m
pulumi.dynamic) first on PATH and the project root on PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
STACK = "ci"
PACK = "elasticctr-guardrails"
PROJECT_PARTS = ("Pulumi.yaml", "infra", "components", "policy", "stacks")
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
    metadata={{"name": "cube", "namespace": "e2e-other"}},
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


def _search_path() -> str:
    """tools/build-tools.sh's bin directories (when the script exists), then PATH."""
    dirs: list[str] = []
    script = ROOT / "tools" / "build-tools.sh"
    if script.is_file():
        result = subprocess.run(
            ["bash", str(script), "--print-path"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode == 0:
            dirs = [d for d in result.stdout.strip().split(":") if d]
    return os.pathsep.join([*dirs, os.environ.get("PATH", "")])


def _plugin_installed(path: str, name: str) -> bool:
    if shutil.which(f"pulumi-resource-{name}", path=path):
        return True
    home = Path(os.environ.get("PULUMI_HOME", Path.home() / ".pulumi"))
    return any((home / "plugins").glob(f"resource-{name}-v*"))


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment the CLI runs in, or a skip saying what is missing."""
    path = _search_path()
    pulumi = shutil.which("pulumi", path=path)
    if pulumi is None:
        pytest.skip(
            "the Pulumi CLI is not installed: not in tools/build-tools.sh --print-path nor on "
            "PATH (build it offline with `tools/build-tools.sh pulumi pulumi-language-python "
            "pulumi-resource-kubernetes`, or use the official installer)"
        )
    if shutil.which("pulumi-language-python", path=path) is None:
        pytest.skip("pulumi is installed, its Python language host is not (pulumi-language-python)")
    if not _plugin_installed(path, "kubernetes"):
        pytest.skip(
            "the Kubernetes provider plugin is not installed: `tools/build-tools.sh "
            "pulumi-resource-kubernetes` (offline) or `pulumi plugin install resource kubernetes`"
        )
    shims = tmp_path_factory.mktemp("shims")
    shim = shims / "pulumi-resource-pulumi-python"
    shim.write_text(f'#!/bin/sh\nexec "{ROOT / ".venv/bin/python"}" -u -m pulumi.dynamic "$@"\n')
    shim.chmod(0o755)
    path = os.pathsep.join([str(shims), path])
    return {"PATH": path, "PULUMI_BIN": pulumi}


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
def project(cli: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A copy of the project with the `ci` stack in a local file backend."""
    work = tmp_path_factory.mktemp("policy-e2e")
    copy = work / "project"
    copy.mkdir()
    for part in PROJECT_PARTS:
        source = ROOT / part
        if source.is_dir():
            shutil.copytree(source, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, copy / part)
    # Pulumi.yaml's and PulumiPolicy.yaml's virtualenv: the project's own .venv.
    (copy / ".venv").symlink_to(ROOT / ".venv")
    (work / "state").mkdir()
    env = {
        **os.environ,
        "PATH": cli["PATH"],
        "PULUMI_BACKEND_URL": f"file://{work / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "policy-e2e",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
        # The dynamic-provider process runs in infra/: let it import `components` (see above).
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(copy), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    _pulumi(env, copy, "stack", "init", STACK)
    stack_file = copy / "stacks" / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(stack_file.read_text(encoding="utf-8")) or {}
    document["config"] = _stack_config(work / "render")
    stack_file.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return {"dir": copy, "env": env, "work": work}


def _pulumi(env: dict[str, str], cwd: Path, *args: str, check: bool = True) -> Any:
    result = subprocess.run(
        ["pulumi", *args, "--non-interactive"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if check and result.returncode != 0:
        pytest.fail(f"pulumi {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def _preview(project: dict[str, Any], *flags: str) -> subprocess.CompletedProcess[str]:
    return _pulumi(
        project["env"],
        project["dir"],
        "preview",
        "--stack",
        STACK,
        "--policy-pack",
        "policy",
        "--color",
        "never",
        *flags,
        check=False,
    )


# `- [mandatory]  <policy>  (<type>: <resource name>)`, one line per violation.
VIOLATION = re.compile(
    r"\[(?P<level>mandatory|advisory)\]\s+(?P<policy>[\w-]+)\s+\((?P<target>[^)]*)\)"
)


def test_the_program_passes_the_policy_pack(project: dict[str, Any]) -> None:
    result = _preview(project)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"✅ {PACK}@v0.1.0 (local: policy)" in output, output
    mandatory = [m.groupdict() for m in VIOLATION.finditer(output) if m["level"] == "mandatory"]
    assert mandatory == [], output


def test_a_bad_change_is_rejected(project: dict[str, Any]) -> None:
    infra = project["dir"] / "infra"
    render_dir = project["work"] / "bad-render"
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
        'StatefulSet "cube" (e2e-lonely-cube) in namespace e2e-other has no ConfigMap '
        '"cube-conf" (the shard list serving reads) beside it.'
    ) in output
