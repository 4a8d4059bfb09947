"""The GitHub Actions workflows: valid, pinned, and in step with stacks/ and the pins."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml")) + sorted(WORKFLOWS.glob("*.yaml"))
SHARED = "./.github/workflows/pulumi-stack.yml"
STACKS = sorted(
    p.name.removeprefix("Pulumi.").removesuffix(".yaml")
    for p in (ROOT / "stacks").glob("Pulumi.*.yaml")
)
# owner/repo[/path]@<full commit sha> # vX.Y.Z
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"#\s*v\d+\.\d+\.\d+\s*$")


def _load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict), path.name
    # YAML 1.1 reads the key `on` as true.
    if True in document:
        document["on"] = document.pop(True)
    return document


WORKFLOW = {path.name: _load(path) for path in FILES}


def _touched_stacks() -> Any:
    path = WORKFLOWS / "scripts" / "touched_stacks.py"
    spec = importlib.util.spec_from_file_location("touched_stacks", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


touched_stacks = _touched_stacks()


def _steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [step for job in workflow["jobs"].values() for step in job.get("steps", [])]


def _pulumi_steps(workflow: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in _steps(workflow) if s.get("uses", "").startswith("pulumi/actions@")]


def _stack_list(workflow: str, variable: str) -> list[str]:
    return str(WORKFLOW[workflow]["env"][variable]).split()


def test_the_workflows_exist_and_are_valid_yaml() -> None:
    assert set(WORKFLOW) == {"preview.yml", "deploy.yml", "drift.yml", "pulumi-stack.yml"}
    for name, workflow in WORKFLOW.items():
        assert {"name", "on", "jobs"} <= set(workflow), name
        for job_id, job in workflow["jobs"].items():
            assert ("steps" in job) != ("uses" in job), f"{name}: {job_id}"
            assert "runs-on" in job or "uses" in job, f"{name}: {job_id}"


def test_every_action_is_pinned_to_a_commit_of_a_release() -> None:
    pins: dict[str, set[str]] = {}
    for path in FILES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = re.match(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", line)
            if not match or match[1].startswith("./"):
                continue
            where = f"{path.name}:{number}"
            assert PINNED.match(match[1]), f"{where}: {match[1]} is not pinned to a commit SHA"
            assert VERSION_COMMENT.search(match[2]), f"{where}: say which release (# vX.Y.Z)"
            action, sha = match[1].split("@")
            pins.setdefault(action, set()).add(f"{sha} {match[2].strip()}")
    # One version of each action everywhere.
    assert {action: len(versions) for action, versions in pins.items()} == {
        "actions/checkout": 1,
        "actions/setup-python": 1,
        "pulumi/actions": 1,
        "pulumi/auth-actions": 1,
        "aws-actions/configure-aws-credentials": 1,
    }


def test_local_reusable_workflows_exist_and_get_only_their_inputs() -> None:
    shared = WORKFLOW["pulumi-stack.yml"]["on"]["workflow_call"]["inputs"]
    required = {name for name, spec in shared.items() if spec.get("required")}
    for name, workflow in WORKFLOW.items():
        for job_id, job in workflow["jobs"].items():
            if "uses" not in job:
                continue
            assert job["uses"] == SHARED, f"{name}: {job_id}"
            given = set(job.get("with", {}))
            assert given <= set(shared), f"{name}: {job_id} passes {given - set(shared)}"
            assert required <= given, f"{name}: {job_id} misses {required - given}"
            assert job.get("secrets") == "inherit", f"{name}: {job_id}"


def test_the_workflows_name_every_stack() -> None:
    previewed = _stack_list("preview.yml", "STACKS")
    test_only = _stack_list("preview.yml", "TEST_STACKS")
    deployed = _stack_list("deploy.yml", "DEPLOY_STACKS")
    watched = _stack_list("drift.yml", "DRIFT_STACKS")
    # Every stack is previewed on the PRs that touch it, but the test stacks, which only the
    # test suite uses (ci: its node-less control plane; local: the one-node cluster of
    # tools/cluster.py): named deliberately, never deployed.
    assert test_only == ["ci", "local"]
    assert sorted(previewed + test_only) == STACKS
    assert not set(previewed) & set(test_only)
    assert not set(deployed) & set(test_only)
    assert set(deployed) <= set(STACKS)
    assert watched == deployed  # what main deploys is what the drift check watches
    text = "\n".join(path.read_text(encoding="utf-8") for path in FILES)
    for stack in STACKS:
        assert re.search(rf"(?<![\w-]){re.escape(stack)}(?![\w-])", text), stack


def test_the_cli_is_the_release_of_the_pinned_sdk() -> None:
    sdk = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert sdk is not None
    versions = {
        name: workflow["env"]["PULUMI_VERSION"]
        for name, workflow in WORKFLOW.items()
        if "PULUMI_VERSION" in workflow.get("env", {})
    }
    assert set(versions) == {"preview.yml", "pulumi-stack.yml"}
    assert set(versions.values()) == {sdk[1]}
    for name, workflow in WORKFLOW.items():
        for step in _pulumi_steps(workflow):
            assert step["with"]["pulumi-version"] == "${{ env.PULUMI_VERSION }}", name
    provider = re.search(
        r"^pulumi-kubernetes==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M
    )
    assert provider is not None
    assert str(WORKFLOW["preview.yml"]["env"]["PULUMI_KUBERNETES_VERSION"]) == provider[1]


def test_previews_comment_on_the_pr_with_the_policy_pack() -> None:
    preview = WORKFLOW["preview.yml"]
    assert set(preview["on"]) == {"pull_request"}
    call = preview["jobs"]["preview"]
    assert call["with"]["command"] == "preview"
    assert call["with"]["comment-on-pr"] is True
    assert call["permissions"]["pull-requests"] == "write"
    [step] = _pulumi_steps(WORKFLOW["pulumi-stack.yml"])
    assert step["with"]["policyPacks"] == "policy"
    assert step["with"]["diff"] is True
    assert step["with"]["comment-on-pr"] == "${{ inputs.comment-on-pr }}"
    assert step["with"]["stack-name"] == "${{ env.PULUMI_STACK }}"


def test_main_deploys_and_a_schedule_checks_drift() -> None:
    deploy = WORKFLOW["deploy.yml"]
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert deploy["jobs"]["up"]["with"]["command"] == "up"
    assert deploy["jobs"]["up"]["concurrency"]["cancel-in-progress"] is False
    drift = WORKFLOW["drift.yml"]
    assert drift["on"]["schedule"][0]["cron"]
    check = drift["jobs"]["drift"]["with"]
    assert check["command"] == "preview"
    assert check["refresh"] is True and check["expect-no-changes"] is True
    assert check["drift-issue"] is True
    assert drift["jobs"]["drift"]["permissions"]["issues"] == "write"


def test_secrets_come_from_repository_secrets_or_oidc() -> None:
    shared = WORKFLOW["pulumi-stack.yml"]
    text = (WORKFLOWS / "pulumi-stack.yml").read_text(encoding="utf-8")
    steps = _steps(shared)
    auth = [s for s in steps if s.get("uses", "").startswith("pulumi/auth-actions@")]
    assert auth and auth[0]["with"]["requested-token-type"].startswith("urn:pulumi:token-type:")
    aws = [s for s in steps if "configure-aws-credentials" in s.get("uses", "")]
    assert aws and "role-to-assume" in aws[0]["with"]  # OIDC, no access keys
    assert "aws-access-key-id" not in aws[0]["with"]
    # Callers grant the OIDC token; no workflow reads credentials from a file in the repo.
    for name in ("preview.yml", "deploy.yml", "drift.yml"):
        assert WORKFLOW[name]["permissions"] == {"contents": "read"}, name
        for job_id, job in WORKFLOW[name]["jobs"].items():
            if "uses" in job:
                assert job["permissions"]["id-token"] == "write", f"{name}: {job_id}"
    for path in FILES:
        for line in path.read_text(encoding="utf-8").splitlines():
            if (
                re.search(r"(ACCESS|SECRET)_KEY|TOKEN|PASSWORD|KUBECONFIG_CONTENT", line)
                and ":" in line
            ):
                key, _, value = line.partition(":")
                value = value.strip()
                if value and not value.startswith(("|", ">")) and "$" not in key:
                    assert value.startswith(("${{ secrets.", "${{ github.token")), line
    assert "PULUMI_ACCESS_TOKEN" not in text  # OIDC, not a stored token


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (["components/cube.py"], ["dev", "aws-prod"]),
        (["infra/program.py", "README.md"], ["dev", "aws-prod"]),
        (["policy/storage.py"], ["dev", "aws-prod"]),
        (["stacks/slot.txt"], ["dev", "aws-prod"]),
        (["stacks/Pulumi.aws-prod.yaml"], ["aws-prod"]),
        (["stacks/Pulumi.dev.yaml", "docs/review.md"], ["dev"]),
        (["stacks/Pulumi.huawei-prod.yaml"], []),
        (["images/cube/elasticctr_cube/server.py", "tests/test_workflows.py", "README.md"], []),
        ([".github/workflows/preview.yml"], ["dev", "aws-prod"]),
        ([], []),
    ],
)
def test_which_stacks_a_change_touches(changed: list[str], expected: list[str]) -> None:
    assert touched_stacks.touched(changed, ["dev", "aws-prod"]) == expected


def test_the_stack_script_reads_each_stacks_cloud(capsys: pytest.CaptureFixture[str]) -> None:
    assert touched_stacks.main(["--stacks", " ".join(STACKS), "--all", "--require-all-listed"]) == 0
    out = capsys.readouterr().out
    matrix = yaml.safe_load(out.splitlines()[0].removeprefix("matrix="))
    clouds = {entry["stack"]: entry["cloud"] for entry in matrix["include"]}
    assert clouds == {stack: touched_stacks.cloud_of(ROOT, stack) for stack in STACKS}
    assert clouds["aws-prod"] == "aws" and clouds["dev"] == "existing"
    assert out.splitlines()[1] == "any=true"


def test_the_stack_script_refuses_a_stack_list_that_is_out_of_date(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert touched_stacks.main(["--stacks", "dev", "--all", "--require-all-listed"]) == 1
    assert "which this workflow does not name" in capsys.readouterr().err
    assert touched_stacks.main(["--stacks", "dev nope", "--all"]) == 1
    assert "no stacks/Pulumi.<stack>.yaml for nope" in capsys.readouterr().err


def test_test_stacks_count_as_listed_and_never_enter_the_matrix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    previewed = " ".join(_stack_list("preview.yml", "STACKS"))
    test_only = " ".join(_stack_list("preview.yml", "TEST_STACKS"))
    argv = ["--stacks", previewed, "--all", "--require-all-listed"]
    assert touched_stacks.main([*argv, "--test-stacks", test_only]) == 0
    matrix = yaml.safe_load(capsys.readouterr().out.splitlines()[0].removeprefix("matrix="))
    assert sorted(entry["stack"] for entry in matrix["include"]) == sorted(previewed.split())
    # Without the test-stack list, the check still catches a stack nobody named.
    assert touched_stacks.main(argv) == 1
    assert "stacks/ has ci, local, which this workflow does not name" in capsys.readouterr().err
    assert touched_stacks.main([*argv, "--test-stacks", f"{test_only} dev"]) == 1
    assert "dev both listed and test-only" in capsys.readouterr().err
    assert touched_stacks.main(["--stacks", previewed, "--test-stacks", "nope", "--all"]) == 1
    assert "no stacks/Pulumi.<stack>.yaml for nope" in capsys.readouterr().err


def test_a_push_without_a_base_touches_every_listed_stack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert touched_stacks.main(["--stacks", "aws-prod dev", "--base", "0" * 40]) == 0
    assert '"stack": "aws-prod"' in capsys.readouterr().out


def test_actionlint_finds_nothing() -> None:
    """actionlint (rhysd/actionlint, a Go tool) when it is installed: expressions, contexts,
    reusable-workflow inputs, and shellcheck on every `run:` script."""
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip(
            "actionlint is not on PATH (go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12)"
        )
    result = subprocess.run(
        [actionlint, *map(str, FILES)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
