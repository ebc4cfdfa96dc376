#!/usr/bin/env bash
# Runs every *.test.ts under src/ and test/ with Node's test runner (Node 20 has no glob support in --test).
# The tests import the sources through tsx; those that start bin/trellis.js run dist/, so it is
# built first (bin/trellis.js refuses a dist/ older than the sources).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
mapfile -t files < <(find src test -name '*.test.ts' -not -path '*/generated/*' | sort)
exec node --import tsx --test --test-reporter=spec "${files[@]}"
