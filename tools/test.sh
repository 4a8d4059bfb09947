#!/usr/bin/env bash
# The test command: lint, type-check, the Rust crates, then the whole pytest suite (the
# cluster and lifecycle tests included: they need root). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The project's venv, then the offline-built tools (Pulumi CLI, kube-apiserver, etcd)
# behind whatever `pulumi` the user already has.
export PATH="$PWD/.venv/bin:$PATH:$(./tools/build-tools.sh --print-path)"
# Every check runs and reports, whatever failed before it (it is called in a list, where
# `set -e` does not apply): the status says whether any failed.
checks() {
  local failed=0 cache="${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}"
  ruff check . || failed=1
  ruff format --check . || failed=1
  # A cache outside the clone: a cold run reads all of pulumi-aws (about 2 minutes).
  mypy --cache-dir "$cache/mypy" || failed=1
  # The Rust crates (the native cube-server): format, lints as errors, their own tests.
  # Their debug builds go to a cache outside the clone too, so a clean clone compiles the
  # crates alone, not their dependencies again (the release builds that tests and images
  # use stay in each crate's target/).
  local manifest
  for manifest in images/*/*/Cargo.toml; do
    cargo fmt --manifest-path "$manifest" --check || failed=1
    CARGO_TARGET_DIR="$cache/cargo-debug" cargo clippy --manifest-path "$manifest" --locked \
      --all-targets --quiet -- -D warnings || failed=1
    CARGO_TARGET_DIR="$cache/cargo-debug" cargo test --manifest-path "$manifest" --locked \
      --quiet || failed=1
  done
  return "$failed"
}
if [ $# -gt 0 ]; then
  checks || exit 1
  exec python -m pytest "$@"
fi
# The whole suite: the cluster session (mostly waiting on pods and Volcano) runs beside
# everything else, two pytest processes on the two cores (docs/tooling.md, "CI time").
# Its output follows the other's, whole. Each lists its slowest tests: where CI time goes.
cluster_log="$(mktemp)"
# The lifecycle's phase times and figures (the feedback loop's recovery among them) follow
# that log: pytest shows a passing test's output nowhere. A file the caller names is kept.
lifecycle_report="${ELASTICCTR_LIFECYCLE_REPORT:-$(mktemp)}"
# Each session is a job in its own process group (set -m), so that only the trap below
# signals it, once: a terminal's Ctrl-C reaches this script alone. The script waits on
# them with `wait`, which a trapped signal interrupts (a foreground command would hold the
# trap back until it ended). Their SIGINT handler is restored by tests/conftest.py: a job
# of a script started in the background (CI's runner) inherits SIGINT ignored.
set -m
# It also takes the tests marked beside_cluster: it ends well before the other otherwise.
ELASTICCTR_LIFECYCLE_REPORT="$lifecycle_report" \
  python -m pytest -m "cluster or beside_cluster" -p no:cacheprovider --durations=15 \
  --cpu-top=15 >"$cluster_log" 2>&1 &
cluster_pid=$!
set +m
main_pid=""
cluster_output() {
  echo "---- the cluster session (pytest -m cluster) ----"
  cat "$cluster_log"
  rm -f "$cluster_log"
  if [ -s "$lifecycle_report" ]; then
    echo "---- the lifecycle's phases (s) and figures ($lifecycle_report) ----"
    cat "$lifecycle_report"
  fi
  if [ -z "${ELASTICCTR_LIFECYCLE_REPORT:-}" ]; then
    rm -f "$lifecycle_report"
  fi
}
# Ctrl-C or CI's timeout (SIGTERM; SIGINT cannot be trapped in a script started with it
# ignored): the sessions end their tests and take their servers and cluster down.
# `set -e` holds in the trap: a session that already ended (kill fails) must not cut the
# log short.
stop_sessions() {
  kill -INT "$cluster_pid" $main_pid 2>/dev/null || true
  wait "$cluster_pid" $main_pid || true
  cluster_output
  exit 130
}
trap stop_sessions INT TERM
status=0
# The checks run while the cluster comes up; their failure fails the run all the same.
checks || status=$?
set -m
python -m pytest -m "not cluster and not beside_cluster" --durations=40 --cpu-top=40 &
main_pid=$!
set +m
wait "$main_pid" || status=$?
wait "$cluster_pid" || status=$?
trap - INT TERM
cluster_output
exit "$status"
