#!/usr/bin/env bash
# Starts a real Kubernetes API server on loopback for tests: etcd and kube-apiserver (from
# scripts/kube/install.sh), with certificates made by openssl, and writes a kubeconfig.
# No controller-manager, scheduler or kubelet: objects are stored, validated, defaulted and sent
# through admission (webhooks included), but nothing acts on them (pods stay Pending).
#
# Usage: scripts/kube/start.sh [--dir DIR] [--port PORT] [--etcd-port PORT] [--timeout SECONDS] [--apiserver-arg ARG]...
#   --dir DIR         state: pki/, etcd-data/, logs, pid files, kubeconfig (default /tmp/trellis-kube)
#   --port PORT       kube-apiserver's secure port on 127.0.0.1 (default 16443)
#   --etcd-port PORT  etcd's client port on 127.0.0.1 (default 12379; its peer port is PORT+1)
#   --timeout S       how long to wait for /readyz (default 120)
#   --apiserver-arg A one more kube-apiserver flag (repeatable), e.g. --apiserver-arg=--watch-cache-sizes=services#0
# Prints `export KUBECONFIG=DIR/kubeconfig` on success; stop with scripts/kube/stop.sh --dir DIR.
# Writes DIR/etcd.pid and DIR/kube-apiserver.pid; on a failure it stops what it started, prints the
# end of the failing log and exits 1. Refuses a DIR where a server it started is still running.
set -euo pipefail

# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
bin=$kube_bin

dir=/tmp/trellis-kube
port=16443
etcd_port=12379
timeout=120
extra_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --etcd-port) etcd_port=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --apiserver-arg) extra_args+=("$2"); shift 2 ;;
    --apiserver-arg=*) extra_args+=("${1#--apiserver-arg=}"); shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "start.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
peer_port=$((etcd_port + 1))

fail() { echo "start.sh: $*" >&2; exit 1; }
[ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ] || fail "no kube-apiserver/etcd in $bin: run scripts/kube/install.sh"
command -v openssl >/dev/null 2>&1 || fail "openssl is missing (apt-get install openssl)"
command -v curl >/dev/null 2>&1 || fail "curl is missing (apt-get install curl)"

ours() { # ours NAME -> the live PID in DIR/NAME.pid, or nothing
  local pid
  pid=$(cat "$dir/$1.pid" 2>/dev/null) || return 0
  [ -n "$pid" ] && kube_alive "$pid" "$1" && echo "$pid"
  return 0
}
for name in etcd kube-apiserver; do
  [ -z "$(ours "$name")" ] || fail "$name from an earlier start is still running in $dir (PID $(ours "$name")): scripts/kube/stop.sh --dir $dir"
done
if (exec 3<>/dev/tcp/127.0.0.1/9) 2>/dev/null; then
  fail "127.0.0.1:9 accepts connections: kube-apiserver's refusing proxy for non-loopback dials must be a closed port"
fi
for p in "$port" "$etcd_port" "$peer_port"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then fail "127.0.0.1:$p is already in use (choose --port/--etcd-port)"; fi
done

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pki=$dir/pki
rm -rf "$dir/etcd-data" "$pki"
mkdir -p "$pki"
t0=$(date +%s.%N)

# Certificates: one CA for serving and client certificates, the serving certificate for
# 127.0.0.1/localhost (and the in-cluster names), the admin's client certificate (group
# system:masters: every permission under RBAC), and the service-account signing key pair.
(
  cd "$pki"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout ca.key -out ca.crt -subj /CN=trellis-test-kube-ca \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  issue() { # issue NAME SUBJECT EXTENSIONS
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    printf '%s\n' "$3" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -out "$1.crt" -extfile "$1.ext" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  issue apiserver /CN=kube-apiserver "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue admin "/O=system:masters/CN=trellis-admin" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
  openssl pkey -in sa.key -pubout -out sa.pub
  # A bearer token for the same admin (curl -H "Authorization: Bearer $(cat admin.token)").
  token=$(openssl rand -hex 16)
  echo "$token" >admin.token
  echo "$token,trellis-admin,trellis-admin,system:masters" >tokens.csv
  chmod 600 ./*.key admin.token tokens.csv
) || fail "openssl could not make the certificates in $pki"

started=()  # PIDs, and their binaries' names in started_names
started_names=()
cleanup_on_error() {
  local i
  for i in "${!started[@]}"; do kill "${started[$i]}" 2>/dev/null || true; done
  for i in "${!started[@]}"; do
    for _ in $(seq 50); do kube_alive "${started[$i]}" "${started_names[$i]}" || break; sleep 0.1; done
    kube_alive "${started[$i]}" "${started_names[$i]}" && kill -9 "${started[$i]}" 2>/dev/null || true
  done
  rm -f "$dir/etcd.pid" "$dir/kube-apiserver.pid"
}
# Interrupted while starting: stop what was started (after a successful start, stop.sh does).
trap 'cleanup_on_error; exit 130' INT TERM
die() { # die MESSAGE LOG
  echo "start.sh: $1; the end of $2:" >&2
  tail -n 25 "$2" >&2 || true
  cleanup_on_error
  exit 1
}

# etcd: one member, loopback only, no fsync (test data), progress notifications every 5 s as
# kube-apiserver's watch cache expects.
"$bin/etcd" --name trellis --data-dir "$dir/etcd-data" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "trellis=http://127.0.0.1:$peer_port" --initial-cluster-state new \
  --unsafe-no-fsync --watch-progress-notify-interval 5s --log-level warn \
  >"$dir/etcd.log" 2>&1 </dev/null &
started+=($!)
started_names+=(etcd)
echo $! >"$dir/etcd.pid"
for _ in $(seq $((timeout * 10))); do
  curl -fsS "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' && break
  child_running "${started[0]}" || die "etcd exited" "$dir/etcd.log"
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$etcd_port/health" 2>/dev/null | grep -q '"health":"true"' || die "etcd not healthy after ${timeout}s" "$dir/etcd.log"
t1=$(date +%s.%N)

# kube-apiserver: loopback only; RBAC (the admin is in system:masters); the default admission
# plugins, which include MutatingAdmissionWebhook and ValidatingAdmissionWebhook (named here so
# that a change of defaults cannot drop them) and ServiceAccount (a pod needs its service account
# to exist: no controller-manager creates `default`); no endpoint reconciler (it would publish
# 127.0.0.1, which Endpoints refuse). The service range is data only: nothing routes to it.
# Loopback only, also for what the API server itself dials: webhooks, aggregated APIs. A webhook
# or APIService that names a Service (`clientConfig.service`) is dialled at NAME.NS.svc, which no
# cluster DNS resolves here and which must never leave the machine: every non-loopback dial goes
# through a proxy at 127.0.0.1:9 that refuses it (Go dials loopback and NO_PROXY directly), so
# such a webhook fails with "proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused".
# Register webhooks by `clientConfig.url: https://127.0.0.1:PORT/...` instead.
HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 NO_PROXY=127.0.0.1,localhost,::1 \
  https_proxy=http://127.0.0.1:9 http_proxy=http://127.0.0.1:9 no_proxy=127.0.0.1,localhost,::1 \
  "$bin/kube-apiserver" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$port" \
  --etcd-servers="http://127.0.0.1:$etcd_port" \
  --cert-dir="$pki" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
  --client-ca-file="$pki/ca.crt" --token-auth-file="$pki/tokens.csv" \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --api-audiences=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 \
  --authorization-mode=RBAC \
  --enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook \
  --endpoint-reconciler-type=none --allow-privileged=true --profiling=false \
  ${extra_args[@]+"${extra_args[@]}"} \
  >"$dir/kube-apiserver.log" 2>&1 </dev/null &
started+=($!)
started_names+=(kube-apiserver)
echo $! >"$dir/kube-apiserver.pid"
ready=false
for _ in $(seq $((timeout * 5))); do
  if curl -fsS --cacert "$pki/ca.crt" -H "Authorization: Bearer $(cat "$pki/admin.token")" \
    "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; then ready=true; break; fi
  child_running "${started[1]}" || die "kube-apiserver exited" "$dir/kube-apiserver.log"
  sleep 0.2
done
$ready || die "kube-apiserver not ready after ${timeout}s" "$dir/kube-apiserver.log"
trap - INT TERM
t2=$(date +%s.%N)

b64() { base64 -w0 <"$1"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trellis-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $(b64 "$pki/ca.crt")
users:
- name: trellis-admin
  user:
    client-certificate-data: $(b64 "$pki/admin.crt")
    client-key-data: $(b64 "$pki/admin.key")
contexts:
- name: trellis-test
  context:
    cluster: trellis-test
    user: trellis-admin
current-context: trellis-test
EOF
chmod 600 "$dir/kubeconfig"

echo "start.sh: etcd $("$bin/etcd" --version | sed -n 's/^etcd Version: //p') on 127.0.0.1:$etcd_port (PID ${started[0]}), $("$bin/kube-apiserver" --version) on https://127.0.0.1:$port (PID ${started[1]}); ready in $(secs "$t0" "$t2") s (certificates and etcd $(secs "$t0" "$t1") s)"
echo "start.sh: logs and pid files in $dir; stop with: scripts/kube/stop.sh --dir $dir"
echo "export KUBECONFIG=$dir/kubeconfig"
