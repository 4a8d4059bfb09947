"""README's dev walkthrough ("Deploy: the dev stack"), checked without a cluster: each
`elasticctr` line parses with the installed command's own parsers, each `pulumi config set`
names a key of the project's config, and the data it generates and puts into HDFS is what
the dev stack's job reads (its slots, its hours, its data source and dataset path). Running it
needs a cluster of one's own; tests/cluster/test_readme_walkthrough.py runs the local
stack's as written."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from elasticctr_client import __main__ as client
from elasticctr_client import command
from elasticctr_common.slotconf import read_slot_conf
from elasticctr_trainer import __main__ as trainer
from elasticctr_trainer.generate import PROFILE_DEFAULTS
from elasticctr_trainer.hours import hour_range

from infra.config import StackConfig
from infra.config_reference import markdown_reference, pulumi_config_section
from tests.support import pulumi_harness as harness
from tests.support.readme import code_blocks

TITLE = "## Deploy: the dev stack"
STACK = "dev"
ROOT = harness.ROOT
# `pulumi config set`'s options that take a value (the others are flags).
CONFIG_SET_VALUE_OPTIONS = ("--stack", "-s", "--config-file", "--cwd", "-C", "--type")


def command_lines(text: str) -> list[list[str]]:
    """Each line of `text` (fenced blocks) that runs `elasticctr` or `pulumi`, as the shell
    splits it: continued lines joined, comments dropped."""
    found = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = line.split()
        if words and Path(words[0]).name in ("elasticctr", "pulumi"):
            found.append(shlex.split(line, comments=True))
    return found


def parse(argv: list[str]) -> argparse.Namespace:
    """`elasticctr ARGV` as the installed command parses it (elasticctr_client.command): its
    `generate` by the trainer's parser, the client's commands by the client's. A usage error
    is an AssertionError carrying argparse's message."""
    if argv and argv[0] in command.TOOLS and argv[0] != "generate":
        raise AssertionError(f"`elasticctr {argv[0]}` runs a tool this test has no parser of")
    if argv and argv[0] == "generate":
        parser = trainer.build_parser()
    else:
        parser = client.build_parser(prog=command.PROG, epilog=command.epilog())
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            return parser.parse_args(argv)
    except SystemExit:
        raise AssertionError(said.getvalue().strip() or "argparse exited") from None


def dev_config() -> StackConfig:
    """stacks/Pulumi.dev.yaml as the program reads it (the model's defaults for the rest)."""
    prefix = f"{harness.NAMESPACE}:"
    raw = {key.removeprefix(prefix): value for key, value in harness.stack_config(STACK).items()}
    return StackConfig.model_validate(raw)


def config_set_key(argv: list[str]) -> tuple[str, bool]:
    """The key of `pulumi config set ... KEY [VALUE]` and whether --path is given."""
    positional, skip = [], False
    for word in argv[3:]:
        if skip:
            skip = False
        elif word in CONFIG_SET_VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            positional.append(word)
    assert positional, f"no key in {shlex.join(argv)}"
    return positional[0], "--path" in argv


def key_problem(key: str, path: bool) -> str | None:
    """Why `pulumi config set [--path] KEY` sets no key of the project, or None."""
    if not path:
        if key in pulumi_config_section():
            return None
        hint = " (a nested key needs --path)" if "." in key else ""
        return f"{key} is not a top-level key of Pulumi.yaml's config{hint}"
    # The README's reference lists every key, a list's items as [i], as the model has it.
    listed = re.sub(r"\[\d+\]", "[i]", key)
    if f"| `{listed}` |" in markdown_reference():
        return None
    return f"--path {key} is not a key of the config reference (infra/config.py)"


@pytest.fixture(scope="module")
def walkthrough() -> str:
    return "".join(code_blocks(TITLE))


@pytest.fixture(scope="module")
def elasticctr_lines(walkthrough: str) -> list[list[str]]:
    return [argv[1:] for argv in command_lines(walkthrough) if Path(argv[0]).name == "elasticctr"]


def test_the_walkthrough_goes_from_nothing_to_a_prediction_and_down(
    walkthrough: str, elasticctr_lines: list[list[str]]
) -> None:
    runs = [" ".join(argv) for argv in command_lines(walkthrough)]
    assert any(run.startswith("pulumi up --stack dev") for run in runs), runs
    commands = [parse(argv) for argv in elasticctr_lines]
    done = [c.command for c in commands]
    assert done[:1] == ["generate"] and {"status", "predict"} <= set(done), done
    # status waits for the first version; status and predict ask the dev stack.
    assert all(c.wait for c in commands if c.command == "status"), elasticctr_lines
    assert {c.stack for c in commands if c.command != "generate"} == {STACK}, elasticctr_lines
    assert "pulumi destroy --stack dev" in runs, runs


def test_every_elasticctr_line_parses(elasticctr_lines: list[list[str]]) -> None:
    problems = []
    for argv in elasticctr_lines:
        try:
            parse(argv)
        except AssertionError as err:
            problems.append(f"elasticctr {shlex.join(argv)}\n  {err}")
    assert elasticctr_lines and not problems, "\n".join(problems)


def test_every_config_set_names_a_key_of_the_project(walkthrough: str) -> None:
    sets = [argv for argv in command_lines(walkthrough) if argv[1:3] == ["config", "set"]]
    problems = [
        f"{shlex.join(argv)}: {problem}"
        for argv in sets
        if (problem := key_problem(*config_set_key(argv)))
    ]
    assert sets and not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["pulumi", "config", "set", "trainers", "4", "--stack", "dev"], None),
        (["pulumi", "config", "set", "--path", "data.end", "20191221/23"], None),
        (["pulumi", "config", "set", "--secret", "--path", "data.ugi", "u,p"], None),
        (["pulumi", "config", "set", "--path", "cluster.aws.node_pools[0].name", "x"], None),
        (["pulumi", "config", "set", "-s", "dev", "trainer", "4"], "trainer is not a top"),
        (["pulumi", "config", "set", "data.end", "20191221/23"], "needs --path"),
        (["pulumi", "config", "set", "--path", "data.ends", "x"], "--path data.ends is not"),
    ],
)
def test_config_keys_are_told_apart(argv: list[str], problem: str | None) -> None:
    found = key_problem(*config_set_key(argv))
    assert found is None if problem is None else problem in (found or ""), found


def test_generate_writes_the_slots_and_hours_the_dev_job_reads(
    elasticctr_lines: list[list[str]],
) -> None:
    config = dev_config()
    (args,) = [parse(argv) for argv in elasticctr_lines if argv[0] == "generate"]
    assert args.profile == "simple", "the dev stack's slots are stacks/slot.txt's: --profile simple"
    slots = read_slot_conf(ROOT / config.slot_conf)
    generated = list(range(args.first_slot, args.first_slot + args.slots))
    assert generated == slots, f"generate writes slots {generated}, the dev job reads {slots}"
    default_start, default_hours, _ = PROFILE_DEFAULTS[args.profile]
    start = args.start or default_start
    hours = default_hours if args.hours is None else args.hours
    wanted = hour_range(config.data.start, config.data.end)
    assert (start, hours) == (wanted[0], len(wanted)) and not args.missing_hour, (
        f"generate writes {hours} hours from {start}, the dev job reads {wanted}"
    )


def test_the_data_goes_where_the_dev_job_reads_it(elasticctr_lines: list[list[str]]) -> None:
    config = dev_config()
    commands = [parse(argv) for argv in elasticctr_lines]
    (args,) = [c for c in commands if c.command == "generate"]
    out = args.out.removeprefix("file://")
    (upload,) = [c for c in commands if c.command == "upload"]
    assert not upload.dest, "upload takes the dev stack's own HDFS (hdfs_address), no --dest"
    assert Path(upload.source) == Path(out) / "train", (upload.source, out)
    assert (upload.data_source, upload.dataset_path.rstrip("/")) == (
        config.data.source,
        config.data.dataset_path.rstrip("/"),
    ), "upload writes where the dev job reads (data.source, data.dataset_path)"
    heldout = [f for c in commands if c.command == "predict" for f in c.files]
    assert heldout == [f"{out}/heldout/part-00000"], heldout
