"""Drive the real Pulumi CLI on a throwaway copy of the project (tests/e2e, docs/e2e.md).

`Project.create()` copies the program (Pulumi.yaml, infra/, components/, stacks/, policy/)
into a temporary directory, so the stack files the CLI writes (`stack init`, `config set`)
never land in stacks/; the copy's `.venv` is a link to the project's virtualenv (infra/.venv
already links to `../.venv`, which the dynamic-provider process needs: it runs in infra/).
Every CLI call gets an environment of its own:

- a private PULUMI_HOME (its `plugins/` links to the user's, so plugins installed with
  `pulumi plugin install` are still found), logged in to a local file backend
  (`pulumi login file://<tmp>/state`); PULUMI_ACCESS_TOKEN and PULUMI_BACKEND_URL are
  dropped, automatic plugin downloads and the update check are off: never the network;
- the passphrase secrets provider (PULUMI_CONFIG_PASSPHRASE);
- PATH: tools/build-tools.sh's bin directories first (the offline CLI, language host,
  providers), then the caller's PATH;
- PYTHONPATH: the copy first, so the program and its dynamic providers import the copy's
  `infra` and `components`, not the editable install of the checkout;
- KUBECONFIG: the given file, or none at all (a stack that renders manifests reaches no
  cluster; the SDK's Provider would take $KUBECONFIG as its `kubeconfig` input otherwise).

Each command runs in its own process group; on a timeout the whole group (the CLI, its
language host and provider plugins) is killed by that group's id.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = ROOT / "tools" / "build-tools.sh"
# tools/build-tools.sh: the local stack asks it where Volcano's chart is (volcano.chart).
PROJECT_PARTS = ("Pulumi.yaml", "infra", "components", "stacks", "policy", "tools/build-tools.sh")
PROJECT = "elasticctr"
# Binaries each kind of test needs: the CLI with its Python host and Kubernetes provider,
# and for a cluster the control plane of tests/support/controlplane.py.
CLI_TOOLS = ("pulumi", "pulumi-language-python", "pulumi-resource-kubernetes")
CLUSTER_TOOLS = ("kube-apiserver", "etcd")
# Plugin warnings every command prints with the offline tools (docs/tooling.md).
AMBIENT_PLUGIN_WARNING = "using pulumi-resource-"


class PulumiError(AssertionError):
    """A CLI command failed; the message has the command, its exit code and its output."""


def tool_dirs() -> list[str]:
    """The bin directories of tools/build-tools.sh (whether built or not)."""
    if not BUILD_TOOLS.is_file():
        return []
    result = subprocess.run(
        ["bash", str(BUILD_TOOLS), "--print-path"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return [d for d in result.stdout.strip().split(":") if d] if result.returncode == 0 else []


def search_path() -> str:
    """tools/build-tools.sh's bin directories, then PATH."""
    return os.pathsep.join([*tool_dirs(), os.environ.get("PATH", "")])


def user_pulumi_home() -> Path:
    return Path(os.environ.get("PULUMI_HOME", Path.home() / ".pulumi"))


def _plugin_installed(path: str, name: str) -> bool:
    if shutil.which(f"pulumi-resource-{name}", path=path):
        return True
    return any((user_pulumi_home() / "plugins").glob(f"resource-{name}-v*"))


def missing_tools(path: str, cluster: bool = False) -> list[str]:
    """The tools (of CLI_TOOLS, and CLUSTER_TOOLS when `cluster`) found neither on `path`
    nor, for the provider, among the user's installed plugins."""
    missing = []
    for tool in CLI_TOOLS + (CLUSTER_TOOLS if cluster else ()):
        if tool == "pulumi-resource-kubernetes":
            if not _plugin_installed(path, "kubernetes"):
                missing.append(tool)
        elif shutil.which(tool, path=path) is None:
            missing.append(tool)
    return missing


def build_tools_check() -> str:
    """What `tools/build-tools.sh --check` says ("" when every tool is built)."""
    if not BUILD_TOOLS.is_file():
        return "tools/build-tools.sh is missing"
    result = subprocess.run(
        ["bash", str(BUILD_TOOLS), "--check"], capture_output=True, text=True, check=False
    )
    return "" if result.returncode == 0 else (result.stderr.strip() or "not built")


def skip_reason(path: str, cluster: bool = False) -> str | None:
    """Why the CLI tests cannot run here (None: they can)."""
    missing = missing_tools(path, cluster)
    if not missing:
        return None
    check = build_tools_check()
    return (
        f"{', '.join(missing)} not found (tools/build-tools.sh --check: "
        f"{check or 'all built'}): build them offline with `bash tools/build-tools.sh` "
        "(about 32 min on a fresh machine, docs/tooling.md), or install the Pulumi CLI and "
        "`pulumi plugin install resource kubernetes` for the CLI-only tests"
    )


def copy_project(dest: Path) -> Path:
    """The program's files under `dest` (created), with `.venv` linking to the project's."""
    dest.mkdir(parents=True, exist_ok=True)
    for part in PROJECT_PARTS:
        source = ROOT / part
        if source.is_dir():
            # symlinks=True: infra/.venv stays a link (to ../.venv), not a 2 GB copy.
            shutil.copytree(
                source,
                dest / part,
                symlinks=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        else:
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / part)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    return dest


@dataclass
class Result:
    """One CLI command: its arguments, exit code, output and wall time."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def json(self) -> Any:
        return json.loads(self.stdout)

    def describe(self) -> str:
        return (
            f"`pulumi {' '.join(self.args)}` exited {self.returncode} after {self.seconds:.1f}s\n"
            f"--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"
        )


@dataclass
class Project:
    """A copy of the project with one stack in a local file backend."""

    work: Path  # everything of this project lives under here
    stack: str
    env: dict[str, str]
    log: list[Result] = field(default_factory=list)

    @property
    def dir(self) -> Path:
        return self.work / "project"

    @property
    def state_dir(self) -> Path:
        return self.work / "state"

    @property
    def stack_file(self) -> Path:
        return self.dir / "stacks" / f"Pulumi.{self.stack}.yaml"

    @classmethod
    def create(
        cls,
        work: Path,
        stack: str,
        path: str,
        *,
        passphrase: str = "elasticctr-e2e",
        kubeconfig: Path | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> Project:
        """Copy the project to `work`/project, log in to `work`/state and init `stack`.

        The stack file is stacks/Pulumi.<stack>.yaml when the checkout has one (the CLI then
        adds its encryption salt to the copy); `config` replaces its `config:` map.
        """
        copy_project(work / "project")
        # A salt an older checkout's stack file carries (tools/local.sh wrote one there before
        # it kept a copy under its cache) belongs to that user's passphrase: the copy's
        # `stack init` makes its own.
        copied = work / "project" / "stacks" / f"Pulumi.{stack}.yaml"
        if copied.exists():
            lines = copied.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [line for line in lines if not line.startswith("encryptionsalt:")]
            copied.write_text("".join(kept), encoding="utf-8")
        (work / "state").mkdir()
        home = work / "pulumi-home"
        home.mkdir()
        if (user_pulumi_home() / "plugins").is_dir():
            (home / "plugins").symlink_to(user_pulumi_home() / "plugins")
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in ("PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE_FILE")
        }
        env.update(
            PATH=path,
            PULUMI_HOME=str(home),
            PULUMI_CONFIG_PASSPHRASE=passphrase,
            PULUMI_SKIP_UPDATE_CHECK="true",
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK="true",
            PYTHONPATH=os.pathsep.join(
                p for p in (str(work / "project"), os.environ.get("PYTHONPATH", "")) if p
            ),
            PYTHONDONTWRITEBYTECODE="1",
        )
        env.pop("KUBECONFIG", None)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        project = cls(work=work, stack=stack, env=env)
        project.run("login", f"file://{project.state_dir}", stack=False)
        project.run("stack", "init", stack, "--secrets-provider", "passphrase", stack=False)
        if config is not None:
            document = yaml.safe_load(project.stack_file.read_text(encoding="utf-8")) or {}
            document["config"] = dict(config)
            project.stack_file.write_text(
                yaml.safe_dump(document, sort_keys=False), encoding="utf-8"
            )
        return project

    # ---- commands -------------------------------------------------------------
    def run(
        self, *args: str, check: bool = True, stack: bool = True, timeout: float = 600
    ) -> Result:
        """`pulumi ARGS --non-interactive --color never [--stack STACK]` in the copy."""
        argv = [*args, "--non-interactive", "--color", "never"]
        if stack:
            argv += ["--stack", self.stack]
        started = time.monotonic()
        proc = subprocess.Popen(
            ["pulumi", *argv],
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: plugins die with it on timeout
        )
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            stderr += f"\n(killed after {timeout:.0f}s)"
            proc.returncode = -9 if proc.returncode is None else proc.returncode
        result = Result(argv, proc.returncode, stdout, stderr, time.monotonic() - started)
        self.log.append(result)
        if check and result.returncode != 0:
            raise PulumiError(result.describe())
        return result

    def config_set(self, key: str, value: str, *, path: bool = False, secret: bool = False) -> None:
        flags = [*(["--path"] if path else []), *(["--secret"] if secret else [])]
        self.run("config", "set", *flags, key, value)

    def preview_json(self, *flags: str, check: bool = True) -> tuple[Result, dict[str, Any]]:
        """`pulumi preview --json`: the result and its parsed document."""
        result = self.run("preview", "--json", *flags, check=check)
        try:
            document = result.json()
        except ValueError as err:
            raise PulumiError(f"no JSON from preview ({err})\n{result.describe()}") from err
        return result, document

    def up(self, *flags: str, check: bool = True) -> Result:
        return self.run("up", "--yes", "--skip-preview", *flags, check=check)

    def export(self, show_secrets: bool = False) -> dict[str, Any]:
        """The stack's state (`pulumi stack export`); secrets stay encrypted (a new ciphertext
        each time the engine writes the state) unless `show_secrets`."""
        flags = ["--show-secrets"] if show_secrets else []
        return dict(self.run("stack", "export", *flags).json())

    def state_files(self) -> Iterator[Path]:
        """Every file of the file backend (checkpoints, backups, history)."""
        yield from (p for p in self.state_dir.rglob("*") if p.is_file())

    def timings(self) -> list[tuple[str, float]]:
        return [
            (" ".join(r.args[: r.args.index("--non-interactive")]), r.seconds) for r in self.log
        ]


# The e2e suite's stack (stacks/Pulumi.ci.yaml), on a control plane of tests/support/controlplane.py.
CI_STACK = "ci"
CI_NAMESPACE = "elasticctr-ci"
CI_JOB = "elasticctr-train"
VOLCANO_JOB_TYPE = "kubernetes:batch.volcano.sh/v1alpha1:Job"
# Set with `pulumi config set --secret`: encrypted with the passphrase in the stack file and
# the state, plaintext only in the Kubernetes Secret.
CI_UGI = "ci-user,ci-ugi-password-0f3a"


def ci_project(work: Path, path: str, kubeconfig: Path) -> Project:
    """The `ci` stack in `work`, on the control plane of `kubeconfig`, its UGI a secret."""
    project = Project.create(work, CI_STACK, path, kubeconfig=kubeconfig)
    project.config_set("cluster.kubeconfig", str(kubeconfig), path=True)
    project.config_set("data.ugi", CI_UGI, path=True, secret=True)
    return project


def resources_of(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The resources of a `pulumi stack export` document."""
    return list(state.get("deployment", {}).get("resources") or [])


def type_and_name(urn: str) -> tuple[str, str]:
    """(type, name) of a URN: urn:pulumi:<stack>::<project>::<parent$...$type>::<name>."""
    _, _, qualified, name = urn.split("::", 3)
    return qualified.rsplit("$", 1)[-1], name


def changed_steps(preview: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """URN -> (op, type) of every step of a `preview --json` document that is not `same`."""
    return {
        step["urn"]: (step["op"], type_and_name(step["urn"])[0])
        for step in preview.get("steps") or []
        if step["op"] != "same"
    }


def without_plugin_warnings(text: str) -> str:
    """Output without the lines about plugins taken from PATH (offline tools)."""
    return "\n".join(line for line in text.splitlines() if AMBIENT_PLUGIN_WARNING not in line)


def temp_dir(prefix: str) -> Path:
    """A fresh directory the caller removes (fixtures do, also on failure)."""
    return Path(tempfile.mkdtemp(prefix=prefix))
