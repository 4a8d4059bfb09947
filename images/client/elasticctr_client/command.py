"""`elasticctr`: the one command a user runs, from any directory.

The client's own commands (predict, click, logs, status, upload, dashboard, alerts) run in
this process. The set-up installs the command from a clone of the project
(`.venv/bin/elasticctr`), and from there it also starts the clone's tools, each with its
own arguments and --help: `generate` (the trainer's data generator), `demo`
(tools/demo.py) and `local` (tools/local.sh: up, down, ...). Installed without a clone,
those three are a usage error that says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from . import __main__ as client
from .errors import ExitCode

PROG = "elasticctr"
# The clone's root when this package is its images/client/elasticctr_client (an editable
# install); checked before use.
CLONE = Path(__file__).resolve().parents[3]


def _generate(root: Path, rest: list[str]) -> tuple[list[str], dict[str, str]]:
    # The generator ships in the trainer image's package, which the venv does not install.
    paths = [str(root / "images" / "trainer"), str(root / "images" / "common")]
    pythonpath = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    argv = [sys.executable, "-m", "elasticctr_trainer", "generate", *rest]
    return argv, {**os.environ, "PYTHONPATH": pythonpath}


def _demo(root: Path, rest: list[str]) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, str(root / "tools" / "demo.py"), *rest], dict(os.environ)


def _local(root: Path, rest: list[str]) -> tuple[list[str], dict[str, str]]:
    return [str(root / "tools" / "local.sh"), *rest], dict(os.environ)


TOOLS: dict[str, tuple[str, Callable[[Path, list[str]], tuple[list[str], dict[str, str]]]]] = {
    "generate": ("generate example data (the trainer's generator)", _generate),
    "demo": ("the whole pipeline as processes on this machine (tools/demo.py)", _demo),
    "local": ("the local one-node cluster and stack: up, down (tools/local.sh)", _local),
}


def clone_root(root: Path = CLONE) -> Path | None:
    """The project clone this command was installed from, if it was."""
    markers = ("Pulumi.yaml", "tools/demo.py", "tools/local.sh", "images/trainer")
    return root if all((root / marker).exists() for marker in markers) else None


def epilog() -> str:
    width = max(map(len, TOOLS))
    lines = [f"  {name:<{width}}  {what}" for name, (what, _) in TOOLS.items()]
    return "from a clone of the project (each takes its own arguments and --help):\n" + "\n".join(
        lines
    )


def main(argv: list[str] | None = None, root: Path = CLONE) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in TOOLS:
        name, rest = args[0], args[1:]
        found = clone_root(root)
        if found is None:
            print(
                f"error: {PROG} {name} runs a tool of the project's clone, and this "
                f"{PROG} was not installed from one ({root} is not a clone): run it from a "
                "clone's .venv/bin/elasticctr",
                file=sys.stderr,
            )
            return ExitCode.USAGE
        command, env = TOOLS[name][1](found, rest)
        sys.stdout.flush()
        os.execve(command[0], command, env)  # the tool's exit code and signals are the user's
    return client.main(args, prog=PROG, epilog=epilog())
