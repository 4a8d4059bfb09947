#!/usr/bin/env bash
# The test command: lint, type-check, then the whole pytest suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
mypy
exec python -m pytest "$@"
