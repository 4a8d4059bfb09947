#!/usr/bin/env bash
# The test command: lint, type-check, then the whole pytest suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's venv, then the offline-built tools (Pulumi CLI, kube-apiserver, etcd)
# behind whatever `pulumi` the user already has.
export PATH="$PWD/.venv/bin:$PATH:$(./tools/build-tools.sh --print-path)"
ruff check .
ruff format --check .
# A cache outside the clone: a cold run reads all of pulumi-aws (about 2 minutes).
mypy --cache-dir "${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/mypy"
exec python -m pytest "$@"
