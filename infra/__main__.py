"""Pulumi's entry point (Pulumi.yaml `main: infra/`)."""

import sys
from pathlib import Path

# The program imports `infra` and `components` from the project root.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infra.program import main

main()
