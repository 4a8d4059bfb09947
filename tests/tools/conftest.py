"""Fixtures of the image tests marked `cluster`: images built by tools/images.py (cached:
seconds when nothing changed) and a private containerd they are imported into."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.containerd import PrivateContainerd, available

ROOT = Path(__file__).resolve().parents[2]


def images_tool() -> ModuleType:
    """tools/images.py, the library the cluster tooling calls too."""
    if "images_cli" in sys.modules:
        return sys.modules["images_cli"]
    spec = importlib.util.spec_from_file_location("images_cli", ROOT / "tools" / "images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["images_cli"] = module
    spec.loader.exec_module(module)
    return module


def require_builder() -> None:
    reason = available()
    if not reason and shutil.which("buildah") is None:
        reason = "buildah is not installed (tools/setup.sh installs it)"
    if reason:
        pytest.skip(reason)


# Per module: it is stopped before the cluster session's last test checks that no
# containerd of the tests is left running.
@pytest.fixture(scope="module")
def private_containerd() -> Iterator[PrivateContainerd]:
    require_builder()
    with PrivateContainerd() as containerd:
        yield containerd
