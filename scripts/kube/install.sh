#!/usr/bin/env bash
# Builds a real kube-apiserver and etcd from the Go module proxy into <repo>/.cache/kube/bin/
# (or $TRELLIS_KUBE_DIR/bin), for tests and CI that need a real Kubernetes API server.
#
# Usage: scripts/kube/install.sh [--check] [--force]
#   --check   build nothing: exit 0 when both binaries are installed and up to date, else 1
#   --force   rebuild even when the installed binaries are up to date
#
# The versions are those pinned by scripts/kube/apiserver/go.mod (k8s.io/kubernetes, and the
# go.etcd.io/etcd/server/v3 release that kube-apiserver itself links). k8s.io/kubernetes cannot
# be `go install`ed (its go.mod replaces the k8s.io/* staging modules with ./staging paths), so
# that wrapper module replaces each staging module with its published v0.Y.Z release.
# Idempotent: a stamp (versions, a digest of go.mod, go.sum and the link flags, Go version) says whether to rebuild.
# Builds run under `nice -n 19`; TRELLIS_KUBE_BUILD_P sets `go build -p` (default: Go's, the
# number of CPUs). The Go module and build caches are Go's own (GOMODCACHE, GOCACHE): set them
# to keep the build elsewhere. Build time, disk and memory: scripts/kube/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dest=${TRELLIS_KUBE_DIR:-$repo/.cache/kube}
module="$here/apiserver"

check=false
force=false
for arg in "$@"; do
  case "$arg" in
    --check) check=true ;;
    --force) force=true ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "install.sh: $*" >&2; exit 1; }

# Versions pinned by the wrapper module.
k8s_version=$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes \(v[0-9.]*\)$/\1/p' "$module/go.mod" | head -1)
etcd_version=$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 \(v[0-9.]*\)$/\1/p' "$module/go.mod" | head -1)
[ -n "$k8s_version" ] || fail "no k8s.io/kubernetes version in $module/go.mod"
[ -n "$etcd_version" ] || fail "no go.etcd.io/etcd/server/v3 version in $module/go.mod"
go_min=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$module/go.mod")

# What is needed: Go (new enough for the module), and openssl for start.sh's certificates.
command -v go >/dev/null 2>&1 ||
  fail "Go is not installed: building kube-apiserver $k8s_version needs Go >= $go_min (Debian's golang-go, 1.19, is too old and cannot fetch a newer toolchain; a Go >= 1.21 can: export GOTOOLCHAIN=go$go_min)"
go_version=$(go env GOVERSION)
if [ "$(printf '%s\n%s\n' "go$go_min" "$go_version" | sort -V | head -1)" != "go$go_min" ]; then
  fail "Go $go_version is older than go$go_min, which kube-apiserver $k8s_version needs (a Go >= 1.21 fetches a newer one from the module proxy: export GOTOOLCHAIN=go$go_min)"
fi
command -v openssl >/dev/null 2>&1 || echo "install.sh: warning: openssl is missing: scripts/kube/start.sh needs it (apt-get install openssl)" >&2

# version.gitVersion and friends: what /version reports (kubectl version, client-node's checks).
minor=${k8s_version#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
done
etcd_ldflags="-s -w"

digest=$( (cat "$module/go.mod" "$module/go.sum"; echo "$ldflags $etcd_ldflags") | sha256sum | cut -c1-16)
stamp="kube-apiserver=$k8s_version etcd=$etcd_version module=$digest go=$go_version"
bin="$dest/bin"
up_to_date() {
  [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ] && [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ]
}

if $check; then
  if up_to_date; then echo "install.sh: up to date in $bin ($stamp)"; exit 0; fi
  echo "install.sh: not installed or out of date in $bin (want: $stamp; run scripts/kube/install.sh)" >&2
  exit 1
fi
if up_to_date && ! $force; then
  echo "install.sh: kube-apiserver $k8s_version and etcd $etcd_version already in $bin: nothing to do"
  exit 0
fi

build_flags=(-trimpath)
[ -n "${TRELLIS_KUBE_BUILD_P:-}" ] && build_flags+=("-p=$TRELLIS_KUBE_BUILD_P")
export GOFLAGS="${GOFLAGS:-} -mod=readonly -buildvcs=false"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local}

mkdir -p "$bin"
tmp=$(mktemp -d "$dest/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "install.sh: building kube-apiserver $k8s_version and etcd $etcd_version with $go_version into $bin"
echo "install.sh: module $module; GOMODCACHE=$(go env GOMODCACHE) GOCACHE=$(go env GOCACHE)"
start=$(date +%s)
(cd "$module" && nice -n 19 go build "${build_flags[@]}" -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver) ||
  fail "building kube-apiserver failed (see above: a module the proxy does not serve, or too little memory: try TRELLIS_KUBE_BUILD_P=1)"
mid=$(date +%s)
echo "install.sh: kube-apiserver built in $((mid - start)) s"
(cd "$module" && nice -n 19 go build "${build_flags[@]}" -ldflags "$etcd_ldflags" -o "$tmp/etcd" go.etcd.io/etcd/server/v3) ||
  fail "building etcd failed (see above)"
end=$(date +%s)
echo "install.sh: etcd built in $((end - mid)) s"

"$tmp/kube-apiserver" --version >/dev/null || fail "the built kube-apiserver does not run"
"$tmp/etcd" --version >/dev/null || fail "the built etcd does not run"
mv -f "$tmp/kube-apiserver" "$tmp/etcd" "$bin/"
echo "$stamp" >"$dest/stamp"
echo "install.sh: installed $("$bin/kube-apiserver" --version) and etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p') in $bin ($((end - start)) s; $(du -sh "$bin" | cut -f1) of binaries)"
