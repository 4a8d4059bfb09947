"""Volcano: the official chart, pinned, in volcano-system."""

from __future__ import annotations

import pulumi_kubernetes as k8s

from components.volcano import CHART_VERSION, Volcano, VolcanoArgs
from tests.support import pulumi_harness as harness


def test_official_chart_pinned() -> None:
    def program() -> None:
        Volcano("volcano", VolcanoArgs(provider=k8s.Provider("k8s")))

    release = harness.run(program, {}).one("kubernetes:helm.sh/v3:Release").inputs
    assert release["chart"] == "volcano" and release["version"] == CHART_VERSION == "1.15.0"
    assert release["repositoryOpts"] == {"repo": "https://volcano-sh.github.io/helm-charts"}
    assert release["namespace"] == "volcano-system" and release["createNamespace"] is True
    assert release.get("skipAwait") is False
