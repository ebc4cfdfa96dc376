#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3/cmd/helm, the version below) from the Go module proxy into
# <repo>/.cache/go-bin/helm, for test/helm-chart.test.ts (helm lint, helm template); .ci/run
# runs it. A no-op when that version is installed there (`go version -m` says which module
# version a binary was built from). About 3-5 min of two cores the first time; Go's own module
# and build caches (GOMODCACHE, GOCACHE) keep what it downloads and compiles. Needs Go >= 1.24.
set -euo pipefail
HELM_VERSION=v3.22.0
repo=$(cd "$(dirname "$0")/.." && pwd)
bin="$repo/.cache/go-bin"
if [ -x "$bin/helm" ] && go version -m "$bin/helm" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+helm\.sh/helm/v3[[:space:]]+$HELM_VERSION([[:space:]]|$)"; then
  echo "helm-install.sh: helm $HELM_VERSION already in $bin: nothing to do"
  exit 0
fi
command -v go >/dev/null 2>&1 || { echo "helm-install.sh: Go is not installed: building helm $HELM_VERSION needs Go >= 1.24" >&2; exit 1; }
mkdir -p "$bin"
echo "helm-install.sh: building helm $HELM_VERSION with $(go env GOVERSION) into $bin"
start=$(date +%s)
GOBIN="$bin" GOFLAGS="${GOFLAGS:-} -buildvcs=false" GOTOOLCHAIN=${GOTOOLCHAIN:-local} nice -n 19 go install -trimpath "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
echo "helm-install.sh: installed $("$bin/helm" version --short) in $bin ($(($(date +%s) - start)) s)"
