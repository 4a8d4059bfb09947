#!/usr/bin/env bash
# The test command: lint, type-check, the Rust crates, then the whole pytest suite (the
# cluster and lifecycle tests included: they need root). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's venv, then the offline-built tools (Pulumi CLI, kube-apiserver, etcd)
# behind whatever `pulumi` the user already has.
export PATH="$PWD/.venv/bin:$PATH:$(./tools/build-tools.sh --print-path)"
ruff check .
ruff format --check .
# A cache outside the clone: a cold run reads all of pulumi-aws (about 2 minutes).
mypy --cache-dir "${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/mypy"
# The Rust crates (the native cube-server): format, lints as errors, their own tests.
for manifest in images/*/*/Cargo.toml; do
  cargo fmt --manifest-path "$manifest" --check
  cargo clippy --manifest-path "$manifest" --locked --all-targets --quiet -- -D warnings
  cargo test --manifest-path "$manifest" --locked --quiet
done
exec python -m pytest "$@"
