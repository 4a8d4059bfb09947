#!/usr/bin/env bash
# Offline path to the tools the end-to-end tests and the local one-node cluster
# need, all built from Go modules (see docs/tooling.md):
#   - Pulumi: the CLI, the Python language host, the Kubernetes resource provider;
#   - the cluster: Kubernetes (kube-apiserver, kube-controller-manager,
#     kube-scheduler, kubelet, kube-proxy, kubectl), etcd, CoreDNS, Volcano
#     (scheduler, controller-manager, webhook-manager, and its Helm chart),
#     kube-router (NetworkPolicy), the MinIO server and its client mc;
#   - the simulated cluster (tools/localcluster/simulated.py): kwok;
#   - monitoring: Prometheus (prometheus, promtool) for the in-cluster stand-in image and
#     the alert rules' tests.
# Tools that need a wrapper module (replaces, pinned dependencies) have one in
# tools/gotools/<tool>/; the others are built as their own main module from a
# copy of the module, whose zip hash is pinned below.
# Users with internet keep the official Pulumi installer; this is the offline path.
#
# Usage:
#   tools/build-tools.sh               build what is missing, then print `export PATH=...`
#   tools/build-tools.sh --print-path  print the bin directories (colon-separated), build nothing
#   tools/build-tools.sh --print-volcano-chart
#                                      print the directory of Volcano's Helm chart
#                                      (exit 1 when Volcano is not built yet)
#   tools/build-tools.sh --check       exit 0 when every tool is built, 1 otherwise
#   tools/build-tools.sh TOOL|GROUP... build only these: pulumi pulumi-language-python
#                                      pulumi-resource-kubernetes kubernetes etcd coredns
#                                      volcano kube-router minio mc kwok prometheus; groups:
#                                      pulumi-tools (the first three), cluster (the others)
#
# Environment:
#   ELASTICCTR_TOOLS_DIR   cache root (default ${ELASTICCTR_CACHE:-~/.cache/elasticctr}/tools); each tool
#                          lands in <root>/<tool>-<version>/bin
#   ELASTICCTR_BUILD_JOBS  go build -p (default: number of cores, at most 2)
#   ELASTICCTR_TOOLS_FORCE=1  build the Pulumi pieces even if `pulumi` is on PATH
#   GO                     the go command (default: go on PATH, else /usr/local/go/bin/go)
set -euo pipefail

# ---- pinned versions: the only place they are written (the wrapper go.mod files
# ---- must agree; the script checks it before building) ----------------------
PULUMI_VERSION=3.259.0                 # github.com/pulumi/pulumi/pkg/v3 (the CLI)
# The language host module is never tagged; the proxy here serves only the
# pseudo-version of the v3.184.0 release commit.
PULUMI_LANGUAGE_PYTHON_VERSION=3.184.0
PULUMI_LANGUAGE_PYTHON_MODVERSION=v3.0.0-20250718110245-a8f88047ab64
# The provider module is never tagged; the proxy serves only the v4.25.0 commit.
PULUMI_KUBERNETES_VERSION=4.25.0
PULUMI_KUBERNETES_MODVERSION=v4.0.0-20260115033456-f47bc2d6f199
KUBERNETES_VERSION=1.36.3              # k8s.io/kubernetes; staging modules v0.36.3
ETCD_VERSION=3.6.10                    # go.etcd.io/etcd/server/v3
COREDNS_VERSION=1.14.2                 # github.com/coredns/coredns
COREDNS_COMMIT=dd1df4f5db93767a44e37638df44969503b320d2
VOLCANO_VERSION=1.15.0                 # volcano.sh/volcano
VOLCANO_COMMIT=8fc394c11e8db0d0ada5c17816b58bced9d7213d
# Volcano builds its API module from its own tree (staging/src/volcano.sh/apis),
# which the module zip lacks; the proxy serves volcano.sh/apis only up to v1.14.0,
# which lacks one constant v1.15.0 uses: build_volcano adds it (see there).
VOLCANO_APIS_VERSION=1.14.0
KUBE_ROUTER_VERSION=2.1.0              # github.com/cloudnativelabs/kube-router/v2
# MinIO tags no Go module versions; the proxy serves one pseudo-version of each.
# The names are upstream's for a build of a commit after a release (`make
# hotfix-vars`): <last release tag>.hotfix.<short commit>.
MINIO_MODVERSION=v0.0.0-20260212201848-7aac2a2c5b7c    # github.com/minio/minio
MINIO_COMMIT=7aac2a2c5b7c882e68c1ce017d8256be2feea27f  # RELEASE.2025-10-15T17-29-55Z + 11 commits
MINIO_VERSION=RELEASE.2025-10-15T17-29-55Z.hotfix.7aac2a2c5
MC_MODVERSION=v0.0.0-20250313080218-cf909e1063a9       # github.com/minio/mc
MC_COMMIT=cf909e1063a9a0aea7926378b0c416ed0eea7742     # RELEASE.2025-03-12T17-29-24Z + 1 commit
MC_VERSION=RELEASE.2025-03-12T17-29-24Z.hotfix.cf909e10
KWOK_VERSION=0.8.0                     # sigs.k8s.io/kwok
# Prometheus's Go module versions are v0.<major*100+minor>.<patch>: v0.316.0 is 3.16.0.
PROMETHEUS_VERSION=3.16.0              # github.com/prometheus/prometheus v0.316.0
MIN_GO_VERSION=1.26.0                  # the kubernetes wrapper needs go >= 1.26.0
# Hashes (go.sum's h1:) of the modules built without a wrapper; checked on every
# build, so a changed zip on the proxy stops the build (kube-router's is not in
# the checksum database at all; docs/tooling.md says how these were checked).
declare -A MODULE_SUM=(
  [github.com/coredns/coredns@v1.14.2]=h1:L6ECLwm4Fjg7NJamtGBFDBjk/uqvCJjfgAEhrxh5zJo=
  [volcano.sh/volcano@v1.15.0]=h1:dW8hW/FPDqwcJ1GxGfpR/9qToH1t3+ySn+oaiEMfpm4=
  [volcano.sh/apis@v1.14.0]=h1:Rf8wzGFmgzbyg85GO0CxapDDEk/VM3D7QbjbI/sH+OQ=
  [github.com/cloudnativelabs/kube-router/v2@v2.1.0]=h1:xWsptKtmZ44L+NjwFKoFAFlVdxCz8fka9A/eYJe95Ok=
  [github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c]=h1:/qdoYujxF5MBLDMVLeiYJ/7fBa1HikX39Dvzb9Ji8pA=
  [github.com/minio/mc@v0.0.0-20250313080218-cf909e1063a9]=h1:6RyInOHKL6jz8zxcAar/h6rg/aJCxDP/uFuSNvYSuMI=
  [sigs.k8s.io/kwok@v0.8.0]=h1:OTIOTwgROqPMovcTwxICx2eYQ4AwLpSx5EpjbDKF4SQ=
  [github.com/prometheus/prometheus@v0.316.0]=h1:f1GRFerhTMKQma+awCoC9T820ecWeGSdF+xAlMHzZzM=
)
# -----------------------------------------------------------------------------

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GOTOOLS="$ROOT/tools/gotools"
TOOLS_DIR="${ELASTICCTR_TOOLS_DIR:-${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/tools}"
PULUMI_TOOLS=(pulumi pulumi-language-python pulumi-resource-kubernetes)
CLUSTER_TOOLS=(kubernetes etcd coredns volcano kube-router minio mc kwok prometheus)
ALL_TOOLS=("${PULUMI_TOOLS[@]}" "${CLUSTER_TOOLS[@]}")

log() { printf '[build-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

tool_version() {
  case "$1" in
    pulumi) echo "$PULUMI_VERSION" ;;
    pulumi-language-python) echo "$PULUMI_LANGUAGE_PYTHON_VERSION" ;;
    pulumi-resource-kubernetes) echo "$PULUMI_KUBERNETES_VERSION" ;;
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;;
    volcano) echo "$VOLCANO_VERSION" ;;
    kube-router) echo "$KUBE_ROUTER_VERSION" ;;
    minio) echo "$MINIO_VERSION" ;;
    mc) echo "$MC_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    prometheus) echo "$PROMETHEUS_VERSION" ;;
    *) die "unknown tool: $1 (known: ${ALL_TOOLS[*]})" ;;
  esac
}
tool_bin_dir() { echo "$TOOLS_DIR/$1-$(tool_version "$1")/bin"; }

# The binaries each tool installs (the first one is probed for its version).
tool_binaries() {
  case "$1" in
    pulumi) echo pulumi ;;
    pulumi-language-python) echo pulumi-language-python pulumi-language-python-exec pulumi-resource-pulumi-python ;;
    pulumi-resource-kubernetes) echo pulumi-resource-kubernetes ;;
    kubernetes) echo kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl ;;
    etcd) echo etcd ;;
    coredns) echo coredns ;;
    volcano) echo vc-scheduler vc-controller-manager vc-webhook-manager ;;
    kube-router) echo kube-router ;;
    minio) echo minio ;;
    mc) echo mc ;;
    kwok) echo kwok ;;
    prometheus) echo prometheus promtool ;;
  esac
}

# Prints what the installed binary says its version is ("" if it cannot say).
installed_version() {
  local tool=$1 dir; dir=$(tool_bin_dir "$1")
  case "$tool" in
    pulumi) PULUMI_SKIP_UPDATE_CHECK=1 "$dir/pulumi" version 2>/dev/null | tr -d 'v' ;;
    kubernetes) "$dir/kube-apiserver" --version 2>/dev/null | sed -n 's/^Kubernetes v//p' ;;
    etcd) "$dir/etcd" --version 2>/dev/null | sed -n 's/^etcd Version: //p' ;;
    coredns) "$dir/coredns" -version 2>/dev/null | sed -n 's/^CoreDNS-//p' ;;
    volcano) "$dir/vc-scheduler" --version 2>/dev/null | sed -n 's/^Version: v//p' ;;
    # kube-router prints its version to stderr.
    kube-router) "$dir/kube-router" --version 2>&1 | sed -n 's/.* version v\([^,]*\),.*/\1/p' ;;
    minio) "$dir/minio" --version 2>/dev/null | sed -n 's/^minio version \([^ ]*\).*/\1/p' ;;
    mc) "$dir/mc" --version 2>/dev/null | sed -n 's/^mc version \([^ ]*\).*/\1/p' ;;
    prometheus) "$dir/prometheus" --version 2>/dev/null | sed -n 's/^prometheus, version \([^ ]*\).*/\1/p' ;;
    # These two have no --version flag: the build writes a stamp instead.
    *) sed -n 's/^version=//p' "$dir/../BUILD-INFO" 2>/dev/null ;;
  esac
}

is_built() {
  local tool=$1 dir b; dir=$(tool_bin_dir "$tool")
  for b in $(tool_binaries "$tool"); do [[ -x "$dir/$b" ]] || return 1; done
  [[ "$(installed_version "$tool")" == "$(tool_version "$tool")" ]] || return 1
  [[ $tool != volcano || -f "$(volcano_chart_dir)/Chart.yaml" ]] || return 1
  # The stamp also records the wrapper's go.sum: a changed wrapper means a rebuild.
  [[ "$(sed -n 's/^gosum=//p' "$dir/../BUILD-INFO" 2>/dev/null)" == "$(gosum_hash "$tool")" ]]
}

# Hash of what a tool is built from: its wrapper's go.sum, or, for a tool built
# as its own main module, the pinned hashes of its modules (go.sum inside them).
gosum_hash() {
  if [[ -f "$GOTOOLS/$1/go.sum" ]]; then sha256sum "$GOTOOLS/$1/go.sum" | cut -c1-16; return; fi
  local m
  for m in $(tool_modules "$1"); do echo "$m ${MODULE_SUM[$m]}"; done | sha256sum | cut -c1-16
}

# The module@version each wrapperless tool is built from (keys of MODULE_SUM).
tool_modules() {
  case "$1" in
    coredns) echo "github.com/coredns/coredns@v$COREDNS_VERSION" ;;
    volcano) echo "volcano.sh/volcano@v$VOLCANO_VERSION volcano.sh/apis@v$VOLCANO_APIS_VERSION" ;;
    kube-router) echo "github.com/cloudnativelabs/kube-router/v2@v$KUBE_ROUTER_VERSION" ;;
    minio) echo "github.com/minio/minio@$MINIO_MODVERSION" ;;
    mc) echo "github.com/minio/mc@$MC_MODVERSION" ;;
    kwok) echo "sigs.k8s.io/kwok@v$KWOK_VERSION" ;;
    prometheus) echo "github.com/prometheus/prometheus@$(prometheus_modversion)" ;;
  esac
}

# The Pulumi program installs Volcano from this copy of the chart in its module.
volcano_chart_dir() { echo "$TOOLS_DIR/volcano-$VOLCANO_VERSION/chart/volcano"; }

print_path() {
  local t dirs=()
  for t in "${ALL_TOOLS[@]}"; do dirs+=("$(tool_bin_dir "$t")"); done
  (IFS=:; echo "${dirs[*]}")
}

# ---- go ---------------------------------------------------------------------
find_go() {
  GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
  [[ -x "$GO" ]] || die "no go command (install Go >= $MIN_GO_VERSION, e.g. to /usr/local/go)"
  local have; have=$("$GO" env GOVERSION | sed 's/^go//')
  [[ "$(printf '%s\n%s\n' "$MIN_GO_VERSION" "$have" | sort -V | head -1)" == "$MIN_GO_VERSION" ]] \
    || die "go $have is too old: need >= $MIN_GO_VERSION"
  export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0
  # The proxy's checksum database has no entry for these (pseudo-)versions; the
  # committed go.sum of each wrapper pins their hashes, so the database is not
  # needed for them (docs/tooling.md says how the zips were checked against git).
  # kube-router v2.1.0 is missing there too: MODULE_SUM pins its hash instead.
  export GONOSUMDB="github.com/pulumi/pulumi,github.com/pulumi/pulumi-kubernetes/provider,github.com/pulumi/cloud-ready-checks,github.com/cloudnativelabs/kube-router${GONOSUMDB:+,$GONOSUMDB}"
  JOBS="${ELASTICCTR_BUILD_JOBS:-$(( $(nproc) < 2 ? $(nproc) : 2 ))}"
}

# Asserts that the wrapper go.mod selects the pinned version of a module.
check_pin() {
  local tool=$1 module=$2 want=$3 got
  got=$(cd "$GOTOOLS/$tool" && "$GO" list -m -f '{{.Version}}' "$module")
  [[ "$got" == "$want" ]] || die "tools/gotools/$tool/go.mod has $module $got, the script pins $want"
}

gobuild() { # gobuild TOOL OUT PKG [go build flags...]
  local tool=$1 out=$2 pkg=$3; shift 3
  gobuild_in "$GOTOOLS/$tool" -o "$out" "$@" "$pkg"
}
gobuild_in() { # gobuild_in DIR [go build flags and packages...]
  local dir=$1; shift
  (cd "$dir" && nice -n 10 "$GO" build -p "$JOBS" -trimpath "$@")
}

# Copies MODULE@VERSION (downloaded to the module cache if needed) to a writable
# directory DEST and checks its hash against MODULE_SUM. Tools without a wrapper
# build there as the main module, with the module's own go.sum checking every
# dependency; the copy also lets the script patch it (the module cache is read-only).
stage_module() { # stage_module MODULE@VERSION DEST
  local mv=$1 dest=$2 json dir sum
  [[ -n "${MODULE_SUM[$mv]:-}" ]] || die "no pinned hash for $mv in MODULE_SUM"
  json=$(cd "$STAGE_WORK" && "$GO" mod download -json "$mv") || die "cannot download $mv: $json"
  dir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")
  sum=$(sed -n 's/^\t"Sum": "\(.*\)",$/\1/p' <<<"$json")
  [[ "$sum" == "${MODULE_SUM[$mv]}" ]] || die "$mv: the module's hash is $sum, the script pins ${MODULE_SUM[$mv]}"
  mkdir -p "$(dirname "$dest")"
  cp -R "$dir" "$dest"; chmod -R u+w "$dest"
}

# The version variables of MinIO's buildscripts/gen-ldflags.go as `make
# hotfix-vars` sets them: the version is the time of the release the commit
# follows, the tag <release>.hotfix.<short commit>.
minio_ldflags() { # minio_ldflags GO-PACKAGE RELEASE-TAG FULL-COMMIT
  local pkg=$1 tag=$2 commit=$3 t
  t=${tag#RELEASE.}; t=${t%%.hotfix.*}        # 2025-10-15T17-29-55Z
  t="${t:0:10}T${t:11:2}:${t:14:2}:${t:17:2}Z"  # 2025-10-15T17:29:55Z
  echo "-s -w -X $pkg.Version=$t -X $pkg.CopyrightYear=${t:0:4} -X $pkg.ReleaseTag=$tag" \
       "-X $pkg.CommitID=$commit -X $pkg.ShortCommitID=${commit:0:12}"
}

build_date() { date -u ${SOURCE_DATE_EPOCH:+--date=@$SOURCE_DATE_EPOCH} "$@"; }

# ---- one function per tool: build into $1 (a staging bin dir) ---------------
build_pulumi() {
  check_pin pulumi github.com/pulumi/pulumi/pkg/v3 "v$PULUMI_VERSION"
  check_pin pulumi github.com/pulumi/pulumi/sdk/v3 "v$PULUMI_VERSION"
  # Tags and flags as in upstream's release build (.goreleaser.yml).
  gobuild pulumi "$1/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
    -tags osusergo,grpcnotrace \
    -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION"
}

build_pulumi-language-python() {
  local mod=github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3 sdkdir
  check_pin pulumi-language-python "$mod" "$PULUMI_LANGUAGE_PYTHON_MODVERSION"
  check_pin pulumi-language-python github.com/pulumi/pulumi/sdk/v3 "v$PULUMI_LANGUAGE_PYTHON_VERSION"
  check_pin pulumi-language-python github.com/pulumi/pulumi/pkg/v3 "v$PULUMI_LANGUAGE_PYTHON_VERSION"
  gobuild pulumi-language-python "$1/pulumi-language-python" "$mod" \
    -tags osusergo,grpcnotrace \
    -ldflags "-w -s -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_LANGUAGE_PYTHON_VERSION"
  # The host runs programs through this Python shim, looked up next to its own
  # executable; it ships in the sdk module of the same release.
  sdkdir=$(cd "$GOTOOLS/pulumi-language-python" && "$GO" mod download -json github.com/pulumi/pulumi/sdk/v3 \
           | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -f "$sdkdir/python/cmd/pulumi-language-python-exec" ]] || die "no pulumi-language-python-exec in $sdkdir"
  install -m 0755 "$sdkdir/python/cmd/pulumi-language-python-exec" "$1/pulumi-language-python-exec"
  # The provider of dynamic resources (pulumi.dynamic: generated credentials, Baidu's
  # CCE): a shim the official CLI ships beside the host; offline it comes from here.
  [[ -f "$sdkdir/python/dist/pulumi-resource-pulumi-python" ]] || die "no dynamic-provider shim in $sdkdir"
  install -m 0755 "$sdkdir/python/dist/pulumi-resource-pulumi-python" "$1/pulumi-resource-pulumi-python"
}

build_pulumi-resource-kubernetes() {
  local mod=github.com/pulumi/pulumi-kubernetes/provider/v4 moddir src modfile
  check_pin pulumi-resource-kubernetes "$mod" "$PULUMI_KUBERNETES_MODVERSION"
  check_pin pulumi-resource-kubernetes github.com/pulumi/pulumi-kubernetes/sdk/v4 "v$PULUMI_KUBERNETES_VERSION"
  moddir=$(cd "$GOTOOLS/pulumi-resource-kubernetes" && "$GO" mod download -json "$mod" \
           | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  # The provider go:embeds cmd/pulumi-resource-kubernetes/schema-embed.json and
  # terraform-mapping-embed.json, which upstream makes with `go generate`
  # (generate.go, `//go:build ignore`) and which the module zip lacks. The go
  # command allows no overlay inside the module cache, so: copy the module,
  # run its own generator in the copy, and build with a copy of the wrapper's
  # go.mod that replaces the module with that directory (the go.sum is the same).
  src="$STAGE_WORK/provider"
  cp -R "$moddir" "$src"; chmod -R u+w "$src"
  gobuild pulumi-resource-kubernetes "$STAGE_WORK/generate" "$moddir/cmd/pulumi-resource-kubernetes/generate.go"
  (cd "$src/cmd/pulumi-resource-kubernetes" && VERSION="$PULUMI_KUBERNETES_VERSION" "$STAGE_WORK/generate")
  mkdir -p "$STAGE_WORK/mod"; modfile="$STAGE_WORK/mod/go.mod"
  cp "$GOTOOLS/pulumi-resource-kubernetes/go.mod" "$modfile"
  cp "$GOTOOLS/pulumi-resource-kubernetes/go.sum" "$STAGE_WORK/mod/go.sum"
  "$GO" mod edit -replace="$mod=$src" "$modfile"
  gobuild pulumi-resource-kubernetes "$1/pulumi-resource-kubernetes" "$mod/cmd/pulumi-resource-kubernetes" \
    -modfile "$modfile" \
    -ldflags "-w -s -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_VERSION"
}

build_kubernetes() {
  local v=$KUBERNETES_VERSION major minor ldflags="" kv key val c pkgs
  check_pin kubernetes k8s.io/kubernetes "v$v"
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  # The version variables upstream's hack/lib/version.sh sets.
  for kv in "gitVersion=v$v" "gitMajor=$major" "gitMinor=$minor" "gitTreeState=clean" \
            "buildDate=$(build_date +%Y-%m-%dT%H:%M:%SZ)"; do
    key=${kv%%=*}; val=${kv#*=}
    ldflags+=" -X k8s.io/client-go/pkg/version.$key=$val -X k8s.io/component-base/version.$key=$val"
  done
  # One go build for all six (-o DIR/ names each binary after its package):
  # the packages are loaded once and the links run in parallel (docs/tooling.md).
  pkgs=()
  for c in $(tool_binaries kubernetes); do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  gobuild_in "$GOTOOLS/kubernetes" -o "$1/" -ldflags "-w -s$ldflags" "${pkgs[@]}"
}

build_etcd() {
  check_pin etcd go.etcd.io/etcd/server/v3 "v$ETCD_VERSION"
  gobuild etcd "$1/etcd" go.etcd.io/etcd/server/v3 -ldflags "-w -s"
}

build_coredns() {
  local src="$STAGE_WORK/coredns"
  stage_module "github.com/coredns/coredns@v$COREDNS_VERSION" "$src"
  # The default plugin set (plugin.cfg, generated into core/plugin/zplugin.go in
  # the module); tags and flags as upstream's Makefile.
  gobuild_in "$src" -o "$1/coredns" -tags grpcnotrace \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=${COREDNS_COMMIT:0:7}" .
}

build_volcano() {
  local src="$STAGE_WORK/volcano" apis labels c
  stage_module "volcano.sh/volcano@v$VOLCANO_VERSION" "$src"
  # Upstream's go.mod replaces volcano.sh/apis with ./staging/src/volcano.sh/apis,
  # a nested module the zip leaves out: put the proxy's newest apis there.
  apis="$src/staging/src/volcano.sh/apis"
  stage_module "volcano.sh/apis@v$VOLCANO_APIS_VERSION" "$apis"
  # v1.15.0 uses schedulingv1beta1.QueueAllocationGateKey, added to the apis after
  # v1.14.0. Its value, from volcano's docs/design/scheduling-gates-queue-admission.md
  # and the user guide (scheduling.volcano.sh/queue-allocation-gate):
  labels="$apis/pkg/apis/scheduling/v1beta1/labels.go"
  ! grep -q QueueAllocationGateKey "$labels" || die "volcano.sh/apis v$VOLCANO_APIS_VERSION has QueueAllocationGateKey: drop the patch"
  printf '\n// QueueAllocationGateKey is the scheduling gate (and the pod annotation\n// asking for it) of queue allocation (added by elasticctr build-tools.sh).\nconst QueueAllocationGateKey = GroupName + "/queue-allocation-gate"\n' >> "$labels"
  # Upstream's Makefile.def LD_FLAGS; CGO off as in its default build (no plugins).
  gobuild_in "$src" -o "$STAGE_WORK/vc/" -ldflags "-w -s \
    -X 'volcano.sh/volcano/pkg/version.GitSHA=$VOLCANO_COMMIT' \
    -X 'volcano.sh/volcano/pkg/version.Built=$(build_date '+%Y-%m-%d %H:%M:%S')' \
    -X 'volcano.sh/volcano/pkg/version.Version=v$VOLCANO_VERSION'" \
    ./cmd/scheduler ./cmd/controller-manager ./cmd/webhook-manager
  for c in scheduler controller-manager webhook-manager; do mv "$STAGE_WORK/vc/$c" "$1/vc-$c"; done
  # The chart the Pulumi program installs (--print-volcano-chart), CRDs included.
  mkdir -p "$1/../chart"
  cp -R "$src/installer/helm/chart/volcano" "$1/../chart/volcano"
}

build_kwok() {
  # Built as its own main module (its go.sum pins every dependency); the version is a
  # constant in its source, not a link flag.
  stage_module "sigs.k8s.io/kwok@v$KWOK_VERSION" "$STAGE_WORK/kwok"
  gobuild_in "$STAGE_WORK/kwok" -o "$1/kwok" -ldflags "-w -s" ./cmd/kwok
}

prometheus_modversion() {
  local major=${PROMETHEUS_VERSION%%.*} rest=${PROMETHEUS_VERSION#*.}
  echo "v0.$(( major * 100 + ${rest%%.*} )).${rest#*.}"
}

build_prometheus() {
  local src="$STAGE_WORK/prometheus" pkg=github.com/prometheus/common/version
  stage_module "github.com/prometheus/prometheus@$(prometheus_modversion)" "$src"
  # The module's go.work names directories its zip lacks; its go.sum pins every dependency.
  rm -f "$src/go.work" "$src/go.work.sum"
  # Upstream's tags (.promu.yml) but `builtinassets`: the web UI's assets are built with
  # npm, so this Prometheus serves its HTTP API and no UI. Only the Kubernetes and
  # file/HTTP service discoveries are compiled in (the stack scrapes pods).
  GOWORK=off gobuild_in "$src" -o "$1/" -tags netgo,remove_all_sd,enable_kubernetes_sd \
    -ldflags "-w -s -X $pkg.Version=$PROMETHEUS_VERSION -X $pkg.Revision=$(prometheus_modversion) -X $pkg.Branch=HEAD -X $pkg.BuildDate=$(build_date +%Y%m%d-%H:%M:%S)" \
    ./cmd/prometheus ./cmd/promtool
}

build_kube-router() {
  local src="$STAGE_WORK/kube-router" pkg=github.com/cloudnativelabs/kube-router/v2/pkg/version
  # `go install ...@v2.1.0` fails here (the checksum database has no entry for
  # it); its own go.sum pins every dependency, so build it as the main module.
  stage_module "github.com/cloudnativelabs/kube-router/v2@v$KUBE_ROUTER_VERSION" "$src"
  gobuild_in "$src" -o "$1/kube-router" \
    -ldflags "-w -s -X $pkg.Version=v$KUBE_ROUTER_VERSION -X $pkg.BuildDate=$(build_date +%Y-%m-%dT%H:%M:%S%z)" \
    ./cmd/kube-router
}

build_minio() {
  local src="$STAGE_WORK/minio"
  [[ $MINIO_MODVERSION == *-"${MINIO_COMMIT:0:12}" ]] || die "MINIO_COMMIT does not match MINIO_MODVERSION"
  stage_module "github.com/minio/minio@$MINIO_MODVERSION" "$src"
  # Tags and flags as upstream's Makefile (`make build`).
  gobuild_in "$src" -o "$1/minio" -tags kqueue \
    -ldflags "$(minio_ldflags github.com/minio/minio/cmd "$MINIO_VERSION" "$MINIO_COMMIT")" .
}

build_mc() {
  local src="$STAGE_WORK/mc"
  [[ $MC_MODVERSION == *-"${MC_COMMIT:0:12}" ]] || die "MC_COMMIT does not match MC_MODVERSION"
  stage_module "github.com/minio/mc@$MC_MODVERSION" "$src"
  gobuild_in "$src" -o "$1/mc" -tags kqueue \
    -ldflags "$(minio_ldflags github.com/minio/mc/cmd "$MC_VERSION" "$MC_COMMIT")" .
}

# ---- driver -----------------------------------------------------------------
ensure_tool() {
  local tool=$1 version dir stage start secs
  version=$(tool_version "$tool"); dir=$(tool_bin_dir "$tool")
  if is_built "$tool"; then
    log "$tool $version: cached in ${dir%/bin}"
    echo "$(date -u +%FT%TZ) $tool $version cached 0s" >> "$TOOLS_DIR/build-times.log"
    return
  fi
  log "$tool $version: building (go build -p $JOBS) ..."
  start=$(date +%s)
  stage="${dir%/bin}.tmp.$$"
  mkdir -p "$stage/bin"
  STAGE_WORK="$stage/work"; mkdir -p "$STAGE_WORK"
  "build_$tool" "$stage/bin"
  rm -rf "$STAGE_WORK"
  secs=$(( $(date +%s) - start ))
  printf 'tool=%s\nversion=%s\ngosum=%s\ngo=%s\nbuilt=%s\nseconds=%s\n' \
    "$tool" "$version" "$(gosum_hash "$tool")" "$("$GO" env GOVERSION)" "$(date -u +%FT%TZ)" "$secs" \
    > "$stage/BUILD-INFO"
  rm -rf "${dir%/bin}"; mv "$stage" "${dir%/bin}"
  is_built "$tool" || die "$tool $version: built, but the installed binary does not report version $version"
  log "$tool $version: built in ${secs}s -> $dir"
  echo "$(date -u +%FT%TZ) $tool $version built ${secs}s" >> "$TOOLS_DIR/build-times.log"
}

# The CLI takes language hosts that sit next to its own executable as "bundled",
# as in the official distribution; from anywhere else on PATH it warns on every
# run. So link our host into our CLI's bin dir (which --print-path lists first).
link_language_host() {
  local cli host
  cli=$(tool_bin_dir pulumi); host=$(tool_bin_dir pulumi-language-python)
  [[ -x "$cli/pulumi" && -x "$host/pulumi-language-python" ]] || return 0
  ln -sfn "../../$(basename "${host%/bin}")/bin/pulumi-language-python" "$cli/pulumi-language-python"
}

# A pulumi that is on PATH and not ours (the official installer's) wins.
foreign_pulumi() {
  local p; p=$(command -v pulumi 2>/dev/null) || return 1
  [[ "$p" != "$TOOLS_DIR"/* && "${ELASTICCTR_TOOLS_FORCE:-0}" != 1 ]]
}

main() {
  local tools=() t total_start
  case "${1:-}" in
    --print-path) print_path; return ;;
    --print-volcano-chart)
      [[ -f "$(volcano_chart_dir)/Chart.yaml" ]] || { log "Volcano is not built yet: tools/build-tools.sh volcano"; return 1; }
      volcano_chart_dir; return ;;
    --check) for t in "${ALL_TOOLS[@]}"; do is_built "$t" || { echo "$t: not built" >&2; return 1; }; done; return ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; return ;;
    -*) die "unknown option $1" ;;
  esac
  for t in "${@:-all}"; do
    case "$t" in
      all) tools+=("${ALL_TOOLS[@]}") ;;
      pulumi-tools) tools+=("${PULUMI_TOOLS[@]}") ;;
      cluster) tools+=("${CLUSTER_TOOLS[@]}") ;;
      *) tool_version "$t" >/dev/null; tools+=("$t") ;;
    esac
  done
  mkdir -p "$TOOLS_DIR"
  find_go
  # One build at a time per cache dir (a second caller waits, then finds it cached).
  exec 9>"$TOOLS_DIR/.lock"; flock 9
  rm -rf "$TOOLS_DIR"/*.tmp.*  # staging dirs of interrupted builds (we hold the lock)
  total_start=$(date +%s)
  for t in "${tools[@]}"; do
    # The official distribution of the CLI carries its language hosts; the
    # provider is still built (offline, plugins cannot be downloaded).
    if [[ $t == pulumi || $t == pulumi-language-python ]] && foreign_pulumi; then
      log "$t: skipped, pulumi is on PATH at $(command -v pulumi) (ELASTICCTR_TOOLS_FORCE=1 builds it anyway)"
      continue
    fi
    ensure_tool "$t"
  done
  link_language_host
  log "done in $(( $(date +%s) - total_start ))s; tool cache: $(du -sh "$TOOLS_DIR" | cut -f1)"
  echo "export PATH=\"$(print_path):\$PATH\""
}

main "$@"
