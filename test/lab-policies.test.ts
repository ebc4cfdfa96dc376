/**
 * OSM v1.2's policies in traffic through real Envoy sidecars (issue 13, item 4): one lab (prefix
 * `tlq`) with SMI mode on, and `trellis lab traffic` run in its pods. Mutual TLS between the
 * sidecars with SPIFFE identities, IngressBackend, Egress (and MeshConfig `enableEgress`
 * passthrough), Retry, UpstreamTrafficSetting (HTTP and TCP local rate limits, circuit
 * breakers) and headless services. Every check says who answered, with counts, and what the
 * sidecars' statistics counted. Needs root, iproute2, iptables, openssl and Envoy
 * (TRELLIS_ENVOY or .cache/envoy-venv); skipped without them, failing under CI=true.
 */
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import type { TrafficSummary } from '../src/lab/traffic.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { labEnvoyAdmin, labEnvoyStats, labTrafficRuns, sumStats, total, trafficUntil, TRELLIS, type LabPodRef } from './helpers/lab.js';
import { eventually } from './helpers/wait.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 'tlq';
const SUBNET = '10.248.0.0/24';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labPolicies;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;
const SLOW_APP = path.resolve(import.meta.dirname, 'fixtures/lab/slow-app.mjs');

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore', 'openssl']);

const CURL: LabPodRef = { pod: 'curl', namespace: 'curl' };
const OTHER: LabPodRef = { pod: 'other', namespace: 'curl' };
const HTTPBIN_0: LabPodRef = { pod: 'httpbin-0', namespace: 'httpbin' };
const HTTPBIN_1: LabPodRef = { pod: 'httpbin-1', namespace: 'httpbin' };
const LIMITS: LabPodRef = { pod: 'limits-0', namespace: 'limits' };
const EXT_WEB: LabPodRef = { pod: 'ext-web', namespace: 'outside' };
const INGRESS_GW: LabPodRef = { pod: 'ingress-gw', namespace: 'outside' };
const IP = {
  httpbin0: '10.244.2.10',
  httpbin1: '10.244.2.11',
  flaky: '10.244.3.10',
  extWeb: '10.244.9.10',
} as const;
/** What every failed request counts under: a connection the sidecar closed or reset, or one it never took. */
const REFUSED = new Set(['ECONNRESET', 'ECONNREFUSED', 'closed', 'EPIPE']);
/** Envoy's inbound listener (`inbound-listener`, 0.0.0.0:15003) in statistics names. */
const INBOUND = 'listener.0.0.0.0_15003';

function namespace(name: string, monitored: boolean): string {
  return `apiVersion: v1
kind: Namespace
metadata:
  name: ${name}
${monitored ? '  labels:\n    openservicemesh.io/monitored-by: osm\n' : ''}`;
}

function serviceAccount(ns: string, name: string): string {
  return `apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: ${name}\n  namespace: ${ns}\n`;
}

function pod(o: { ns: string; name: string; sa: string; ip: string; app: string; ports?: [string, number][]; command?: string[] }): string {
  const ports = (o.ports ?? []).map(([name, port]) => `        - name: ${name}\n          containerPort: ${port}\n`).join('');
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${o.name}
  namespace: ${o.ns}
  labels:
    app: ${o.app}
${o.command ? `  annotations:\n    lab.trellis.dev/command: '${JSON.stringify(o.command)}'\n` : ''}spec:
  serviceAccountName: ${o.sa}
  containers:
    - name: ${o.app}
${ports ? `      ports:\n${ports}` : ''}status:
  phase: Running
  podIP: ${o.ip}
`;
}

function service(ns: string, name: string, app: string, clusterIp: string, ports: [string, number][]): string {
  return `apiVersion: v1
kind: Service
metadata:
  name: ${name}
  namespace: ${ns}
spec:
  clusterIP: ${clusterIp}
  selector:
    app: ${app}
  ports:
${ports.map(([portName, port]) => `    - name: ${portName}\n      port: ${port}\n      targetPort: ${port}\n`).join('')}`;
}

/** Lets `sources` use every path (a match without pathRegex) of the HTTP ports (and `tcpPorts`) of the pods of ServiceAccount `ns/sa`. */
function allowAll(ns: string, sa: string, sources: [string, string][], tcpPorts: number[] = []): string {
  const rules = [`    - kind: HTTPRouteGroup\n      name: ${sa}-all\n      matches:\n        - all\n`];
  if (tcpPorts.length > 0) rules.push(`    - kind: TCPRoute\n      name: ${sa}-tcp\n`);
  return `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata:
  name: ${sa}-all
  namespace: ${ns}
spec:
  matches:
    - name: all
      methods: ["*"]
${tcpPorts.length > 0 ? `---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata:
  name: ${sa}-tcp
  namespace: ${ns}
spec:
  matches:
    ports: [${tcpPorts.join(', ')}]
` : ''}---
${trafficTarget(ns, `${sa}-all`, sa, sources, rules.join(''))}`;
}

function trafficTarget(ns: string, name: string, sa: string, sources: [string, string][], rules: string): string {
  return `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: ${name}
  namespace: ${ns}
spec:
  destination:
    kind: ServiceAccount
    name: ${sa}
    namespace: ${ns}
  sources:
${sources.map(([sns, sname]) => `    - kind: ServiceAccount\n      name: ${sname}\n      namespace: ${sns}\n`).join('')}  rules:
${rules}`;
}

/** An Egress of curl/curl in namespace curl: `destination` is its hosts or ipAddresses (YAML under spec), then one port. */
function egress(name: string, destination: string, port: number, protocol: string, more = ''): string {
  return `apiVersion: policy.openservicemesh.io/v1alpha1
kind: Egress
metadata:
  name: ${name}
  namespace: curl
spec:
  sources:
    - kind: ServiceAccount
      name: curl
      namespace: curl
  ${destination}
  ports:
    - number: ${port}
      protocol: ${protocol}
${more ? `  ${more}` : ''}`;
}

function labApp(p: { name: string; ns: string; sa: string }, ...args: string[]): string[] {
  return [process.execPath, TRELLIS, 'lab', 'app', '--pod', p.name, '--namespace', p.ns, '--service-account', p.sa, ...args];
}

/** The manifests of the policies lab, by file name. */
function manifests(): Record<string, string> {
  const httpbinRoutes = `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata:
  name: httpbin-routes
  namespace: httpbin
spec:
  matches:
    - name: get
      pathRegex: /get
      methods: [GET]
    - name: anything
      pathRegex: /anything.*
      methods: [GET]
`;
  const only = (match: string) => `    - kind: HTTPRouteGroup\n      name: httpbin-routes\n      matches:\n        - ${match}\n`;
  return {
    'meshconfig.yaml': `apiVersion: config.openservicemesh.io/v1alpha2
kind: MeshConfig
metadata:
  name: osm-mesh-config
  namespace: osm-system
spec:
  traffic:
    enablePermissiveTrafficPolicyMode: false
    enableEgress: false
`,
    'namespaces.yaml': ['curl', 'httpbin', 'flaky', 'limits'].map((n) => namespace(n, true)).concat(namespace('outside', false)).join('---\n'),
    'curl.yaml': [
      serviceAccount('curl', 'curl'),
      serviceAccount('curl', 'other'),
      pod({ ns: 'curl', name: 'curl', sa: 'curl', ip: '10.244.1.10', app: 'curl' }),
      pod({ ns: 'curl', name: 'other', sa: 'other', ip: '10.244.1.11', app: 'other' }),
    ].join('---\n'),
    // httpbin: two pods behind a ClusterIP service and a headless one. curl may GET /get,
    // other /anything: only their certificates' SPIFFE IDs tell the two apart.
    'httpbin.yaml': [
      serviceAccount('httpbin', 'httpbin'),
      service('httpbin', 'httpbin', 'httpbin', '10.96.2.1', [['http', 14001]]),
      service('httpbin', 'httpbin-pods', 'httpbin', 'None', [['http', 14001]]),
      pod({ ns: 'httpbin', name: 'httpbin-0', sa: 'httpbin', ip: IP.httpbin0, app: 'httpbin', ports: [['http', 14001]] }),
      pod({ ns: 'httpbin', name: 'httpbin-1', sa: 'httpbin', ip: IP.httpbin1, app: 'httpbin', ports: [['http', 14001]] }),
      httpbinRoutes,
      trafficTarget('httpbin', 'curl-get', 'httpbin', [['curl', 'curl']], only('get')),
      trafficTarget('httpbin', 'other-anything', 'httpbin', [['curl', 'other']], only('anything')),
      `apiVersion: policy.openservicemesh.io/v1alpha1
kind: IngressBackend
metadata:
  name: httpbin
  namespace: httpbin
spec:
  backends:
    - name: httpbin
      port:
        number: 14001
        protocol: http
  sources:
    - kind: Service
      name: ingress-gw
      namespace: outside
`,
    ].join('---\n'),
    // flaky: fails its first 3 requests with 503. curl's requests are retried, other's are not.
    'flaky.yaml': [
      serviceAccount('flaky', 'flaky'),
      service('flaky', 'flaky', 'flaky', '10.96.3.1', [['http', 14001]]),
      pod({
        ns: 'flaky', name: 'flaky-0', sa: 'flaky', ip: IP.flaky, app: 'flaky', ports: [['http', 14001]],
        command: labApp({ name: 'flaky-0', ns: 'flaky', sa: 'flaky' }, '--listen', 'http:14001', '--fail-first', '3'),
      }),
      allowAll('flaky', 'flaky', [['curl', 'curl'], ['curl', 'other']]),
      `apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata:
  name: curl-flaky
  namespace: curl
spec:
  source:
    kind: ServiceAccount
    name: curl
    namespace: curl
  destinations:
    - kind: Service
      name: flaky
      namespace: flaky
  retryPolicy:
    retryOn: 5xx
    perTryTimeout: 5s
    numRetries: 5
    retryBackoffBaseInterval: 10ms
`,
    ].join('---\n'),
    // limits: one pod answering after 300 ms, behind three services, each with its UpstreamTrafficSetting.
    'limits.yaml': [
      serviceAccount('limits', 'limits'),
      service('limits', 'limited', 'limits', '10.96.4.1', [['http', 14001]]),
      service('limits', 'breaker', 'limits', '10.96.4.2', [['http', 14002]]),
      service('limits', 'tcp-limited', 'limits', '10.96.4.3', [['tcp', 14003]]),
      service('limits', 'route-limited', 'limits', '10.96.4.4', [['http', 14004]]),
      pod({
        ns: 'limits', name: 'limits-0', sa: 'limits', ip: '10.244.4.10', app: 'limits',
        ports: [['http-a', 14001], ['http-b', 14002], ['tcp', 14003], ['http-c', 14004]],
        command: [process.execPath, SLOW_APP, '300', 'http:14001', 'http:14002', 'tcp:14003', 'http:14004'],
      }),
      allowAll('limits', 'limits', [['curl', 'curl']], [14003]),
      `apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: limited
  namespace: limits
spec:
  host: limited.limits.svc.cluster.local
  rateLimit:
    local:
      http:
        requests: 10
        unit: hour
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: breaker
  namespace: limits
spec:
  host: breaker.limits.svc.cluster.local
  connectionSettings:
    tcp:
      maxConnections: 1
    http:
      maxPendingRequests: 1
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: tcp-limited
  namespace: limits
spec:
  host: tcp-limited.limits.svc.cluster.local
  rateLimit:
    local:
      tcp:
        connections: 5
        unit: hour
---
# OSM's per-route demo: ".*" names the routes for every path (here the TrafficTarget's match without pathRegex).
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata:
  name: route-limited
  namespace: limits
spec:
  host: route-limited.limits.svc.cluster.local
  httpRoutes:
    - path: .*
      rateLimit:
        local:
          requests: 5
          unit: hour
`,
    ].join('---\n'),
    // Lab hosts outside the mesh: a web server reached through Egress, and an ingress gateway.
    'outside.yaml': [
      service('outside', 'ext-web', 'ext-web', 'None', [['http', 14080], ['tcp', 14090]]),
      pod({ ns: 'outside', name: 'ext-web', sa: 'default', ip: IP.extWeb, app: 'ext-web', ports: [['http', 14080], ['tcp', 14090]] }),
      service('outside', 'ingress-gw', 'ingress-gw', 'None', [['http', 80]]),
      pod({ ns: 'outside', name: 'ingress-gw', sa: 'default', ip: '10.244.9.11', app: 'ingress-gw' }),
    ].join('---\n'),
    'egress.yaml': [
      `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata:
  name: ext-web-get
  namespace: curl
spec:
  matches:
    - name: get
      pathRegex: /get
`,
      egress('ext-web-http', 'hosts:\n    - ext-web.outside', 14080, 'http', 'matches:\n    - apiGroup: specs.smi-spec.io/v1alpha4\n      kind: HTTPRouteGroup\n      name: ext-web-get\n'),
      egress('ext-web-tcp', `ipAddresses:\n    - ${IP.extWeb}/32`, 14090, 'tcp'),
    ].join('---\n'),
  };
}

function refusals(s: TrafficSummary): number {
  return Object.entries(s.errors).filter(([k]) => REFUSED.has(k)).reduce((a, [, n]) => a + n, 0);
}

/** Asserts that every one of `n` requests was refused before any pod answered. */
function assertRefused(s: TrafficSummary, n: number, what: string): void {
  assert.deepEqual({ answeredBy: s.answeredBy, statuses: s.statuses }, { answeredBy: {}, statuses: {} }, what);
  assert.equal(refusals(s), n, `${what}: ${JSON.stringify(s.errors)}`);
}

describe('OSM policies in traffic through the sidecars of a lab', { skip, timeout: 900_000 }, () => {
  let dir: string;
  let manifestsDir: string;
  let lab: Lab;

  /** `lab traffic` runs from one pod, in order, in one process. */
  const runs = (from: LabPodRef, ...argLists: string[][]) => labTrafficRuns(lab, from, argLists);
  const stats = (of: LabPodRef) => labEnvoyStats(lab, of);
  /** How much a counter grew between two `/stats` readings. */
  const grew = (before: Map<string, number>, after: Map<string, number>, name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0);

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), `${PREFIX}-policies-`));
    await chmod(dir, 0o755);
    manifestsDir = path.join(dir, 'manifests');
    await mkdir(manifestsDir);
    for (const [file, text] of Object.entries(manifests())) await writeFile(path.join(manifestsDir, file), text);
    lab = await startLab({ manifestsDir, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(dir, 'state') });
    await lab.waitForAllAcked(180_000);
  });

  after(async () => {
    await lab?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('pod to pod is mutual TLS with SPIFFE identities: the destination tells curl and other apart by certificate, and plaintext from outside the mesh is refused', async () => {
    const before0 = await stats(HTTPBIN_0);
    const before1 = await stats(HTTPBIN_1);
    const curlBefore = await stats(CURL);
    const rbacDenied = (st: Map<string, number>) => sumStats(st, (n) => n.startsWith('http.inbound_httpbin/httpbin|14001_http.') && n.endsWith('.rbac.denied'));
    // The destination's per-route RBAC names SPIFFE IDs: /get only curl's, /anything only other's.
    const [get, curlAnything] = await runs(CURL,
      ['--url', 'http://httpbin.httpbin:14001/get', '--requests', '100', '--concurrency', '2'],
      ['--url', 'http://httpbin.httpbin:14001/anything/x', '--requests', '20']);
    const [otherGet, otherAnything] = await runs(OTHER,
      ['--url', 'http://httpbin.httpbin:14001/get', '--requests', '20'],
      ['--url', 'http://httpbin.httpbin:14001/anything/x', '--requests', '20']);
    console.log('curl → httpbin /get:', JSON.stringify(get));
    console.log('curl → httpbin /anything/x:', JSON.stringify(curlAnything));
    console.log('other → httpbin /get:', JSON.stringify(otherGet));
    console.log('other → httpbin /anything/x:', JSON.stringify(otherAnything));
    assert.deepEqual({ statuses: get.statuses, errors: get.errors }, { statuses: { '200': 100 }, errors: {} });
    assert.deepEqual(Object.keys(get.answeredBy).sort(), ['httpbin-0', 'httpbin-1']);
    assert.equal(total(get.answeredBy), 100);
    for (const [s, status] of [[curlAnything, '403'], [otherGet, '403'], [otherAnything, '200']] as const) {
      assert.deepEqual(s.statuses, { [status]: 20 });
      assert.equal(total(s.answeredBy), status === '200' ? 20 : 0);
    }
    assert.deepEqual(Object.keys(otherAnything.answeredBy).sort(), ['httpbin-0', 'httpbin-1']);

    // Each destination sidecar terminated TLS on its inbound listener, every client with a certificate.
    const after0 = await stats(HTTPBIN_0);
    const after1 = await stats(HTTPBIN_1);
    for (const [pod, b, a] of [['httpbin-0', before0, after0], ['httpbin-1', before1, after1]] as const) {
      const handshakes = grew(b, a, `${INBOUND}.ssl.handshake`);
      const noCert = grew(b, a, `${INBOUND}.ssl.no_certificate`) + grew(b, a, `${INBOUND}.ssl.fail_verify_no_cert`);
      console.log(`${pod}: ${handshakes} TLS handshakes on ${INBOUND}, ${noCert} without a client certificate`);
      assert.ok(handshakes >= 2, `${pod}: ${handshakes} TLS handshakes on the inbound listener (curl's and other's sidecars)`);
      assert.equal(noCert, 0);
    }
    const upstreamHandshakes = grew(curlBefore, await stats(CURL), 'cluster.httpbin/httpbin|14001.ssl.handshake');
    const denied = rbacDenied(after0) + rbacDenied(after1) - rbacDenied(before0) - rbacDenied(before1);
    console.log(`curl: ${upstreamHandshakes} TLS handshakes to cluster httpbin/httpbin|14001; httpbin sidecars: ${denied} requests denied by RBAC`);
    assert.ok(upstreamHandshakes >= 1);
    assert.equal(denied, 40);

    // Plaintext straight to the pods' ports from a lab host outside the mesh: no inbound chain takes it.
    const plain = await runs(EXT_WEB, ...[IP.httpbin0, IP.flaky].map((ip) => ['--url', `http://${ip}:14001/get`, '--requests', '10']));
    for (const [i, ip] of [IP.httpbin0, IP.flaky].entries()) {
      console.log(`ext-web (outside the mesh) → ${ip}:14001:`, JSON.stringify(plain[i]));
      assertRefused(plain[i], 10, `ext-web → ${ip}`);
    }
    // TLS without a mesh certificate: the sidecar presents httpbin's SPIFFE identity, then refuses the handshake.
    const sni = `-connect ${IP.httpbin0}:14001 -servername httpbin.httpbin.svc.cluster.local`;
    const r = await lab.exec(EXT_WEB.pod, EXT_WEB.namespace, [
      'sh', '-c',
      // -ign_eof: read on after the request, until the server's alert (TLS 1.3 sends it after the client's Finished).
      `printf 'GET /get HTTP/1.0\\r\\n\\r\\n' | openssl s_client ${sni} -ign_eof 2>&1; ` +
        `openssl s_client ${sni} </dev/null 2>/dev/null | openssl x509 -noout -ext subjectAltName`,
    ], { timeoutMs: 30_000 });
    console.log('ext-web openssl s_client → httpbin-0:14001:', r.stdout.split('\n').filter((l) => /URI:|alert|New,/.test(l)).map((l) => l.trim()).join(' | '));
    assert.match(r.stdout, /URI:spiffe:\/\/cluster\.local\/ns\/httpbin\/sa\/httpbin/);
    assert.match(r.stdout, /alert certificate required/i);
    assert.doesNotMatch(r.stdout, /"pod"/, 'no app answered');
    const refused0 = await stats(HTTPBIN_0);
    const sslGrew = [...refused0].filter(([n]) => n.startsWith(`${INBOUND}.ssl.`) && grew(after0, refused0, n) !== 0).map(([n]) => `${n.slice(INBOUND.length + 1)} +${grew(after0, refused0, n)}`);
    console.log(`httpbin-0 inbound TLS statistics after the two openssl connections: ${sslGrew.join(', ')}`);
    assert.equal(grew(after0, refused0, `${INBOUND}.ssl.fail_verify_no_cert`), 2);
  });

  it('IngressBackend: the ingress gateway its source Service names reaches each httpbin pod over plain HTTP; ext-web, not named, does not, nor does the gateway reach a backend no IngressBackend names', async () => {
    const [to0, to1, toFlaky] = await runs(INGRESS_GW,
      ['--url', `http://${IP.httpbin0}:14001/anything/ingress`, '--requests', '50', '--concurrency', '2'],
      ['--url', `http://${IP.httpbin1}:14001/anything/ingress`, '--requests', '50', '--concurrency', '2'],
      ['--url', `http://${IP.flaky}:14001/`, '--requests', '20']);
    for (const [s, podName] of [[to0, 'httpbin-0'], [to1, 'httpbin-1']] as const) {
      console.log(`ingress-gw → ${podName}:14001:`, JSON.stringify(s));
      assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '200': 50 }, answeredBy: { [podName]: 50 }, errors: {} });
    }
    console.log('ingress-gw → flaky-0:14001:', JSON.stringify(toFlaky));
    assertRefused(toFlaky, 20, 'ingress-gw → flaky-0');
    const [notNamed] = await runs(EXT_WEB, ['--url', `http://${IP.httpbin1}:14001/anything/ingress`, '--requests', '20']);
    console.log('ext-web → httpbin-1:14001:', JSON.stringify(notNamed));
    assertRefused(notNamed, 20, 'ext-web → httpbin-1');
  });

  it('a headless service: its name resolves to the pod IPs, and traffic to it reaches both pods through the sidecars', async () => {
    const r = await lab.exec(CURL.pod, CURL.namespace, ['getent', 'ahostsv4', 'httpbin-pods.httpbin']);
    const resolved = [...new Set(r.stdout.split('\n').map((l) => l.split(/\s+/)[0]).filter((a) => a))].sort();
    console.log('httpbin-pods.httpbin resolves to', resolved.join(' '));
    assert.deepEqual(resolved, [IP.httpbin0, IP.httpbin1]);
    const chain = (st: Map<string, number>) => st.get('http.inbound_httpbin/httpbin-pods|14001_http.downstream_rq_2xx') ?? 0;
    const before = chain(await stats(HTTPBIN_0)) + chain(await stats(HTTPBIN_1));
    // By name, then each pod IP on its own (the name's other answer) with the service's Host.
    const [byName, ...byIp] = await runs(CURL,
      ['--url', 'http://httpbin-pods.httpbin:14001/get', '--requests', '100', '--concurrency', '2'],
      ...[IP.httpbin0, IP.httpbin1].map((ip) => ['--url', `http://${ip}:14001/get`, '--header', 'host:httpbin-pods.httpbin:14001', '--requests', '20']));
    console.log('curl → httpbin-pods.httpbin:14001/get:', JSON.stringify(byName));
    assert.deepEqual({ statuses: byName.statuses, errors: byName.errors }, { statuses: { '200': 100 }, errors: {} });
    assert.deepEqual(Object.keys(byName.answeredBy).sort(), ['httpbin-0', 'httpbin-1']);
    for (const [i, s] of byIp.entries()) {
      console.log(`curl → ${[IP.httpbin0, IP.httpbin1][i]}:14001 (Host httpbin-pods.httpbin):`, JSON.stringify(s));
      assert.deepEqual({ statuses: s.statuses, errors: s.errors }, { statuses: { '200': 20 }, errors: {} });
      assert.equal(total(s.answeredBy), 20);
    }
    const after = chain(await stats(HTTPBIN_0)) + chain(await stats(HTTPBIN_1));
    console.log(`httpbin sidecars: ${after - before} requests answered on the httpbin-pods inbound chain`);
    assert.equal(after - before, 140);
  });

  it('Retry: flaky-0 fails its first 3 requests; curl\'s Retry applies only once MeshConfig featureFlags.enableRetryPolicy is on, other (no Retry) sees the 503', async () => {
    // OSM v1.2's default: the feature flag is off, so curl's Retry is not in force yet.
    const [unretried] = await runs(CURL, ['--url', 'http://flaky.flaky:14001/', '--requests', '1']);
    const [first] = await runs(OTHER, ['--url', 'http://flaky.flaky:14001/', '--requests', '1']);
    console.log('curl → flaky (Retry, enableRetryPolicy off):', JSON.stringify(unretried));
    console.log('other → flaky (no Retry):', JSON.stringify(first));
    for (const s of [unretried, first]) {
      assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '503': 1 }, answeredBy: { 'flaky-0': 1 }, errors: {} });
    }
    const meshConfig = path.join(manifestsDir, 'meshconfig.yaml');
    await writeFile(meshConfig, `${(await readFile(meshConfig, 'utf8')).trimEnd()}\n  featureFlags:\n    enableRetryPolicy: true\n`);
    // Wait for the retry policy in curl's sidecar itself (traffic would use up flaky-0's last failure).
    const admin = labEnvoyAdmin(lab, CURL);
    const since = Date.now();
    await eventually(async () => /"retry_on": "5xx"/.test((await admin.get('/config_dump?resource=dynamic_route_configs')).body),
      'the retry policy in curl\'s sidecar after enableRetryPolicy was turned on', 60_000, 100);
    console.log(`curl's sidecar has the retry policy ${Date.now() - since} ms after enableRetryPolicy was turned on`);
    const before = await stats(CURL);
    const [s] = await runs(CURL, ['--url', 'http://flaky.flaky:14001/', '--requests', '20']);
    const after = await stats(CURL);
    const retried = grew(before, after, 'cluster.flaky/flaky|14001.upstream_rq_retry');
    const retrySucceeded = grew(before, after, 'cluster.flaky/flaky|14001.upstream_rq_retry_success');
    console.log(`curl → flaky (Retry in force): ${JSON.stringify(s)}; curl's sidecar retried ${retried} times, ${retrySucceeded} retry succeeded`);
    assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '200': 20 }, answeredBy: { 'flaky-0': 20 }, errors: {} });
    assert.equal(retried, 1);
    assert.equal(retrySucceeded, 1);
  });

  it('UpstreamTrafficSetting: an HTTP rate limit answers 429 above it (per service and per route), connection limits overflow with 503, a TCP rate limit closes connections above it', async () => {
    const before = await stats(CURL);
    const [limited, routeLimited, breaker, tcp] = await runs(CURL,
      ['--url', 'http://limited.limits:14001/', '--requests', '30'],
      ['--url', 'http://route-limited.limits:14004/any/path', '--requests', '15'],
      ['--url', 'http://breaker.limits:14002/', '--requests', '60', '--concurrency', '12'],
      ['--tcp', 'tcp-limited.limits:14003', '--requests', '10']);
    const overflowed = grew(before, await stats(CURL), 'cluster.limits/breaker|14002.upstream_rq_pending_overflow');
    const limitsStats = await stats(LIMITS);
    const httpLimited = sumStats(limitsStats, (n) => n.endsWith('http_local_rate_limit.rate_limited'));
    const tcpLimited = sumStats(limitsStats, (n) => n.startsWith('local_rate_limit.') && n.endsWith('.rate_limited'));
    console.log(`curl → limited (10 requests an hour): ${JSON.stringify(limited)}; limits-0's sidecar rate-limited ${httpLimited} HTTP requests (limited and route-limited)`);
    console.log('curl → route-limited (httpRoutes ".*": 5 requests an hour):', JSON.stringify(routeLimited));
    console.log(`curl → breaker (1 connection, 1 pending request; answers take 300 ms): ${JSON.stringify(breaker)}; curl's sidecar overflowed ${overflowed}`);
    console.log(`curl → tcp-limited (5 connections an hour): ${JSON.stringify(tcp)}; limits-0's sidecar limited ${tcpLimited}`);
    assert.deepEqual({ statuses: limited.statuses, answeredBy: limited.answeredBy, errors: limited.errors }, { statuses: { '200': 10, '429': 20 }, answeredBy: { 'limits-0': 10 }, errors: {} });
    assert.deepEqual({ statuses: routeLimited.statuses, answeredBy: routeLimited.answeredBy, errors: routeLimited.errors }, { statuses: { '200': 5, '429': 10 }, answeredBy: { 'limits-0': 5 }, errors: {} });
    assert.equal(httpLimited, 30);
    assert.deepEqual(Object.keys(breaker.statuses).sort(), ['200', '503']);
    assert.equal(breaker.statuses['503'], overflowed);
    assert.deepEqual(breaker.answeredBy, { 'limits-0': breaker.statuses['200'] });
    assert.equal(breaker.statuses['200'] + breaker.statuses['503'], 60);
    assert.deepEqual({ statuses: tcp.statuses, answeredBy: tcp.answeredBy }, { statuses: { ok: 5 }, answeredBy: { 'limits-0': 5 } });
    assert.equal(refusals(tcp), 5);
    assert.equal(tcpLimited, 5);
  });

  it('Egress: curl reaches ext-web outside the mesh as its Egress policies allow (HTTP by host and route, TCP by IP range), other has none and is refused; with enableEgress both pass through', async () => {
    const [get, post, byIp, tcp] = await runs(CURL,
      ['--url', 'http://ext-web.outside:14080/get', '--requests', '20'],
      ['--url', 'http://ext-web.outside:14080/post', '--requests', '10'],
      ['--url', `http://${IP.extWeb}:14080/get`, '--requests', '10'],
      ['--tcp', 'ext-web.outside:14090', '--requests', '10']);
    console.log('curl → ext-web.outside:14080/get (Egress http, match /get):', JSON.stringify(get));
    console.log('curl → ext-web.outside:14080/post (no match):', JSON.stringify(post));
    console.log(`curl → ${IP.extWeb}:14080/get (a host no Egress names):`, JSON.stringify(byIp));
    console.log('curl → ext-web.outside:14090 (Egress tcp, its IP):', JSON.stringify(tcp));
    assert.deepEqual({ statuses: get.statuses, answeredBy: get.answeredBy, errors: get.errors }, { statuses: { '200': 20 }, answeredBy: { 'ext-web': 20 }, errors: {} });
    assert.deepEqual({ statuses: post.statuses, answeredBy: post.answeredBy }, { statuses: { '404': 10 }, answeredBy: {} });
    assert.deepEqual({ statuses: byIp.statuses, answeredBy: byIp.answeredBy }, { statuses: { '404': 10 }, answeredBy: {} });
    assert.deepEqual({ statuses: tcp.statuses, answeredBy: tcp.answeredBy, errors: tcp.errors }, { statuses: { ok: 10 }, answeredBy: { 'ext-web': 10 }, errors: {} });
    const otherRuns = await runs(OTHER, ['--url', 'http://ext-web.outside:14080/get', '--requests', '10'], ['--tcp', 'ext-web.outside:14090', '--requests', '10']);
    for (const [i, what] of ['http', 'tcp'].entries()) {
      console.log(`other → ext-web ${what} (no Egress):`, JSON.stringify(otherRuns[i]));
      assertRefused(otherRuns[i], 10, `other → ext-web ${what}`);
    }

    const meshConfig = path.join(manifestsDir, 'meshconfig.yaml');
    await writeFile(meshConfig, (await readFile(meshConfig, 'utf8')).replace('enableEgress: false', 'enableEgress: true'));
    const open = await trafficUntil(lab, OTHER, ['--url', 'http://ext-web.outside:14080/get', '--requests', '10'], (s) => s.statuses['200'] === 10, 'other passing through with enableEgress');
    console.log(`other → ext-web.outside:14080/get with enableEgress (after ${open.afterMs} ms):`, JSON.stringify(open.summary));
    assert.deepEqual(open.summary.answeredBy, { 'ext-web': 10 });
    for (const from of [OTHER, CURL]) {
      // Egress policies no longer apply (OSM v1.2): curl's /post passes too.
      const [http, tcpPass] = await runs(from, ['--url', 'http://ext-web.outside:14080/post', '--requests', '20'], ['--tcp', 'ext-web.outside:14090', '--requests', '10']);
      console.log(`${from.pod} → ext-web with enableEgress: /post ${JSON.stringify(http)}; tcp ${JSON.stringify(tcpPass)}`);
      assert.deepEqual({ statuses: http.statuses, answeredBy: http.answeredBy }, { statuses: { '200': 20 }, answeredBy: { 'ext-web': 20 } });
      assert.deepEqual({ statuses: tcpPass.statuses, answeredBy: tcpPass.answeredBy }, { statuses: { ok: 10 }, answeredBy: { 'ext-web': 10 } });
    }
  });
});
