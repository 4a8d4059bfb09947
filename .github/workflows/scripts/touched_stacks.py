#!/usr/bin/env python3
"""Which stacks a change touches, as a GitHub Actions matrix (no dependencies: runs on the
runner's own python3, before any set-up).

A change to the program (components/, infra/, Pulumi.yaml, its requirements), to the policy
pack, to the workflows, or to a shared file under stacks/ (slot.txt) touches every stack; a
change to stacks/Pulumi.<stack>.yaml touches that stack; anything else (docs, images, tests)
touches none.

    touched_stacks.py --stacks "dev aws-prod" --base SHA --head SHA [--require-all-listed]
        [--test-stacks "ci"]
    touched_stacks.py --stacks "aws-prod" --all

`--test-stacks` names the stacks of stacks/ that only the test suite uses (never previewed
or deployed by a workflow); `--require-all-listed` then accepts them as listed.

prints `matrix={"include": [{"stack": ..., "cloud": ...}, ...]}` and `any=true|false`, and
appends both to $GITHUB_OUTPUT when it is set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STACK_FILE = re.compile(r"^stacks/Pulumi\.(?P<stack>[^/]+)\.yaml$")
TOUCHES_ALL = (
    "components/",
    "infra/",
    "policy/",
    "stacks/",
    ".github/workflows/",
    "Pulumi.yaml",
    "requirements.txt",
    "constraints.txt",
)
NO_BASE = {"", "0" * 40}  # a new branch's push has no `before`


def stacks_in(root: Path) -> list[str]:
    return sorted(
        m["stack"]
        for p in (root / "stacks").glob("Pulumi.*.yaml")
        if (m := STACK_FILE.match(f"stacks/{p.name}"))
    )


def touched(changed: Iterable[str], stacks: Sequence[str]) -> list[str]:
    """The stacks of `stacks` that a change of the `changed` paths touches, in their order."""
    hit: set[str] = set()
    for path in changed:
        match = STACK_FILE.match(path)
        if match:
            hit.add(match["stack"])
        elif path.startswith(TOUCHES_ALL):
            return list(stacks)
    return [s for s in stacks if s in hit]


def cloud_of(root: Path, stack: str) -> str:
    """`elasticctr:cloud` of a stack file (the program's default, existing, when unset)."""
    text = (root / "stacks" / f"Pulumi.{stack}.yaml").read_text(encoding="utf-8")
    match = re.search(r"^\s*elasticctr:cloud:\s*[\"']?([a-z]+)", text, re.M)
    return match.group(1) if match else "existing"


def changed_files(base: str, head: str) -> list[str] | None:
    """Paths changed from the merge base of `base` and `head` to `head`; None if unknown."""
    if base in NO_BASE:
        return None
    result = subprocess.run(
        ["git", "diff", "--name-only", f"{base}...{head}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.splitlines() if result.returncode == 0 else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks", required=True, help="the stacks this workflow knows")
    parser.add_argument("--base", default="")
    parser.add_argument("--head", default="HEAD")
    parser.add_argument("--all", action="store_true", help="every listed stack")
    parser.add_argument(
        "--require-all-listed",
        action="store_true",
        help="fail unless --stacks and --test-stacks name exactly the stacks in stacks/",
    )
    parser.add_argument(
        "--test-stacks",
        default="",
        help="stacks only the test suite uses: never in the matrix",
    )
    args = parser.parse_args(argv)
    listed = args.stacks.split()
    test_only = args.test_stacks.split()
    present = stacks_in(ROOT)
    unknown = sorted((set(listed) | set(test_only)) - set(present))
    if unknown:
        print(f"error: no stacks/Pulumi.<stack>.yaml for {', '.join(unknown)}", file=sys.stderr)
        return 1
    both = sorted(set(listed) & set(test_only))
    if both:
        print(f"error: {', '.join(both)} both listed and test-only", file=sys.stderr)
        return 1
    unlisted = sorted(set(present) - set(listed) - set(test_only))
    if args.require_all_listed and unlisted:
        print(
            f"error: stacks/ has {', '.join(unlisted)}, which this workflow does not name: "
            "add it to the workflow's stack list (and decide whether main deploys it)",
            file=sys.stderr,
        )
        return 1
    changed = None if args.all else changed_files(args.base, args.head)
    stacks = listed if changed is None else touched(changed, listed)
    matrix = {"include": [{"stack": s, "cloud": cloud_of(ROOT, s)} for s in stacks]}
    lines = [f"matrix={json.dumps(matrix)}", f"any={'true' if stacks else 'false'}"]
    print("\n".join(lines))
    if os.environ.get("GITHUB_OUTPUT"):
        with open(os.environ["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
