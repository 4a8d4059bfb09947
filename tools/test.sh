#!/usr/bin/env bash
# The test command: lint, type-check, then the whole pytest suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
# A cache outside the clone: a cold run reads all of pulumi-aws (about 2 minutes).
mypy --cache-dir "${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/mypy"
exec python -m pytest "$@"
