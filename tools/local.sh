#!/usr/bin/env bash
# The local environment in one command, on a Linux machine with root and no cluster, after
# ./tools/setup.sh (docs/local-cluster.md):
#
#   sudo tools/local.sh up        # cluster up, images built and loaded, pulumi up --stack local
#   sudo tools/local.sh destroy   # pulumi destroy --stack local (the cluster stays)
#   sudo tools/local.sh down      # destroy, then the cluster down (the host restored)
#   eval "$(sudo tools/local.sh env)"   # this shell: KUBECONFIG, PATH, the stack's state
#
# Pulumi state stays on this machine (a file backend under the cache, passphrase secrets
# with PULUMI_CONFIG_PASSPHRASE, empty unless set): your own `pulumi login` is not touched.
# Pulumi reads a copy of stacks/Pulumi.local.yaml under the cache, refreshed by each command,
# and writes the passphrase's salt there: the checkout's file stays as committed (edit it,
# then `up` again). Your own `pulumi preview|up|refresh|destroy --stack local` in the shell of
# `env` take `--config-file "$ELASTICCTR_LOCAL_STACK_FILE"`, that copy.
# Extra arguments go to `pulumi up` / `pulumi destroy`.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}
export PATH="$PWD/.venv/bin:$PATH:$(tools/build-tools.sh --print-path)"
export PULUMI_BACKEND_URL="file://$cache/pulumi-state" PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_CONFIG_PASSPHRASE=${PULUMI_CONFIG_PASSPHRASE-}
mkdir -p "$cache/pulumi-state"

# The stack file pulumi gets (pulumi writes the passphrase's salt into the stack file it
# reads), in a project directory of its own for `stack init`: the checkout's file with the
# copy's own salt line. A salt line the checkout's file carries (local.sh wrote it there
# before it kept this copy) is not used, nor removed.
stack_dir=$cache/local-stack
stack_file=$stack_dir/stacks/Pulumi.local.yaml
copy_stack_file() {
  local salt=""
  if [ -f "$stack_file" ]; then salt=$(grep -m1 '^encryptionsalt:' "$stack_file" || true); fi
  mkdir -p "$stack_dir/stacks"
  cp Pulumi.yaml "$stack_dir/Pulumi.yaml"
  {
    grep -v '^encryptionsalt:' stacks/Pulumi.local.yaml || [ $? = 1 ]  # 1: no line left
    if [ -n "$salt" ]; then printf '%s\n' "$salt"; fi
  } >"$stack_file.new"
  mv "$stack_file.new" "$stack_file"
}

command=${1:-}; shift || true
case "$command" in
  up)
    KUBECONFIG=$(python tools/cluster.py up --images)
    export KUBECONFIG
    copy_stack_file
    if ! pulumi stack select local 2>/dev/null; then
      # A new stack makes its salt in the copy (one of an earlier stack is not its own).
      sed -i '/^encryptionsalt:/d' "$stack_file"
      pulumi --cwd "$stack_dir" stack init local --secrets-provider passphrase --no-select
      pulumi stack select local
    fi
    pulumi up --stack local --config-file "$stack_file" --yes --skip-preview "$@"
    ;;
  destroy|down)
    if python tools/cluster.py status >/dev/null; then
      KUBECONFIG=$(python tools/cluster.py up)
      export KUBECONFIG
      copy_stack_file
      if pulumi stack select local 2>/dev/null; then
        pulumi destroy --stack local --config-file "$stack_file" --yes --skip-preview "$@"
      fi
    fi
    if [ "$command" = down ]; then python tools/cluster.py down; fi
    ;;
  env)
    # Shell lines that give the caller's shell what the commands above use: the cluster's
    # kubeconfig, the tools built here on PATH (kubectl, pulumi, elasticctr), and the
    # stack's state, so that `pulumi stack output --stack local` and `elasticctr --stack
    # local ...` find it, and the stack file for the caller's own `pulumi preview|up|refresh|
    # destroy --stack local --config-file ...`. The passphrase stays the caller's own (empty
    # unless set).
    if ! python tools/cluster.py status >/dev/null; then
      echo "error: the local cluster is not up: run \`sudo tools/local.sh up\` first" >&2
      exit 1
    fi
    printf 'export KUBECONFIG=%q\n' "$(python tools/cluster.py up 2>/dev/null)"
    printf 'export PULUMI_BACKEND_URL=%q PULUMI_SKIP_UPDATE_CHECK=true\n' "$PULUMI_BACKEND_URL"
    copy_stack_file
    printf 'export ELASTICCTR_LOCAL_STACK_FILE=%q\n' "$stack_file"
    # shellcheck disable=SC2016  # expanded by the caller's shell, not here
    printf 'export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE-}"\n'
    printf 'export PATH=%q:"$PATH":%q\n' "$PWD/.venv/bin" "$(tools/build-tools.sh --print-path)"
    ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
