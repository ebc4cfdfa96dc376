#!/usr/bin/env bash
# Generates TypeScript types for the Envoy protos Trellis uses into src/api/generated/
# (proto-loader-gen-types, snake_case field names). The output is not committed.
# With --if-stale (`npm run typecheck`, scripts/build.sh) it does nothing when src/api/generated/
# is newer than the proto list, this script and the last npm install (node_modules/.package-lock.json,
# which names the installed grpc-js-xds and proto-loader).
set -euo pipefail
cd "$(dirname "$0")/.."
G=src/api/generated
if [ "${1:-}" = --if-stale ] && [ -d "$G" ] && [ -z "$(find scripts/protos.txt scripts/gen-types.sh node_modules/.package-lock.json -newer "$G" 2>/dev/null)" ]; then
  exit 0
fi
D=node_modules/@grpc/grpc-js-xds/deps
rm -rf "$G"
npx proto-loader-gen-types --keepCase --longs=String --enums=String --oneofs --grpcLib=@grpc/grpc-js --importFileExtension=.js \
  -I "$D/envoy-api" -I "$D/xds" -I "$D/googleapis" -I "$D/protoc-gen-validate" \
  -O "$G" $(grep -v '^#' scripts/protos.txt) >/dev/null
