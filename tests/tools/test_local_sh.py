"""tools/local.sh's commands that need no cluster: its usage, `env` refusing while the
local cluster is down, and the checkout's stack file kept as committed by `up`, `env` and
`destroy`, run with the real Pulumi CLI on a stand-in cluster and program (the walkthrough
that uses it on a running cluster is tests/cluster/test_readme_walkthrough.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.pulumi_cli import search_path, tool_dirs

ROOT = Path(__file__).resolve().parents[2]
SALT = "encryptionsalt:"
# The salt a user's `up` once left in the checkout's file (empty passphrase).
OLD_SALT = "encryptionsalt: v1:0ugbmC0E1Ew=:v1:RtkQLUFxj00TZhQ5:8q8TquCzRKdO8pdbu5ZQrb9Afd2ETQ==\n"
# tools/cluster.py as local.sh calls it, with a cluster that is always up.
CLUSTER = """import sys
from pathlib import Path

if sys.argv[1] == "up":
    print(Path(__file__).with_name("kubeconfig"))
"""
PROGRAM = """import pulumi

pulumi.export("token", pulumi.Output.secret("s3cret"))
"""


def local_sh(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """local.sh with a cache of its own: no cluster and no stack state there."""
    env = {**os.environ, "ELASTICCTR_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "local.sh"), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_usage_lists_every_command(tmp_path: Path) -> None:
    done = local_sh(tmp_path)
    assert done.returncode == 2
    for command in ("up", "destroy", "down", "env"):
        assert f"tools/local.sh {command}" in done.stderr, done.stderr


def test_env_refuses_while_the_cluster_is_down(tmp_path: Path) -> None:
    done = local_sh(tmp_path, "env")
    assert done.returncode == 1
    assert done.stdout == ""  # nothing for the caller's `eval`
    assert done.stderr.strip() == (
        "error: the local cluster is not up: run `sudo tools/local.sh up` first"
    )


def checkout(tmp_path: Path) -> Path:
    """A copy of local.sh in a project of its own: the checkout's Pulumi.yaml (its program
    a stand-in that exports a secret, nothing on a cluster) and stacks/Pulumi.local.yaml, a
    tools/cluster.py whose cluster is up, and build-tools.sh naming the real Pulumi CLI."""
    for tool in ("pulumi", "pulumi-language-python"):
        if shutil.which(tool, path=search_path()) is None:
            pytest.skip(f"{tool} not found: build it with `bash tools/build-tools.sh pulumi-tools`")
    root = tmp_path / "checkout"
    (root / "tools").mkdir(parents=True)
    (root / "stacks").mkdir()
    (root / "program").mkdir()
    shutil.copy2(ROOT / "tools" / "local.sh", root / "tools" / "local.sh")
    shutil.copy2(ROOT / "stacks" / "Pulumi.local.yaml", root / "stacks" / "Pulumi.local.yaml")
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
    project["main"] = "program/"
    (root / "Pulumi.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    (root / "program" / "__main__.py").write_text(PROGRAM, encoding="utf-8")
    (root / "tools" / "cluster.py").write_text(CLUSTER, encoding="utf-8")
    build_tools = root / "tools" / "build-tools.sh"
    build_tools.write_text(f"#!/usr/bin/env bash\necho {':'.join(tool_dirs())}\n")
    build_tools.chmod(0o755)
    (root / ".venv").symlink_to(sys.prefix)  # the program's virtualenv: this one
    return root


def run(root: Path, command: str, passphrase: str = "") -> subprocess.CompletedProcess[str]:
    """`bash -c command` in `root` as a user runs local.sh: its own cache, Pulumi home and
    passphrase, no Pulumi login of the caller's."""
    dropped = ("PULUMI_ACCESS_TOKEN", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE_FILE")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        ELASTICCTR_CACHE=str(root.parent / "cache"),
        PULUMI_HOME=str(root.parent / "pulumi-home"),
        PULUMI_CONFIG_PASSPHRASE=passphrase,
        PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
    )
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def salt_of(stack_file: Path) -> str:
    (line,) = [x for x in stack_file.read_text(encoding="utf-8").splitlines() if x.startswith(SALT)]
    return line


@pytest.mark.slow
def test_up_env_and_destroy_keep_the_checkouts_stack_file_as_committed(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    tracked = root / "stacks" / "Pulumi.local.yaml"
    committed = tracked.read_bytes()
    copy = tmp_path / "cache" / "local-stack" / "stacks" / "Pulumi.local.yaml"

    run(root, "tools/local.sh up")
    assert tracked.read_bytes() == committed
    salt = salt_of(copy)  # pulumi's salt is in the cache's copy, after the checkout's lines
    assert copy.read_text(encoding="utf-8") == committed.decode() + salt + "\n"

    # A second `up` refreshes the copy from the checkout's file and keeps the stack's salt.
    run(root, "tools/local.sh up")
    assert tracked.read_bytes() == committed
    assert salt_of(copy) == salt

    # The shell of `env`: the stack's secret outputs read as they are, and the caller's own
    # `pulumi up` with the copy as the README says.
    shell = run(
        root,
        'eval "$(tools/local.sh env)"\n'
        "pulumi stack output token --show-secrets --stack local\n"
        'pulumi up --stack local --config-file "$ELASTICCTR_LOCAL_STACK_FILE" --yes >&2',
    )
    assert shell.stdout == "s3cret\n"
    assert tracked.read_bytes() == committed
    assert salt_of(copy) == salt

    run(root, "tools/local.sh destroy")
    assert tracked.read_bytes() == committed


@pytest.mark.slow
def test_a_salt_an_older_checkout_carries_is_neither_used_nor_removed(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    tracked = root / "stacks" / "Pulumi.local.yaml"
    with tracked.open("a", encoding="utf-8") as file:
        file.write(OLD_SALT)
    carried = tracked.read_bytes()

    # Another passphrase than the old salt's: the new stack makes a salt of its own.
    run(root, "tools/local.sh up", passphrase="not-the-old-one")
    assert tracked.read_bytes() == carried
    copy = tmp_path / "cache" / "local-stack" / "stacks" / "Pulumi.local.yaml"
    assert salt_of(copy) != OLD_SALT.strip()
