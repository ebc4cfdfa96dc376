#!/usr/bin/env bash
# Packs Trellis and installs the packed tarball the way users get it: the steps of the Dockerfile
# and of test/package.test.ts, which both run this script (so the two cannot drift apart).
#
# Usage:
#   scripts/install-tarball.sh pack DEST       npm pack this checkout (prepack builds dist/) into
#                                              DEST; prints the tarball's path
#   scripts/install-tarball.sh install TGZ DIR install TGZ into DIR/node_modules/trellis with its
#                                              runtime dependencies only (DIR gets a private
#                                              package.json); trellis is DIR/node_modules/.bin/trellis
# npm takes what it can from its cache (--prefer-offline), the rest from the registry.
set -euo pipefail
fail() { echo "install-tarball.sh: $*" >&2; exit 2; }
case "${1:-}" in
  pack)
    [ $# -eq 2 ] || fail "usage: install-tarball.sh pack DEST"
    mkdir -p "$2"
    dest=$(cd "$2" && pwd)
    cd "$(dirname "$0")/.."
    # npm pack prints the lifecycle scripts' output too: the tarball's name is its last line.
    name=$(npm pack --pack-destination "$dest" | tail -n 1)
    [ -f "$dest/$name" ] || fail "npm pack wrote no $dest/$name"
    echo "$dest/$name"
    ;;
  install)
    [ $# -eq 3 ] || fail "usage: install-tarball.sh install TGZ DIR"
    tarball=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
    [ -f "$tarball" ] || fail "no tarball $2"
    mkdir -p "$3"
    cd "$3"
    [ -f package.json ] || echo '{"name":"trellis-install","private":true}' >package.json
    npm install --no-audit --no-fund --omit=dev --prefer-offline "$tarball"
    ;;
  *) fail "usage: install-tarball.sh pack DEST | install TGZ DIR" ;;
esac
