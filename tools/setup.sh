#!/usr/bin/env bash
# Set-up from nothing, safe to run again (each step only adds what is missing):
#   0. Debian packages the image builds need (tools/images.py; installed as root);
#   1. .venv: Python 3.11 with every pinned package of the program, the workload code and
#      the tests (constraints.txt pins the whole dependency tree), and checkov in a
#      virtualenv of its own under the cache (tests/support/checkov-requirements.txt);
#   2. Hadoop's minicluster jars from Maven Central (the HDFS tests start a real HDFS);
#   3. the offline tools, built from Go modules (docs/tooling.md): kube-apiserver and etcd
#      for the end-to-end tests, and the Pulumi CLI, language host and Kubernetes provider
#      when `pulumi` is not on PATH (users with internet install it with the official
#      installer instead). About 22 minutes on a quiet fresh 2-core machine, seconds once cached.
#      ELASTICCTR_SKIP_TOOLS=1 skips this step (the end-to-end tests then skip, saying why).
#      It runs beside steps 1 and 2.
# `--demo`: only what the demo without a cluster needs (Python 3.11 and cargo): .venv with
# requirements-demo.txt, then `.venv/bin/elasticctr demo`. A later full set-up adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3.11}
command -v "$python" >/dev/null || python=python3
venv() {  # .venv with the packages of requirements file $1, pinned by constraints.txt
  if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -r "$1" -c constraints.txt
  echo "set-up: $(.venv/bin/python --version), $(.venv/bin/pip list 2>/dev/null | wc -l) packages"
}

need() {  # a command the set-up or the tests run, with what to do when it is missing
  command -v "$1" >/dev/null || { echo "set-up: '$1' is missing: $2" >&2; exit 1; }
}
case "${1:-}" in
  "") ;;
  --demo)
    need cargo "install Rust with rustup (the cube server is native)"
    venv requirements-demo.txt
    echo "set-up: the demo's packages; run .venv/bin/elasticctr demo (it builds the cube server with cargo the first time)"
    exit 0 ;;
  *) echo "set-up: unknown argument '$1'; allowed: --demo (only what the demo needs), or none" >&2
     exit 2 ;;
esac

need openssl "apt-get install openssl (the local control plane makes its certificates)"
need java "install Java 17 (the HDFS tests run Hadoop's minicluster)"
need mvn "apt-get install maven (fetches Hadoop's minicluster jars)"
need cargo "install Rust with rustup (the cube server is native)"
if [ "${ELASTICCTR_SKIP_TOOLS:-0}" != 1 ]; then
  need go "install Go >= 1.26 (the offline tools are built from Go modules)"
fi

# Debian packages: the compressors the data-file tests write files with, the headless
# browser the page tests look with (tests/support/browser.py), and, unless
# ELASTICCTR_SKIP_CLUSTER=1, those of the image builds (buildah, mmdebstrap) and of the local
# cluster's node (docs/images.md, docs/local-cluster.md). Installed as root on Debian;
# elsewhere the image and cluster tests say what is missing.
packages=(gzip bzip2 xz-utils zstd lz4 zip chromium-headless-shell)
if [ "${ELASTICCTR_SKIP_CLUSTER:-0}" != 1 ]; then
  # sudo: the README's local walkthrough uses it (a root shell in a container may lack it).
  packages+=(buildah mmdebstrap uidmap containerd containernetworking-plugins iptables conntrack
             ipset nftables iproute2 sudo)
fi
if command -v dpkg-query >/dev/null; then
  missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$package")
  done
  if ((${#missing[@]})) && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "set-up: installed ${missing[*]}"
  elif ((${#missing[@]})); then
    echo "set-up: not root: the image and cluster tests will skip without ${missing[*]}" >&2
  fi
fi
for compressor in gzip bzip2 xz zstd pzstd lz4 zip; do
  need "$compressor" "apt-get install gzip bzip2 xz-utils zstd lz4 zip (the data-file tests write files with the real tools)"
done

# The tools' Go builds, most of a fresh set-up, run while the Python environments and the
# jars below are fetched; the end waits for them. Their own process group (set -m): an
# early exit stops the go builds under them too.
tools_pid=""
if [ "${ELASTICCTR_SKIP_TOOLS:-0}" != 1 ]; then
  set -m
  ./tools/build-tools.sh >/dev/null &
  tools_pid=$!
  set +m
  trap '[ -z "$tools_pid" ] || kill -- -"$tools_pid" 2>/dev/null || true' EXIT
fi

venv requirements-dev.txt

# checkov, the IaC scanner the tests run over the stacks' manifests, in a virtualenv of its
# own: its exact pins cannot share constraints.txt (tests/support/scanner.py).
checkov_venv="${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/checkov"
if [ ! -x "$checkov_venv/bin/python" ]; then
  "$python" -m venv "$checkov_venv"
fi
"$checkov_venv/bin/python" -m pip install --quiet --upgrade pip
"$checkov_venv/bin/python" -m pip install --quiet -r tests/support/checkov-requirements.txt
echo "set-up: $("$checkov_venv/bin/checkov" --version | sed 's/^/checkov /') in $checkov_venv"

# Triton's gRPC client, which the serving tests call serving with, in a virtualenv of its own:
# it needs protobuf 6, the project's venv has Paddle's 4.25 (tests/support/grpc_client.py).
grpc_client_venv="${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/grpc-client"
if [ ! -x "$grpc_client_venv/bin/python" ]; then
  "$python" -m venv "$grpc_client_venv"
fi
"$grpc_client_venv/bin/python" -m pip install --quiet -r tests/support/grpc-client-requirements.txt
echo "set-up: tritonclient[grpc] in $grpc_client_venv"

./tools/hadoop-minicluster.sh fetch >/dev/null
echo "set-up: Hadoop minicluster jars cached"
./tools/kafka-broker.sh fetch >/dev/null
echo "set-up: Kafka broker jars cached (the feedback loop tests)"

if [ -n "$tools_pid" ]; then
  wait "$tools_pid" || { tools_pid=""; echo "set-up: building the tools failed (above)" >&2; exit 1; }
  tools_pid=""
  echo "set-up: tools built (PATH: tools/build-tools.sh --print-path)"
fi
