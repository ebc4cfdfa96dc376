#!/usr/bin/env bash
# Stops the kube-apiserver and etcd that scripts/kube/start.sh started in DIR, by the PIDs in its
# pid files (a PID is signalled only while it still runs the binary start.sh started), then
# removes etcd's data. Exits 0 when nothing of ours runs any more.
#
# Usage: scripts/kube/stop.sh [--dir DIR] [--keep]   (default DIR /tmp/trellis-kube)
#   --keep   leave DIR as it is (logs, certificates, etcd data); default: remove etcd-data only
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

dir=/tmp/trellis-kube
keep=false
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --keep) keep=true; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "stop.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
[ -d "$dir" ] || { echo "stop.sh: no $dir: nothing to stop"; exit 0; }

status=0
# The API server first (it would log etcd's absence otherwise), then etcd.
for name in kube-apiserver etcd; do
  pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
  if [ -z "$pid" ]; then continue; fi
  if ! kube_alive "$pid" "$name"; then
    echo "stop.sh: $name (PID $pid) is not running"
    rm -f "$dir/$name.pid"
    continue
  fi
  kill -TERM "$pid"
  for _ in $(seq 100); do kube_alive "$pid" "$name" || break; sleep 0.1; done
  if kube_alive "$pid" "$name"; then
    echo "stop.sh: $name (PID $pid) did not stop within 10 s of SIGTERM: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  if kube_alive "$pid" "$name"; then echo "stop.sh: $name (PID $pid) is still running" >&2; status=1; continue; fi
  echo "stop.sh: stopped $name (PID $pid)"
  rm -f "$dir/$name.pid"
done
if [ "$status" -eq 0 ] && ! $keep; then rm -rf "$dir/etcd-data"; fi
exit "$status"
