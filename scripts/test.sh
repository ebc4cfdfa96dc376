#!/usr/bin/env bash
# Runs every *.test.ts under src/ and test/ with Node's test runner (Node 20 has no glob support in --test).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(find src test -name '*.test.ts' -not -path '*/generated/*' | sort)
exec node --import tsx --test --test-reporter=spec "${files[@]}"
