"""checkov, a third-party IaC scanner, over the manifests of the four stacks (rendered under
mocks: tests/support/stacks.py), and the exceptions docs/architecture.md allows it.

checkov's dependency tree cannot share the project's pins (it pins boto3 1.35, the images use
1.44), so it runs from a virtualenv of its own that tools/setup.sh makes from
tests/support/checkov-requirements.txt (`CHECKOV_VENV`; `ELASTICCTR_CHECKOV` names another
binary). checkov reads a Volcano Job as a batch Job without a pod template, so each of its
tasks is scanned as a batch Job of its template (`Job/<job>-<task>`), and the Volcano Job
itself is not.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support.manifests import is_volcano_job
from tools.localcluster.settings import CACHE

ROOT = Path(__file__).resolve().parents[2]
CHECKOV_VENV = CACHE / "checkov"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
EXCEPTIONS_START = "<!-- checkov-exceptions:start -->"
EXCEPTIONS_END = "<!-- checkov-exceptions:end -->"


@dataclass(frozen=True)
class Finding:
    check: str  # CKV_K8S_40
    stack: str
    resource: str  # Kind/name, as in the exceptions table
    title: str

    def __str__(self) -> str:
        return f"{self.stack}: {self.check} {self.resource} ({self.title})"


@dataclass(frozen=True)
class Exception_:
    check: str
    resources: tuple[str, ...]  # Kind/name patterns (fnmatch)
    why: str

    def covers(self, finding: Finding) -> bool:
        return finding.check == self.check and any(
            fnmatch.fnmatchcase(finding.resource, pattern) for pattern in self.resources
        )


def checkov_binary() -> Path | None:
    given = os.environ.get("ELASTICCTR_CHECKOV")
    path = Path(given) if given else CHECKOV_VENV / "bin" / "checkov"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def scanned_objects(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What checkov reads: every object, a Volcano Job as one batch Job per task (pods that
    run to completion, as the Volcano Job's are)."""
    objects = []
    for manifest in manifests:
        if not is_volcano_job(manifest):
            objects.append(manifest)
            continue
        meta = manifest["metadata"]
        ns = meta.get("namespace")
        for task in manifest["spec"]["tasks"]:
            objects.append(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": f"{meta['name']}-{task['name']}", "namespace": ns},
                    "spec": {"template": task["template"]},
                }
            )
    return objects


def write_stack(directory: Path, manifests: list[dict[str, Any]]) -> None:
    directory.mkdir(parents=True)
    for i, obj in enumerate(scanned_objects(manifests)):
        name = f"{i:03d}-{obj['kind']}-{obj['metadata']['name']}.yaml"
        (directory / name).write_text(yaml.safe_dump(obj), encoding="utf-8")


def scan(binary: Path, directory: Path) -> list[Finding]:
    """checkov's failed checks over `directory/<stack>/*.yaml`; no network (--skip-download)."""
    result = subprocess.run(
        [
            str(binary),
            *("--directory", str(directory), "--framework", "kubernetes"),
            *("--output", "json", "--quiet", "--skip-download", "--compact"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "LOG_LEVEL": "WARNING"},
    )
    # 0: nothing failed, 1: checks failed; anything else is checkov's own failure.
    if result.returncode not in (0, 1):
        raise RuntimeError(f"checkov exited {result.returncode}: {result.stderr[-3000:]}")
    return findings(json.loads(result.stdout), directory)


def findings(report: Any, directory: Path) -> list[Finding]:
    reports = report if isinstance(report, list) else [report]
    found = []
    for part in reports:
        if part.get("check_type") != "kubernetes":
            continue
        summary = part.get("summary", {})
        if summary.get("parsing_errors"):
            raise RuntimeError(f"checkov could not parse {summary['parsing_errors']} file(s)")
        for check in part.get("results", {}).get("failed_checks", []):
            file = Path(directory, check["file_path"].lstrip("/"))
            stack = file.relative_to(directory).parts[0]
            kind, _, name = check["resource"].split(".", 2)  # Kind.namespace.name
            found.append(Finding(check["check_id"], stack, f"{kind}/{name}", check["check_name"]))
    return sorted(found, key=str)


def documented_exceptions(text: str | None = None) -> list[Exception_]:
    """The rows of docs/architecture.md's exceptions table: `| CKV_K8S_n | `Kind/name`, ... |
    why |`, one line each."""
    text = text if text is not None else ARCHITECTURE.read_text(encoding="utf-8")
    start, end = text.index(EXCEPTIONS_START), text.index(EXCEPTIONS_END)
    rows = []
    for line in text[start:end].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"CKV_K8S_[0-9]+", cells[0]):
            continue
        resources = tuple(re.findall(r"`([^`]+)`", cells[1]))
        assert resources, f"exception {cells[0]} names no resource: {line}"
        rows.append(Exception_(cells[0], resources, cells[2]))
    return rows
