#!/usr/bin/env bash
# Offline path to the tools the end-to-end tests need: the Pulumi CLI, the Python
# language host, the Kubernetes resource provider, kube-apiserver (with
# kube-controller-manager and kube-scheduler) and etcd, built from Go modules
# through the wrapper modules in tools/gotools/<tool>/ (see docs/tooling.md).
# Users with internet keep the official Pulumi installer; this is the offline path.
#
# Usage:
#   tools/build-tools.sh               build what is missing, then print `export PATH=...`
#   tools/build-tools.sh --print-path  print the bin directories (colon-separated), build nothing
#   tools/build-tools.sh --check       exit 0 when every tool is built, 1 otherwise
#   tools/build-tools.sh TOOL...       build only these (pulumi pulumi-language-python
#                                      pulumi-resource-kubernetes kubernetes etcd)
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
MIN_GO_VERSION=1.26.0                  # the kubernetes wrapper needs go >= 1.26.0
# -----------------------------------------------------------------------------

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GOTOOLS="$ROOT/tools/gotools"
TOOLS_DIR="${ELASTICCTR_TOOLS_DIR:-${ELASTICCTR_CACHE:-$HOME/.cache/elasticctr}/tools}"
ALL_TOOLS=(pulumi pulumi-language-python pulumi-resource-kubernetes kubernetes etcd)

log() { printf '[build-tools %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

tool_version() {
  case "$1" in
    pulumi) echo "$PULUMI_VERSION" ;;
    pulumi-language-python) echo "$PULUMI_LANGUAGE_PYTHON_VERSION" ;;
    pulumi-resource-kubernetes) echo "$PULUMI_KUBERNETES_VERSION" ;;
    kubernetes) echo "$KUBERNETES_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
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
    kubernetes) echo kube-apiserver kube-controller-manager kube-scheduler ;;
    etcd) echo etcd ;;
  esac
}

# Prints what the installed binary says its version is ("" if it cannot say).
installed_version() {
  local tool=$1 dir; dir=$(tool_bin_dir "$1")
  case "$tool" in
    pulumi) PULUMI_SKIP_UPDATE_CHECK=1 "$dir/pulumi" version 2>/dev/null | tr -d 'v' ;;
    kubernetes) "$dir/kube-apiserver" --version 2>/dev/null | sed -n 's/^Kubernetes v//p' ;;
    etcd) "$dir/etcd" --version 2>/dev/null | sed -n 's/^etcd Version: //p' ;;
    # These two have no --version flag: the build writes a stamp instead.
    *) sed -n 's/^version=//p' "$dir/../BUILD-INFO" 2>/dev/null ;;
  esac
}

is_built() {
  local tool=$1 dir b; dir=$(tool_bin_dir "$tool")
  for b in $(tool_binaries "$tool"); do [[ -x "$dir/$b" ]] || return 1; done
  [[ "$(installed_version "$tool")" == "$(tool_version "$tool")" ]] || return 1
  # The stamp also records the wrapper's go.sum: a changed wrapper means a rebuild.
  [[ "$(sed -n 's/^gosum=//p' "$dir/../BUILD-INFO" 2>/dev/null)" == "$(gosum_hash "$tool")" ]]
}

gosum_hash() { sha256sum "$GOTOOLS/$1/go.sum" | cut -c1-16; }

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
  export GONOSUMDB="github.com/pulumi/pulumi,github.com/pulumi/pulumi-kubernetes/provider,github.com/pulumi/cloud-ready-checks${GONOSUMDB:+,$GONOSUMDB}"
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
  (cd "$GOTOOLS/$tool" && nice -n 10 "$GO" build -p "$JOBS" -trimpath -o "$out" "$@" "$pkg")
}

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
  local v=$KUBERNETES_VERSION major minor ldflags="" kv key val c
  check_pin kubernetes k8s.io/kubernetes "v$v"
  major=${v%%.*}; minor=${v#*.}; minor=${minor%%.*}
  # The version variables upstream's hack/lib/version.sh sets.
  for kv in "gitVersion=v$v" "gitMajor=$major" "gitMinor=$minor" "gitTreeState=clean" \
            "buildDate=$(date -u ${SOURCE_DATE_EPOCH:+--date=@$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)"; do
    key=${kv%%=*}; val=${kv#*=}
    ldflags+=" -X k8s.io/client-go/pkg/version.$key=$val -X k8s.io/component-base/version.$key=$val"
  done
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    log "  $c"
    gobuild kubernetes "$1/$c" "k8s.io/kubernetes/cmd/$c" -ldflags "-w -s$ldflags"
  done
}

build_etcd() {
  check_pin etcd go.etcd.io/etcd/server/v3 "v$ETCD_VERSION"
  gobuild etcd "$1/etcd" go.etcd.io/etcd/server/v3 -ldflags "-w -s"
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
    --check) for t in "${ALL_TOOLS[@]}"; do is_built "$t" || { echo "$t: not built" >&2; return 1; }; done; return ;;
    -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; return ;;
    -*) die "unknown option $1" ;;
  esac
  if (($#)); then tools=("$@"); else tools=("${ALL_TOOLS[@]}"); fi
  for t in "${tools[@]}"; do tool_version "$t" >/dev/null; done
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
