"""The layout's import rules (README, the path table), checked on the modules' syntax trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.imports import (
    PRODUCT_FOLDERS,
    ROOT,
    Use,
    harness_uses,
    module_name,
    private_uses,
    python_files,
)


def _where(path: Path, use: Use) -> str:
    return f"{path.relative_to(ROOT)}:{use.line}: {use.module}" + (
        f" {use.name}" if use.name else ""
    )


def test_no_product_module_uses_a_private_name_of_another_module() -> None:
    found = [_where(p, use) for p in python_files(*PRODUCT_FOLDERS) for use in private_uses(p)]
    assert not found, "private names of other modules (make them public where they live):\n" + (
        "\n".join(found)
    )


def test_bench_takes_from_tests_only_tests_support() -> None:
    found = [_where(p, use) for p in python_files("bench") for use in harness_uses(p)]
    assert not found, "bench/ imports test modules (move what it needs to tests/support):\n" + (
        "\n".join(found)
    )


def test_test_folders_share_helpers_only_through_tests_support() -> None:
    found = [
        _where(p, use)
        for p in python_files("tests")
        if not p.is_relative_to(ROOT / "tests" / "support")
        for use in harness_uses(p)
        if use.module.rpartition(".")[0] != module_name(p).rpartition(".")[0]
    ]
    assert not found, "test modules of other folders (move what is shared to tests/support):\n" + (
        "\n".join(found)
    )


# The checks themselves, on code written for it (as if it were tools/localcluster/node.py).
@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "from tools.localcluster.settings import _x\n",
            [Use(1, "tools.localcluster.settings", "_x")],
        ),
        ("from .settings import _x\n", [Use(1, "tools.localcluster.settings", "_x")]),
        ("from . import settings\nsettings._x()\n", [Use(2, "tools.localcluster.settings", "_x")]),
        (
            "import tools.localcluster.settings as s\ns._x\n",
            [Use(2, "tools.localcluster.settings", "_x")],
        ),
        (
            "import tools.localcluster.settings\ntools.localcluster.settings._x\n",
            [Use(2, "tools.localcluster.settings", "_x")],
        ),
        (
            "from elasticctr_common import storage\nstorage._y\n",
            [Use(2, "elasticctr_common.storage", "_y")],
        ),
        # Not the project's module, dunder names, the module's own names, public names.
        ("import os\nos._exit(0)\n", []),
        ("import tools.localcluster.settings as s\ns.__file__\n", []),
        ("_x = 1\nprint(_x)\n", []),
        ("from tools.localcluster.settings import Layout\n", []),
    ],
)
def test_private_uses_are_found_however_imported(source: str, expected: list[Use]) -> None:
    path = ROOT / "tools" / "localcluster" / "node.py"
    assert private_uses(path, source) == expected


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (
            "from tests.images.serving.conftest import start_stack\n",
            ["tests.images.serving.conftest"],
        ),
        ("from tests.images.serving import conftest\n", ["tests.images.serving.conftest"]),
        ("import tests.images.cube.cubetest as c\n", ["tests.images.cube.cubetest"]),
        ("from tests import images\n", ["tests.images"]),
        ("from tests.support.serving import Load\nfrom tests import support\n", []),
        ("import tests.support.cube\nimport json\n", []),
    ],
)
def test_imports_of_test_modules_are_found_however_written(source: str, found: list[str]) -> None:
    path = ROOT / "bench" / "serving_faults.py"
    assert [use.module for use in harness_uses(path, source)] == found
