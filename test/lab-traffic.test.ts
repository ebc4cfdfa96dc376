/**
 * Traffic through real Envoy sidecars in a lab (issue 13, item 4): the bookstore demo of
 * examples/bookstore, started by `startLab` in network namespaces of the prefix `tlp`, with
 * `trellis lab traffic` run in the pods. Every check says who answered, with counts.
 * Needs root, iproute2, iptables and Envoy (TRELLIS_ENVOY or .cache/envoy-venv); skipped
 * without them, failing under CI=true.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import type { TrafficSummary } from '../src/lab/traffic.js';
import {
  ackedVersions, BOOKBUYER, BOOKBUYER_HEADERS, BOOKS_BOUGHT, BOOKSTORE_V1, BOOKSTORE_V2, bookstoreManifests, bookstoreV1Pod, BOOKTHIEF, BOOKWAREHOUSE,
  LAB_TOOLS, newConfigurationAcked as acked, total, traffic as trafficIn, trafficUntil as trafficUntilIn, type LabPodRef,
} from './helpers/lab.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

const PREFIX = 'tlp';
const SUBNET = '10.253.0.0/24';
const { skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore']);

const EXTRA_V1_POD = `---\n${bookstoreV1Pod('bookstore-6b7f8d9c5-x7k2z', '10.244.3.11')}`;

const BOOKTHIEF_BUYS_A_BOOK = `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata:
  name: bookthief-buy-a-book
  namespace: bookstore
spec:
  destination:
    kind: ServiceAccount
    name: bookstore
    namespace: bookstore
  sources:
    - kind: ServiceAccount
      name: bookthief
      namespace: bookthief
  rules:
    - kind: HTTPRouteGroup
      name: bookstore-service-routes
      matches:
        - buy-a-book
`;

describe('traffic through the sidecars of the bookstore lab', { skip, timeout: 600_000 }, () => {
  let lab: Lab;
  let manifests: string;

  const traffic = (from: LabPodRef, args: string[]): Promise<TrafficSummary> => trafficIn(lab, from, args);
  const trafficUntil = (from: LabPodRef, args: string[], done: (s: TrafficSummary) => boolean, what: string) => trafficUntilIn(lab, from, args, done, what);
  const versions = (identity: string) => ackedVersions(lab, identity);
  const newConfigurationAcked = (identity: string, before: string, since: number) => acked(lab, identity, before, since);

  async function edit(file: string, change: (text: string) => string): Promise<void> {
    const p = path.join(manifests, file);
    await writeFile(p, change(await readFile(p, 'utf8')));
  }

  before(async () => {
    manifests = await bookstoreManifests(PREFIX);
    lab = await startLab({
      manifestsDir: manifests,
      prefix: PREFIX,
      subnet: SUBNET,
      httpAddress: `127.0.0.1:${LAB_SUITE_PORTS.labTraffic.http}`,
      xdsPort: LAB_SUITE_PORTS.labTraffic.xds,
      stateDir: path.join('/tmp', `${PREFIX}-lab-traffic-${process.pid}`),
    });
    await lab.waitForAllAcked(120_000);
  });

  after(async () => {
    await lab?.stop();
    if (manifests) await rm(manifests, { recursive: true, force: true });
  });

  it('bookbuyer → bookstore.bookstore:14001/books-bought splits 50/50 over bookstore-v1 and bookstore-v2', async () => {
    const s = await traffic(BOOKBUYER, ['--url', BOOKS_BOUGHT, '--requests', '1000', '--concurrency', '4', ...BOOKBUYER_HEADERS]);
    console.log('split 50/50:', JSON.stringify(s));
    assert.deepEqual(s.statuses, { '200': 1000 });
    assert.deepEqual(Object.keys(s.answeredBy).sort(), [BOOKSTORE_V1, BOOKSTORE_V2].sort());
    for (const pod of [BOOKSTORE_V1, BOOKSTORE_V2]) {
      assert.ok(s.answeredBy[pod] >= 450 && s.answeredBy[pod] <= 550, `${pod} answered ${s.answeredBy[pod]} of 1000 (50 ± 5 %)`);
    }
    assert.deepEqual(s.errors, {});
  });

  it('a path, method or header bookstore-service-routes does not allow is refused by the bookstore sidecar: no route (404), no pod answers', async () => {
    const cases: [string, string[]][] = [
      ['path', ['--url', 'http://bookstore.bookstore:14001/books-stolen', ...BOOKBUYER_HEADERS]],
      ['method', ['--url', BOOKS_BOUGHT, '--method', 'POST', ...BOOKBUYER_HEADERS]],
      ['header', ['--url', BOOKS_BOUGHT, '--header', 'client-app:bookthief', '--header', 'user-agent:bookbuyer-http-client/1.0']],
    ];
    for (const [what, args] of cases) {
      const s = await traffic(BOOKBUYER, [...args, '--requests', '50']);
      console.log(`refused ${what}:`, JSON.stringify(s));
      assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '404': 50 }, answeredBy: {}, errors: {} }, what);
    }
    // The allowed match buy-a-book still answers, from both versions.
    const allowed = await traffic(BOOKBUYER, ['--url', 'http://bookstore.bookstore:14001/buy-a-book/new', '--requests', '100', '--concurrency', '2']);
    assert.deepEqual(allowed.statuses, { '200': 100 });
    assert.deepEqual(Object.keys(allowed.answeredBy).sort(), [BOOKSTORE_V1, BOOKSTORE_V2].sort());
  });

  it('bookwarehouse → mysql.bookwarehouse:3306 over TCP through the TCPRoute; bookbuyer, with no TrafficTarget, is cut off', async () => {
    const s = await traffic(BOOKWAREHOUSE, ['--tcp', 'mysql.bookwarehouse:3306', '--requests', '100', '--concurrency', '2']);
    console.log('mysql from bookwarehouse:', JSON.stringify(s));
    assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { ok: 100 }, answeredBy: { 'mysql-0': 100 }, errors: {} });
    const refused = await traffic(BOOKBUYER, ['--tcp', 'mysql.bookwarehouse:3306', '--requests', '20']);
    console.log('mysql from bookbuyer:', JSON.stringify(refused));
    assert.deepEqual(refused.answeredBy, {});
    assert.equal(total(refused.errors), 20);
  });

  it('bookthief is refused until MeshConfig turns permissive mode on, and again once it is off', async () => {
    const args = ['--url', BOOKS_BOUGHT, '--requests', '50', ...BOOKBUYER_HEADERS];
    const before = await traffic(BOOKTHIEF, args);
    console.log('bookthief, SMI mode:', JSON.stringify(before));
    // No TrafficTarget allows bookthief anything: its sidecar has no outbound listener to take the connection.
    assert.deepEqual({ statuses: before.statuses, answeredBy: before.answeredBy, errors: before.errors }, { statuses: {}, answeredBy: {}, errors: { ECONNREFUSED: 50 } });

    await edit('meshconfig.yaml', (t) => t.replace('enablePermissiveTrafficPolicyMode: false', 'enablePermissiveTrafficPolicyMode: true'));
    const open = await trafficUntil(BOOKTHIEF, args, (s) => s.statuses['200'] === 50, 'bookthief answered in permissive mode');
    const s = await traffic(BOOKTHIEF, [...args.slice(0, 2), '--requests', '400', '--concurrency', '4', ...BOOKBUYER_HEADERS]);
    console.log(`bookthief, permissive mode (after ${open.afterMs} ms):`, JSON.stringify(s));
    assert.deepEqual(s.statuses, { '200': 400 });
    assert.deepEqual(Object.keys(s.answeredBy).sort(), [BOOKSTORE_V1, BOOKSTORE_V2].sort());

    await edit('meshconfig.yaml', (t) => t.replace('enablePermissiveTrafficPolicyMode: true', 'enablePermissiveTrafficPolicyMode: false'));
    const closed = await trafficUntil(BOOKTHIEF, args, (r) => r.errors.ECONNREFUSED === 50, 'bookthief refused again');
    console.log(`bookthief, SMI mode again (after ${closed.afterMs} ms):`, JSON.stringify(closed.summary));
    assert.deepEqual(closed.summary.answeredBy, {});
  });

  it('a route that matches but whose RBAC does not name the source is refused with 403 (RBAC: access denied)', async () => {
    await writeFile(path.join(manifests, 'bookthief-buy-a-book.yaml'), BOOKTHIEF_BUYS_A_BOOK);
    try {
      const allowed = await trafficUntil(
        BOOKTHIEF,
        ['--url', 'http://bookstore-v1.bookstore:14001/buy-a-book/new', '--requests', '50'],
        (s) => s.statuses['200'] === 50,
        'bookthief allowed buy-a-book',
      );
      console.log('bookthief buy-a-book on bookstore-v1:', JSON.stringify(allowed.summary));
      assert.deepEqual(allowed.summary.answeredBy, { [BOOKSTORE_V1]: 50 });
      const denied = await traffic(BOOKTHIEF, ['--url', 'http://bookstore-v1.bookstore:14001/books-bought', '--requests', '50', ...BOOKBUYER_HEADERS]);
      console.log('bookthief books-bought on bookstore-v1:', JSON.stringify(denied));
      assert.deepEqual({ statuses: denied.statuses, answeredBy: denied.answeredBy }, { statuses: { '403': 50 }, answeredBy: {} });
    } finally {
      await rm(path.join(manifests, 'bookthief-buy-a-book.yaml'));
    }
  });

  it('a TrafficSplit edited to 100/0 holds in traffic: every request goes to bookstore-v1', async () => {
    const before = (await versions('bookbuyer/bookbuyer')).acked;
    const edited = Date.now();
    await edit('split.yaml', (t) => t.replace(/weight: 50(\s+- service: bookstore-v2\s+)weight: 50/, 'weight: 100$1weight: 0'));
    // Once bookbuyer's sidecar has ACKed the push, every request must follow the new split.
    const ackedMs = await newConfigurationAcked('bookbuyer/bookbuyer', before, edited);
    console.log(`split 100/0: bookbuyer's sidecar ACKed the new configuration ${ackedMs} ms after the file was written`);
    // (An unrelated push could be the one ACKed: traffic itself says when the split is in force.)
    await trafficUntil(BOOKBUYER, ['--url', BOOKS_BOUGHT, '--requests', '50', ...BOOKBUYER_HEADERS], (b) => b.answeredBy[BOOKSTORE_V1] === 50, 'the split 100/0 in force');
    const s = await traffic(BOOKBUYER, ['--url', BOOKS_BOUGHT, '--requests', '500', '--concurrency', '4', ...BOOKBUYER_HEADERS]);
    console.log('split 100/0:', JSON.stringify(s));
    assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '200': 500 }, answeredBy: { [BOOKSTORE_V1]: 500 }, errors: {} });
  });

  it('a pod removed from the manifests gets no more requests', async () => {
    await edit('bookstore.yaml', (t) => `${t.trimEnd()}\n${EXTRA_V1_POD}`);
    const args = ['--url', 'http://bookstore-v1.bookstore:14001/books-bought', '--requests', '200', '--concurrency', '4', ...BOOKBUYER_HEADERS];
    const both = await trafficUntil(BOOKBUYER, args, (s) => (s.answeredBy['bookstore-6b7f8d9c5-x7k2z'] ?? 0) > 0 && s.statuses['200'] === 200, 'the added pod answering');
    console.log('bookstore-v1 with two pods:', JSON.stringify(both.summary));
    assert.deepEqual(Object.keys(both.summary.answeredBy).sort(), [BOOKSTORE_V1, 'bookstore-6b7f8d9c5-x7k2z'].sort());

    const before = (await versions('bookbuyer/bookbuyer')).acked;
    const removedAt = Date.now();
    await edit('bookstore.yaml', (t) => t.replace(EXTRA_V1_POD, ''));
    const ackedMs = await newConfigurationAcked('bookbuyer/bookbuyer', before, removedAt);
    await trafficUntil(BOOKBUYER, args, (b) => b.answeredBy[BOOKSTORE_V1] === 200, 'the removed pod out of the endpoints');
    const s = await traffic(BOOKBUYER, [...args.slice(0, 2), '--requests', '500', '--concurrency', '4', ...BOOKBUYER_HEADERS]);
    console.log(`pod removed (bookbuyer's sidecar ACKed ${ackedMs} ms after the file was written):`, JSON.stringify(s));
    assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { '200': 500 }, answeredBy: { [BOOKSTORE_V1]: 500 }, errors: {} });
  });
});

/** The manifests of the echo lab: a client, two flaky HTTP services (one with a Retry), a gRPC service and a host outside the mesh. */
function echoManifests(): string {
  const app = (pod: string, sa: string, listen: string[], extra: string[] = []) =>
    JSON.stringify([process.execPath, LAB_TOOLS, 'lab', 'app', '--pod', pod, '--namespace', 'echo', '--service-account', sa, ...listen.flatMap((l) => ['--listen', l]), ...extra]);
  const service = (name: string, ip: string, port: number, portName: string) => `---
apiVersion: v1
kind: ServiceAccount
metadata: { name: ${name}, namespace: echo }
---
apiVersion: v1
kind: Service
metadata: { name: ${name}, namespace: echo }
spec:
  clusterIP: ${ip}
  selector: { app: ${name} }
  ports: [{ name: ${portName}, port: ${port} }]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: { name: client-${name}, namespace: echo }
spec:
  destination: { kind: ServiceAccount, name: ${name}, namespace: echo }
  sources: [{ kind: ServiceAccount, name: client, namespace: echo }]
  rules: [{ kind: HTTPRouteGroup, name: everything, matches: [all] }]
`;
  const pod = (name: string, app: string, ip: string, port: number, portName: string, command: string) => `---
apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: echo
  labels: { app: ${app} }
  annotations: { lab.trellis.dev/command: '${command}' }
spec:
  serviceAccountName: ${app}
  containers: [{ name: app, ports: [{ name: ${portName}, containerPort: ${port} }] }]
status: { phase: Running, podIP: ${ip} }
`;
  return `apiVersion: v1
kind: Namespace
metadata: { name: echo, labels: { openservicemesh.io/monitored-by: osm } }
---
apiVersion: v1
kind: Namespace
metadata: { name: outside }
---
apiVersion: config.openservicemesh.io/v1alpha2
kind: MeshConfig
metadata: { name: osm-mesh-config, namespace: osm-system }
spec:
  traffic: { enablePermissiveTrafficPolicyMode: false, enableEgress: false }
  featureFlags: { enableRetryPolicy: true }
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: { name: everything, namespace: echo }
spec:
  matches: [{ name: all, pathRegex: ".*", methods: ["*"] }]
---
apiVersion: v1
kind: ServiceAccount
metadata: { name: client, namespace: echo }
---
apiVersion: v1
kind: Pod
metadata: { name: client-0, namespace: echo }
spec: { serviceAccountName: client, containers: [{ name: app }] }
status: { phase: Running, podIP: 10.244.50.10 }
---
apiVersion: v1
kind: Pod
metadata: { name: outsider-0, namespace: outside }
spec: { containers: [{ name: app }] }
status: { phase: Running, podIP: 10.244.51.10 }
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: { name: client-flaky, namespace: echo }
spec:
  source: { kind: ServiceAccount, name: client, namespace: echo }
  destinations: [{ kind: Service, name: flaky, namespace: echo }]
  retryPolicy: { retryOn: "5xx", perTryTimeout: 2s, numRetries: 5, retryBackoffBaseInterval: 10ms }
${service('flaky', '10.96.50.1', 8080, 'http')}${pod('flaky-0', 'flaky', '10.244.50.21', 8080, 'http', app('flaky-0', 'flaky', ['http:8080'], ['--fail-first', '3']))}${service('fragile', '10.96.50.2', 8080, 'http')}${pod('fragile-0', 'fragile', '10.244.50.31', 8080, 'http', app('fragile-0', 'fragile', ['http:8080'], ['--fail-first', '3']))}${service('greeter', '10.96.50.3', 9000, 'grpc')}${pod('greeter-0', 'greeter', '10.244.50.41', 9000, 'grpc', app('greeter-0', 'greeter', ['grpc:9000']))}`;
}

describe('retries, gRPC and plaintext through the sidecars of an echo lab', { skip, timeout: 600_000 }, () => {
  let lab: Lab;
  let manifests: string;
  const CLIENT = { pod: 'client-0', namespace: 'echo' };
  const OUTSIDER = { pod: 'outsider-0', namespace: 'outside' };

  const traffic = (from: LabPodRef, args: string[]): Promise<TrafficSummary> => trafficIn(lab, from, args);

  before(async () => {
    manifests = await mkdtemp(path.join(tmpdir(), `${PREFIX}-echo-manifests-`));
    await writeFile(path.join(manifests, 'echo.yaml'), echoManifests());
    lab = await startLab({ manifestsDir: manifests, prefix: PREFIX, subnet: SUBNET, httpAddress: `127.0.0.1:${LAB_SUITE_PORTS.labTrafficEcho.http}`, xdsPort: LAB_SUITE_PORTS.labTrafficEcho.xds, stateDir: path.join('/tmp', `${PREFIX}-lab-echo-${process.pid}`) });
    await lab.waitForAllAcked(120_000);
  });

  after(async () => {
    await lab?.stop();
    if (manifests) await rm(manifests, { recursive: true, force: true });
  });

  it("a Retry (retryOn 5xx) hides the first failures of its destination; a service without one shows them", async () => {
    const retried = await traffic(CLIENT, ['--url', 'http://flaky.echo:8080/', '--requests', '10']);
    console.log('flaky.echo with Retry:', JSON.stringify(retried));
    assert.deepEqual({ statuses: retried.statuses, answeredBy: retried.answeredBy, errors: retried.errors }, { statuses: { '200': 10 }, answeredBy: { 'flaky-0': 10 }, errors: {} });
    const plain = await traffic(CLIENT, ['--url', 'http://fragile.echo:8080/', '--requests', '10']);
    console.log('fragile.echo without Retry:', JSON.stringify(plain));
    assert.deepEqual({ statuses: plain.statuses, answeredBy: plain.answeredBy, errors: plain.errors }, { statuses: { '200': 7, '503': 3 }, answeredBy: { 'fragile-0': 10 }, errors: {} });
  });

  it('gRPC unary calls reach the service on its port named grpc through both sidecars', async () => {
    const s = await traffic(CLIENT, ['--grpc', 'greeter.echo:9000', '--requests', '100', '--concurrency', '4']);
    console.log('greeter.echo gRPC:', JSON.stringify(s));
    assert.deepEqual({ statuses: s.statuses, answeredBy: s.answeredBy, errors: s.errors }, { statuses: { OK: 100 }, answeredBy: { 'greeter-0': 100 }, errors: {} });
  });

  it("a host outside the mesh cannot reach a meshed pod's app in plaintext: its sidecar takes the connection and wants mTLS", async () => {
    const s = await traffic(OUTSIDER, ['--url', 'http://10.244.50.31:8080/', '--requests', '20']);
    console.log('outsider → fragile-0 pod IP:', JSON.stringify(s));
    assert.deepEqual(s.answeredBy, {});
    assert.deepEqual(s.statuses, {});
    assert.equal(total(s.errors), 20);
  });
});
