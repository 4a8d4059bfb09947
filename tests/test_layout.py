"""The layout's import rules (README, the path table), checked on the modules' syntax trees."""

from __future__ import annotations

import pytest

from tests.support.imports import PRODUCT_FOLDERS, ROOT, Use, private_uses, python_files


def test_no_product_module_uses_a_private_name_of_another_module() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{use.line}: {use.module}.{use.name}"
        for path in python_files(*PRODUCT_FOLDERS)
        for use in private_uses(path)
    ]
    assert not found, "private names of other modules (make them public where they live):\n" + (
        "\n".join(found)
    )


# The check itself, on code written for it (as if it were tools/localcluster/node.py).
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
