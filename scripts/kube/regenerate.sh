#!/usr/bin/env bash
# Rewrites scripts/kube/apiserver/go.mod and go.sum for another Kubernetes release, from that
# release's own go.mod on the Go module proxy: require k8s.io/kubernetes VERSION, and replace each
# k8s.io/<staging> module it points at ./staging/src with the published v0.Y.Z release of it.
# `go mod tidy` then pins the rest, etcd's server included (the release kube-apiserver links).
# Review the diff, then run scripts/kube/install.sh (which rebuilds: its stamp changes).
#
# Usage: scripts/kube/regenerate.sh VERSION   (e.g. v1.34.4)
set -euo pipefail

version=${1:-}
case "$version" in
  v1.[0-9]*.[0-9]*) ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
  *) echo "regenerate.sh: give a k8s.io/kubernetes version such as v1.34.4 (try --help)" >&2; exit 2 ;;
esac
module=$(cd "$(dirname "$0")" && pwd)/apiserver
staging=v0.${version#v1.}

upstream=$(cd "$module" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
[ -f "$upstream" ] || { echo "regenerate.sh: the module proxy has no go.mod for k8s.io/kubernetes@$version" >&2; exit 1; }
go_line=$(grep -m1 '^go ' "$upstream")
godebug_line=$(grep -m1 '^godebug ' "$upstream" || true)
replaces=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$upstream")
[ -n "$replaces" ] || { echo "regenerate.sh: $upstream names no ./staging replacements" >&2; exit 1; }

{
  echo "// Wrapper module that builds k8s.io/kubernetes/cmd/kube-apiserver (and etcd) from the Go module"
  echo "// proxy: k8s.io/kubernetes points its staging modules at ./staging (replace directives that only"
  echo "// apply inside its own repository), so this module replaces each one with its published release."
  echo "// Written by scripts/kube/regenerate.sh $version; see scripts/kube/README.md."
  echo "module trellis.local/kube-apiserver"
  echo
  echo "$go_line"
  if [ -n "$godebug_line" ]; then echo; echo "$godebug_line"; fi
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  printf '%s\n' "$replaces"
  echo ")"
} >"$module/go.mod"
rm -f "$module/go.sum"
(cd "$module" && nice -n 19 go mod tidy)
echo "regenerate.sh: $module/go.mod now builds kube-apiserver $version ($(grep -c ' => ' "$module/go.mod") staging modules at $staging) and etcd $(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 \(v[0-9.]*\)$/\1/p' "$module/go.mod")"
