#!/usr/bin/env bash
# Generates TypeScript types for the Envoy protos Trellis uses into src/api/generated/
# (proto-loader-gen-types, snake_case field names). Run by `npm run typecheck`; the output is not committed.
set -euo pipefail
cd "$(dirname "$0")/.."
D=node_modules/@grpc/grpc-js-xds/deps
rm -rf src/api/generated
npx proto-loader-gen-types --keepCase --longs=String --enums=String --oneofs --grpcLib=@grpc/grpc-js --importFileExtension=.js \
  -I "$D/envoy-api" -I "$D/xds" -I "$D/googleapis" -I "$D/protoc-gen-validate" \
  -O src/api/generated $(grep -v '^#' scripts/protos.txt) >/dev/null
