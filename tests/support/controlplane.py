"""tools/controlplane.py (a script, not a package), imported as the module `controlplane`."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.support.pulumi_cli import ROOT


def load_controlplane() -> ModuleType:
    """The module `controlplane` (imported once)."""
    if "controlplane" in sys.modules:
        return sys.modules["controlplane"]
    path = ROOT / "tools" / "controlplane.py"
    spec = importlib.util.spec_from_file_location("controlplane", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["controlplane"] = module
    spec.loader.exec_module(module)
    return module
