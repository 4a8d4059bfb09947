"""Fixtures of the end-to-end tests, beside the suite's (tests/conftest.py: the Pulumi CLI
and a local Kubernetes control plane): `volcano_webhook` puts Volcano's Job-mutating
webhook in front of the control plane, as on a real cluster. Projects
(tests/support/pulumi_cli.py) are made per module by the tests themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.prerequisites import unavailable
from tests.support.volcano_admission import BINARY, VolcanoJobWebhook, find_binary


@pytest.fixture(scope="module")
def volcano_webhook(control_plane: Any, cluster_path: str) -> Iterator[VolcanoJobWebhook]:
    """Volcano's Job-mutating webhook in front of the module's control plane: Jobs are then
    stored as on a real cluster (tests/support/volcano_admission.py)."""
    binary = find_binary(cluster_path)
    if binary is None:
        unavailable(f"{BINARY} not found: build it with `bash tools/build-tools.sh volcano`")
        raise AssertionError("unreachable: unavailable() raises")
    with VolcanoJobWebhook(control_plane, binary) as webhook:
        yield webhook
