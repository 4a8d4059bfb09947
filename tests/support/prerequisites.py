"""What a test does when something it needs is missing on this machine."""

from __future__ import annotations

import os

import pytest

REQUIRED = os.environ.get("ELASTICCTR_E2E_REQUIRED") == "1"


def unavailable(reason: str) -> None:
    """Skip, or with ELASTICCTR_E2E_REQUIRED=1 (CI) fail: CI must not pass by skipping."""
    if REQUIRED:
        pytest.fail(f"ELASTICCTR_E2E_REQUIRED=1 and {reason}", pytrace=False)
    pytest.skip(reason)
