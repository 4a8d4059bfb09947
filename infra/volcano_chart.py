"""Where the Volcano chart comes from on a machine without internet: the Go module
volcano.sh/volcano at the pinned version, as tools/build-tools.sh keeps it (docs/tooling.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pulumi

from components.volcano import CHART_VERSION

BUILD_TOOLS = Path(__file__).resolve().parent.parent / "tools" / "build-tools.sh"


class ChartUnavailable(pulumi.RunError):
    """The local chart is not there (or not the pinned version); the message says what to do.

    A RunError: Pulumi prints the message alone, before any resource is registered."""


def go_module_chart() -> str:
    """The chart directory of the Volcano Go module, checked to be CHART_VERSION."""
    try:
        out = subprocess.run(
            ["bash", str(BUILD_TOOLS), "--print-volcano-chart"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        raise ChartUnavailable(f"tools/build-tools.sh --print-volcano-chart failed: {e}") from e
    chart = Path(out)
    meta = chart / "Chart.yaml"
    if not meta.is_file():
        raise ChartUnavailable(
            f"volcano.chart is go-module, but there is no chart at {chart}: "
            "build it with `tools/build-tools.sh volcano`"
        )
    # Chart.yaml's top-level `version: "1.15.0"` (quoted or not).
    found = re.search(r"^version:\s*[\"']?([^\"'\s]+)", meta.read_text(), re.MULTILINE)
    version = found.group(1) if found else "(none)"
    if version != CHART_VERSION:
        raise ChartUnavailable(
            f"the chart at {chart} is version {version}, the program pins {CHART_VERSION}"
        )
    return str(chart)
