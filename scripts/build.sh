#!/usr/bin/env bash
# Compiles src/ into dist/ (`npm run build`; `npm start`, `npm test`, `npm pack` and `npm run bench`
# run it first). Incremental (`tsc -b`): with nothing changed it takes about 0.2 s of CPU.
# - the generated proto types (type-only; scripts/gen-types.sh) are made when missing or stale;
# - the data files the code reads beside itself are copied (src/sources/manifests/schemas/:
#   the CRDs whose openAPIV3Schema the manifests loader validates against; src/debug/page/: the
#   mesh page's HTML, CSS and JavaScript, served as they are);
# - dist/build-info.json records the git commit built (scripts/build-info.sh; `trellis --version`);
# - outputs of a source that no longer exists are removed, so dist/ holds only today's code;
# - dist/.build-stamp (its mtime is when this build started) tells bin/trellis.js that dist/ is
#   not older than the sources it was compiled from.
# A build with nothing to do writes no file a running `trellis` reads, so it may run while tests
# start bin/trellis.js (test/package.test.ts packs, and so builds, during `npm test`); files
# that change are replaced by a rename.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/gen-types.sh --if-stale
mkdir -p dist
stamp=$(mktemp dist/.build-stamp.XXXXXX)
trap 'rm -f "$stamp"' EXIT
node_modules/.bin/tsc -b tsconfig.build.json
for data in sources/manifests/schemas debug/page; do
  (cd src && find "$data" -type f) | while read -r file; do
    if ! cmp -s "src/$file" "dist/$file"; then
      mkdir -p "$(dirname "dist/$file")"
      cp "src/$file" "dist/$file.tmp"
      mv "dist/$file.tmp" "dist/$file"
    fi
  done
  (cd dist && find "$data" -type f) | while read -r file; do
    if [ ! -e "src/$file" ]; then rm -f "dist/$file"; fi
  done
done
info=$(bash scripts/build-info.sh)
if [ "$(cat dist/build-info.json 2>/dev/null)" != "$info" ]; then
  echo "$info" >dist/build-info.json.tmp
  mv dist/build-info.json.tmp dist/build-info.json
fi
find dist -name '*.js' -not -path 'dist/api/generated/*' -not -path 'dist/debug/page/*' | while read -r js; do
  source="src/${js#dist/}"
  if [ ! -e "${source%.js}.ts" ]; then rm -f "$js" "$js.map"; fi
done
chmod 644 "$stamp"
mv "$stamp" dist/.build-stamp
