#!/usr/bin/env bash
# End-to-end check of the real API server recipe: starts etcd and kube-apiserver
# (scripts/kube/start.sh) in a fresh directory under /tmp, then with Debian's kubectl: version,
# get ns, apply of a Namespace, ServiceAccount and Pod (the Pod stays Pending: no scheduler or
# kubelet), OSM's CRDs and one object of each of two of them, and a MutatingWebhookConfiguration
# whose webhook (scripts/kube/echo-webhook.ts on 127.0.0.1) the API server calls on Pod creation;
# a webhook that names a Service must fail on the machine (start.sh's refusing proxy).
# Prints the servers' memory, stops everything it started (by PID) and exits 0 when every check
# passed.
#
# Usage: scripts/kube/smoke.sh [--webhook-port PORT (default 16445)] [start.sh's --port, --etcd-port, --timeout]
# Environment: KUBECTL (default <repo>/.cache/kubernetes-client/usr/bin/kubectl, then kubectl on
# PATH), OSM_CRDS (default <repo>/../shared/anchors/osm/crds; skipped when absent).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
webhook_port=16445
start_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --webhook-port) webhook_port=$2; shift 2 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) start_args+=("$1"); shift ;;
  esac
done
kubectl_bin=${KUBECTL:-$repo/.cache/kubernetes-client/usr/bin/kubectl}
[ -x "$kubectl_bin" ] || kubectl_bin=$(command -v kubectl || true)
[ -n "$kubectl_bin" ] || { echo "smoke.sh: no kubectl (run .ci/run, or set KUBECTL)" >&2; exit 1; }
crds=${OSM_CRDS:-$repo/../shared/anchors/osm/crds}
bash "$here/install.sh" --check

dir=$(mktemp -d /tmp/trellis-kube-smoke.XXXXXX)
webhook_pid=
cleanup() {
  if [ -n "$webhook_pid" ]; then kill "$webhook_pid" 2>/dev/null || true; wait "$webhook_pid" 2>/dev/null || true; fi
  bash "$here/stop.sh" --dir "$dir" || true
  rm -rf "$dir"
}
trap cleanup EXIT

passed=0
failed=0
check() { # check NAME COMMAND...: runs COMMAND, counts and prints the outcome
  local name=$1
  shift
  if out=$("$@" 2>&1); then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    printf '%s\n' "$out" | tail -n 15 | sed 's/^/     /'
  fi
}

bash "$here/start.sh" "${start_args[@]}" --dir "$dir"
k() { "$kubectl_bin" --kubeconfig "$dir/kubeconfig" --cache-dir "$dir/kubectl-cache" "$@"; }

k version || true
has_system_namespaces() { k get ns -o name | grep -qx namespace/kube-system && k get ns -o name | grep -qx namespace/default; }
check "kubectl version reaches the server" k version
check "kubectl get ns lists default and kube-system" has_system_namespaces

manifests=$dir/manifests.yaml
cat >"$manifests" <<'EOF'
apiVersion: v1
kind: Namespace
metadata:
  name: smoke
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: smoke
---
apiVersion: v1
kind: Pod
metadata:
  name: bookstore
  namespace: smoke
  labels: { app: bookstore }
spec:
  containers:
  - name: bookstore
    image: example.invalid/bookstore:v1
    ports: [{ containerPort: 14001 }]
EOF
check "kubectl apply of a Namespace, a ServiceAccount and a Pod" k apply -f "$manifests"
phase_pending() { [ "$(k get pod -n "$1" "$2" -o 'jsonpath={.status.phase}/{.spec.nodeName}/{.status.podIP}')" = "Pending//" ]; }
check "the Pod is Pending, with no node and no IP" phase_pending smoke bookstore

if [ -d "$crds" ]; then
  check "kubectl apply of OSM's CRDs ($crds)" k apply -f "$crds"
  check "every CRD is Established" k wait --for condition=established --timeout=60s crd --all
  cat >"$dir/custom.yaml" <<'EOF'
apiVersion: config.openservicemesh.io/v1alpha2
kind: MeshConfig
metadata:
  name: osm-mesh-config
  namespace: smoke
spec:
  sidecar:
    logLevel: error
---
apiVersion: split.smi-spec.io/v1alpha2
kind: TrafficSplit
metadata:
  name: bookstore-split
  namespace: smoke
spec:
  service: bookstore
  backends:
  - { service: bookstore-v1, weight: 50 }
  - { service: bookstore-v2, weight: 50 }
EOF
  check "kubectl apply of a MeshConfig and a TrafficSplit" k apply -f "$dir/custom.yaml"
  split_weight() { [ "$(k get trafficsplits.split.smi-spec.io -n smoke bookstore-split -o 'jsonpath={.spec.backends[1].weight}')" = 50 ]; }
  check "kubectl get trafficsplit reads it back" split_weight
else
  echo "skip OSM CRDs: no $crds"
fi

# The mutating webhook: a serving certificate for 127.0.0.1 from start.sh's CA, the webhook
# process, and a configuration that sends Pod creations in labelled namespaces to it by URL.
(
  cd "$dir/pki"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout webhook.key -out webhook.csr -subj /CN=echo-webhook 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >webhook.ext
  openssl x509 -req -in webhook.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -out webhook.crt -extfile webhook.ext 2>/dev/null
)
(cd "$repo" && exec node --import tsx "$here/echo-webhook.ts" --port "$webhook_port" --cert "$dir/pki/webhook.crt" --key "$dir/pki/webhook.key") \
  >"$dir/webhook.log" 2>&1 &
webhook_pid=$!
for _ in $(seq 100); do grep -q '^listening' "$dir/webhook.log" && break; sleep 0.1; done
cat >"$dir/webhook.yaml" <<EOF
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: trellis-smoke-injector
webhooks:
- name: injector.trellis.test
  clientConfig:
    url: https://127.0.0.1:$webhook_port/mutate
    caBundle: $(base64 -w0 <"$dir/pki/ca.crt")
  rules:
  - { operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }
  namespaceSelector:
    matchLabels: { trellis.test/inject: enabled }
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 5
---
apiVersion: v1
kind: Namespace
metadata:
  name: smoke-injected
  labels: { trellis.test/inject: enabled }
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: smoke-injected
EOF
cat >"$dir/injected-pod.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: bookbuyer
  namespace: smoke-injected
spec:
  containers:
  - { name: bookbuyer, image: example.invalid/bookbuyer:v1 }
EOF
check "kubectl apply of a MutatingWebhookConfiguration" k apply -f "$dir/webhook.yaml"
check "a Pod created in a labelled namespace" k apply -f "$dir/injected-pod.yaml"
mutated() { [ "$(k get pod -n smoke-injected bookbuyer -o 'jsonpath={.metadata.annotations.trellis\.test/mutated-by}')" = echo-webhook ]; }
check "the API server called the webhook and applied its patch" mutated
check "the webhook logged one review for the Pod" grep -q '^review .* Pod smoke-injected/bookbuyer$' "$dir/webhook.log"
not_mutated() { [ -z "$(k get pod -n smoke bookstore -o 'jsonpath={.metadata.annotations.trellis\.test/mutated-by}')" ]; }
check "a Pod outside the selected namespaces is left alone" not_mutated

# A webhook that names a Service is dialled at NAME.NS.svc: start.sh's refusing proxy must stop it
# on the machine (never a DNS name or an address outside loopback).
cat >"$dir/service-webhook.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata:
  name: smoke-service-webhook
  labels: { trellis.test/service-webhook: enabled }
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: default
  namespace: smoke-service-webhook
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: trellis-smoke-service-form
webhooks:
- name: service-form.trellis.test
  clientConfig:
    service: { namespace: smoke-service-webhook, name: injector, path: /mutate, port: 443 }
    caBundle: $(base64 -w0 <"$dir/pki/ca.crt")
  rules:
  - { operations: [CREATE], apiGroups: [""], apiVersions: [v1], resources: [pods] }
  namespaceSelector:
    matchLabels: { trellis.test/service-webhook: enabled }
  sideEffects: None
  admissionReviewVersions: [v1]
  failurePolicy: Fail
  timeoutSeconds: 5
EOF
check "kubectl apply of a webhook that names a Service" k apply -f "$dir/service-webhook.yaml"
refused_locally() {
  local out
  out=$(k run -n smoke-service-webhook refused --image=example.invalid/x:v1 --restart=Never 2>&1) && return 1
  grep -q 'proxyconnect tcp: dial tcp 127.0.0.1:9: connect: connection refused' <<<"$out"
}
check "the API server refuses to dial a Service-named webhook off the machine" refused_locally

rss() { awk '/^VmRSS/ { printf "%d MiB", $2 / 1024 }' "/proc/$(cat "$dir/$1.pid")/status"; }
echo "memory: kube-apiserver $(rss kube-apiserver), etcd $(rss etcd) (RSS)"
echo "smoke: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
