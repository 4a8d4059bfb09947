"""checkov (a third-party IaC scanner) passes on the four stacks' manifests, but for the
exceptions docs/architecture.md lists with their reasons, one line each; and every listed
exception is still needed (tests/support/scanner.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import scanner
from tests.support.prerequisites import unavailable
from tests.support.stacks import STACKS, graph

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkov() -> Path:
    binary = scanner.checkov_binary()
    if binary is None:
        unavailable(
            f"checkov is not installed at {scanner.CHECKOV_VENV} (tools/setup.sh makes that "
            "virtualenv; ELASTICCTR_CHECKOV names another binary)"
        )
    assert binary is not None
    return binary


@pytest.fixture(scope="module")
def findings(checkov: Path) -> Iterator[list[scanner.Finding]]:
    # Rendered Secrets hold test values: a private directory, removed afterwards.
    work = Path(tempfile.mkdtemp(prefix="elasticctr-checkov-"))
    try:
        for stack in STACKS:
            scanner.write_stack(work / stack, graph(stack).manifests())
        yield scanner.scan(checkov, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_the_four_stacks_pass_but_for_documented_exceptions(
    findings: list[scanner.Finding],
) -> None:
    exceptions = scanner.documented_exceptions()
    unexplained = [f for f in findings if not any(e.covers(f) for e in exceptions)]
    assert not unexplained, "checkov fails (not in docs/architecture.md's exceptions):\n" + (
        "\n".join(map(str, unexplained))
    )


def test_every_documented_exception_is_still_needed(findings: list[scanner.Finding]) -> None:
    stale = [
        f"{e.check} {', '.join(e.resources)}"
        for e in scanner.documented_exceptions()
        if not any(e.covers(f) for f in findings)
    ]
    assert not stale, "exceptions checkov no longer needs (remove them):\n" + "\n".join(stale)


def test_checkov_finds_what_it_is_run_for(checkov: Path, tmp_path: Path) -> None:
    """The scan is real: a pod run as uid 1000, from an image by tag, holding a Secret in its
    env and without a liveness probe, fails the checks the stacks pass."""
    pod = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "bad", "namespace": "elasticctr"},
        "spec": {
            "selector": {"matchLabels": {"app": "bad"}},
            "template": {
                "metadata": {"labels": {"app": "bad"}},
                "spec": {
                    "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
                    "containers": [
                        {
                            "name": "bad",
                            "image": "docker.io/elasticctr/serving:0.1.0",
                            "env": [
                                {
                                    "name": "TOKEN",
                                    "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}},
                                }
                            ],
                        }
                    ],
                },
            },
        },
    }
    scanner.write_stack(tmp_path / "bad", [pod])
    found = {f.check for f in scanner.scan(checkov, tmp_path)}
    assert {"CKV_K8S_8", "CKV_K8S_35", "CKV_K8S_40", "CKV_K8S_43"} <= found


def test_exceptions_table_is_read_one_line_each() -> None:
    text = "\n".join(
        [
            scanner.EXCEPTIONS_START,
            "| check | objects | why |",
            "|---|---|---|",
            "| CKV_K8S_15 | `StatefulSet/cube-*`, `Deployment/serving` | a digest pins it |",
            scanner.EXCEPTIONS_END,
        ]
    )
    (row,) = scanner.documented_exceptions(text)
    assert row.resources == ("StatefulSet/cube-*", "Deployment/serving")
    cube = scanner.Finding("CKV_K8S_15", "dev", "StatefulSet/cube-1a2b3c4d-0", "")
    assert row.covers(cube)
    assert not row.covers(scanner.Finding("CKV_K8S_8", "dev", "StatefulSet/cube-1", ""))
    assert not row.covers(scanner.Finding("CKV_K8S_15", "dev", "Deployment/mlflow", ""))
