# Shared by scripts/kube/*.sh (sourced, not run): where the binaries are, and whether a PID is
# one of the servers start.sh started.
# shellcheck shell=bash

kube_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# Where install.sh puts kube-apiserver and etcd.
kube_bin=${TRELLIS_KUBE_DIR:-$kube_repo/.cache/kube}/bin

# kube_alive PID NAME: the PID is alive and runs $kube_bin/NAME (not a zombie, not a reused PID;
# " (deleted)": the binary was replaced by a later install.sh since it started).
kube_alive() {
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$(readlink -f "$kube_bin/$2")" ]
}

# child_running PID: a child this shell started is still running (not exited, not a zombie).
# Unlike kube_alive it holds from the fork on, before the child has exec'd its binary (and
# before its output redirections exist), so a slow exec is not taken for an exit.
child_running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}
