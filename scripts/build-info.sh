#!/usr/bin/env bash
# Prints dist/build-info.json's content for the checkout this script is in (scripts/build.sh
# writes it; `trellis --version` reads it, so an installed tarball knows the commit it was built
# from): {"commit":"<40 hex>"}, "<40 hex>-dirty" when tracked files differ from that commit,
# "unknown" when the directory above scripts/ is not the top of a git checkout (a tarball or a
# copy of the sources) or git is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
commit=unknown
if command -v git >/dev/null 2>&1 &&
  top=$(git -C "$root" rev-parse --show-toplevel 2>/dev/null) && [ "$(cd "$top" && pwd -P)" = "$root" ] &&
  head=$(git -C "$root" rev-parse --verify --quiet HEAD 2>/dev/null); then
  commit=$head
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit-dirty"; fi
fi
printf '{"commit":"%s"}\n' "$commit"
