/**
 * `trellis explain` on examples/bookstore (SMI): the engine offline (the manifests loaded as the
 * controller loads them), the command line's exit statuses, and the same answer from a started
 * controller's `/debug/explain` as offline. Ports 19620-19621.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { ExplainError, explainRequest, type Explanation, type ExplainQuery } from '../src/explain/explain.js';
import { formatExplanation } from '../src/explain/format.js';
import { loadMeshDirectory, type MeshDirectory } from '../src/offline/mesh-directory.js';
import { watchController } from './helpers/controller-process.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const EXAMPLE = path.join(REPO, 'examples/bookstore');
const BIN = path.join(REPO, 'bin/trellis.js');

/** What bookbuyer's client sends (the HTTPRouteGroup's books-bought match wants both headers). */
const BOOKBUYER_HEADERS = { 'user-agent': 'Go-http-client/1.1', 'client-app': 'bookbuyer' };
const BOOKS_BOUGHT: ExplainQuery = { from: 'bookbuyer/bookbuyer', to: 'bookstore.bookstore:14001', path: '/books-bought', method: 'GET', headers: BOOKBUYER_HEADERS };
const BOOKTHIEF: ExplainQuery = { from: 'bookthief/bookthief', to: 'bookstore.bookstore:14001' };

/** An unmonitored ingress namespace whose controller Service an IngressBackend of bookstore-v1 names, and an Ingress routing /books-bought to it. */
const INGRESS = `apiVersion: v1
kind: Namespace
metadata: {name: ingress-nginx}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: ingress-nginx, namespace: ingress-nginx}
---
apiVersion: v1
kind: Service
metadata: {name: ingress-nginx-controller, namespace: ingress-nginx}
spec:
  clusterIP: 10.96.20.1
  selector: {app: ingress-nginx}
  ports: [{name: http, port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: ingress-nginx-controller-0, namespace: ingress-nginx, labels: {app: ingress-nginx}}
spec:
  serviceAccountName: ingress-nginx
  containers: [{name: controller, image: ingress-nginx/controller}]
status: {phase: Running, podIP: 10.244.9.1}
---
apiVersion: v1
kind: Pod
metadata: {name: other-0, namespace: ingress-nginx, labels: {app: other}}
spec:
  containers: [{name: other, image: other}]
status: {phase: Running, podIP: 10.244.9.2}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bookstore, namespace: bookstore}
spec:
  ingressClassName: nginx
  rules:
    - host: bookstore.example.com
      http:
        paths:
          - path: /books-bought
            pathType: Prefix
            backend: {service: {name: bookstore-v1, port: {number: 14001}}}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: IngressBackend
metadata: {name: bookstore, namespace: bookstore}
spec:
  backends:
    - name: bookstore-v1
      port: {number: 14001, protocol: http}
  sources:
    - kind: Service
      name: ingress-nginx-controller
      namespace: ingress-nginx
`;

/** Runs `trellis explain ARGS` (the built bin/), resolving with its exit status and output. */
function runExplain(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, 'explain', ...args], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** The command line arguments of a query. */
function queryArgs(q: ExplainQuery): string[] {
  return [
    ...(q.from ? ['--from', q.from] : []),
    ...(q.fromPod ? ['--from-pod', q.fromPod] : []),
    '--to', q.to,
    ...(q.path ? ['--path', q.path] : []),
    ...(q.method ? ['--method', q.method] : []),
    ...Object.entries(q.headers ?? {}).flatMap(([k, v]) => ['--header', `${k}=${v}`]),
  ];
}

describe('trellis explain', () => {
  let dir: string;
  let mesh: MeshDirectory;
  const explain = (q: ExplainQuery): Explanation => explainRequest(mesh.snapshot, mesh.store, q);
  /** A copy of the example whose MeshConfig turns `setting` (false in the example) on, loaded. */
  const exampleWithMeshConfig = async (setting: 'enablePermissiveTrafficPolicyMode' | 'enableEgress'): Promise<MeshDirectory> => {
    const copy = path.join(dir, setting);
    await cp(EXAMPLE, copy, { recursive: true });
    const file = path.join(copy, 'meshconfig.yaml');
    await writeFile(file, (await readFile(file, 'utf8')).replace(`${setting}: false`, `${setting}: true`));
    return loadMeshDirectory({ dir: copy });
  };

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 's9e-explain-'));
    mesh = await loadMeshDirectory({ dir: EXAMPLE });
    assert.deepEqual(mesh.manifestErrors, []);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('bookthief → bookstore is denied: its proxy has no route there, no TrafficTarget names it as a source, and bookstore\'s inbound RBAC admits bookbuyer only', () => {
    const e = explain(BOOKTHIEF);
    assert.equal(e.decision, 'denied');
    assert.equal(e.mode, 'smi');
    assert.match(e.outbound?.denied ?? '', /no outbound listener/);
    assert.deepEqual(e.outbound?.trafficTargets, []);
    assert.ok(e.reasons.some((r) => r.includes('no TrafficTarget names bookthief/bookthief as a source') && r.includes('bookstore/bookstore (sources bookbuyer/bookbuyer)')), e.reasons.join('\n'));
    // What the destination's inbound side holds, for its RBAC: bookstore's proxies (both identities behind the apex).
    assert.deepEqual(e.inbound.map((i) => [i.identity, i.reached, i.filterChain]), [
      ['bookstore/bookstore', false, 'inbound_bookstore/bookstore|14001_http'],
      ['bookstore/bookstore-v2', false, 'inbound_bookstore/bookstore|14001_http'],
    ]);
    for (const i of e.inbound) {
      assert.deepEqual(i.networkRbac?.policies, [{ name: 'bookstore/bookstore|14001|inbound', principals: ['spiffe://cluster.local/ns/bookbuyer/sa/bookbuyer'] }]);
      assert.equal(i.networkRbac?.admittedBy, null);
    }
  });

  it('bookbuyer → bookstore GET /books-bought is allowed: the outbound route splits 50/50 (TrafficSplit bookstore-split), each backend by its TrafficTarget and the books-bought match', () => {
    const e = explain(BOOKS_BOUGHT);
    assert.equal(e.decision, 'allowed', formatExplanation(e));
    assert.equal(e.outbound?.listener, 'outbound-listener');
    assert.equal(e.outbound?.filterChain, 'outbound_http_14001');
    assert.equal(e.outbound?.route?.routeConfiguration, 'rds-outbound.14001');
    assert.equal(e.outbound?.route?.virtualHost, 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
    assert.deepEqual(e.outbound?.clusters, [{ name: 'bookstore/bookstore-v1|14001', weight: 50 }, { name: 'bookstore/bookstore-v2|14001', weight: 50 }]);
    assert.deepEqual(e.outbound?.trafficSplit, { name: 'bookstore/bookstore-split', backends: [{ service: 'bookstore-v1', weight: 50 }, { service: 'bookstore-v2', weight: 50 }] });
    assert.deepEqual(e.inbound.map((i) => [i.service, i.identity, i.weight, i.allowed, i.route?.route, i.httpRbac?.admittedBy]), [
      ['bookstore/bookstore-v1', 'bookstore/bookstore', 50, true, 'bookstore/bookstore-service-routes/books-bought', 'bookstore/bookstore-service-routes/books-bought'],
      ['bookstore/bookstore-v2', 'bookstore/bookstore-v2', 50, true, 'bookstore/bookstore-service-routes/books-bought', 'bookstore/bookstore-service-routes/books-bought'],
    ]);
    assert.match(e.inbound[0].policies[0], /^TrafficTarget bookstore\/bookstore: HTTPRouteGroup bookstore\/bookstore-service-routes match books-bought /);
    assert.match(e.inbound[1].policies[0], /^TrafficTarget bookstore\/bookstore-v2: HTTPRouteGroup bookstore\/bookstore-service-routes match books-bought /);
  });

  it('a method or header mismatch is denied (404 on the inbound route configuration), naming the match that failed and why', () => {
    const post = explain({ ...BOOKS_BOUGHT, method: 'POST' });
    assert.equal(post.decision, 'denied');
    for (const i of post.inbound) {
      assert.equal(i.route?.route, null);
      assert.deepEqual(i.route?.misses.find((m) => m.route === 'bookstore/bookstore-service-routes/books-bought')?.reason, 'method "POST" does not match (the route wants it to match ^(GET)$)');
      assert.match(i.denied ?? '', /no route .* matches POST \/books-bought \(404\)/);
    }
    const thiefHeader = explain({ ...BOOKS_BOUGHT, headers: { ...BOOKBUYER_HEADERS, 'client-app': 'bookthief' } });
    assert.equal(thiefHeader.decision, 'denied');
    assert.equal(thiefHeader.inbound[0].route?.misses[0].reason, 'header client-app "bookthief" does not match (the route wants it to match bookbuyer)');
    const noHeaders = explain({ ...BOOKS_BOUGHT, headers: {} });
    assert.equal(noHeaders.inbound[0].route?.misses[0].reason, 'header client-app is missing (the route wants it to match bookbuyer); header user-agent is missing (the route wants it to match .*-http-client/*.*)');
    assert.match(formatExplanation(noHeaders), /not matched: bookstore\/bookstore-service-routes\/books-bought: header client-app is missing/);
    const why = formatExplanation(noHeaders).split('\nsource proxy')[0];
    assert.match(why, /^why:\n  - bookstore\/bookstore-v1 .*\(404\); not matched: bookstore\/bookstore-service-routes\/books-bought: header client-app is missing/m, 'the summary says which header was missing');
  });

  it('permissive mode allows bookthief too, as permissive', async () => {
    const permissive = await exampleWithMeshConfig('enablePermissiveTrafficPolicyMode');
    const e = explainRequest(permissive.snapshot, permissive.store, BOOKTHIEF);
    assert.equal(e.decision, 'allowed', formatExplanation(e));
    assert.equal(e.mode, 'permissive');
    assert.match(e.reasons[0], /^permissive mode/);
    assert.ok(e.inbound.every((i) => i.networkRbac === null && i.httpRbac === null && i.policies[0].startsWith('permissive mode')));
  });

  it('with egress on, bookthief\'s request leaves by the passthrough chain in plaintext, and bookstore\'s inbound listener takes no plaintext without an IngressBackend', async () => {
    const egress = await exampleWithMeshConfig('enableEgress');
    const e = explainRequest(egress.snapshot, egress.store, BOOKTHIEF);
    assert.equal(e.decision, 'denied');
    assert.equal(e.outbound?.passthrough, true);
    assert.equal(e.outbound?.filterChain, 'outbound-egress-passthrough');
    assert.ok(e.inbound.length > 0 && e.inbound.every((i) => i.reached && i.via === 'plaintext' && /no IngressBackend chain matches/.test(i.denied ?? '')), formatExplanation(e));
  });

  it('a source outside the mesh reaches bookstore-v1 only through its IngressBackend: the ingress controller\'s pod on the Ingress path, not another pod, not another path', async () => {
    const copy = path.join(dir, 'ingress');
    await cp(EXAMPLE, copy, { recursive: true });
    await writeFile(path.join(copy, 'ingress.yaml'), INGRESS);
    const withIngress = await loadMeshDirectory({ dir: copy });
    assert.deepEqual(withIngress.problems.filter((p) => p.kind === 'IngressBackend'), []);
    const ask = (q: Partial<ExplainQuery>) => explainRequest(withIngress.snapshot, withIngress.store, { to: 'bookstore-v1.bookstore:14001', path: '/books-bought', headers: { host: 'bookstore.example.com' }, ...q });
    const ingress = ask({ from: 'ingress-nginx/ingress-nginx' });
    assert.equal(ingress.decision, 'allowed', formatExplanation(ingress));
    assert.equal(ingress.outbound, null);
    assert.deepEqual(ingress.request.sourceIps, ['10.244.9.1']);
    assert.equal(ingress.inbound[0].filterChain, 'ingress_bookstore/bookstore-v1_14001_http');
    assert.equal(ingress.inbound[0].route?.routeConfiguration, 'rds-ingress.14001');
    assert.deepEqual(ingress.inbound[0].policies, ['IngressBackend bookstore/bookstore']);
    const other = ask({ fromPod: 'ingress-nginx/other-0' });
    assert.equal(other.decision, 'denied');
    assert.match(other.inbound[0].denied ?? '', /matches source address 10\.244\.9\.2/);
    const otherPath = ask({ from: 'ingress-nginx/ingress-nginx', path: '/books' });
    assert.equal(otherPath.decision, 'denied');
    assert.match(otherPath.inbound[0].route?.misses[0].reason ?? '', /path \/books is not \/books-bought/);
  });

  it('an unknown identity, pod, service or port is an error naming it', () => {
    const unknown = (q: ExplainQuery, message: RegExp) => assert.throws(() => explain(q), (err: unknown) => err instanceof ExplainError && err.kind === 'unknown' && message.test(err.message));
    unknown({ from: 'bookthief/nobody', to: 'bookstore.bookstore:14001' }, /identity bookthief\/nobody unknown/);
    unknown({ fromPod: 'bookthief/nopod', to: 'bookstore.bookstore:14001' }, /pod bookthief\/nopod not found/);
    unknown({ from: 'bookbuyer/bookbuyer', to: 'nope.bookstore:14001' }, /service bookstore\/nope is not a service of the mesh/);
    unknown({ from: 'bookbuyer/bookbuyer', to: 'bookstore.bookstore:80' }, /service bookstore\/bookstore has no port 80 \(its ports: 14001\)/);
    assert.throws(() => explain({ from: 'bookbuyer', to: 'bookstore.bookstore:14001' }), (err: unknown) => err instanceof ExplainError && err.kind === 'invalid');
  });

  it('the command line exits 0 allowed, 1 denied, 2 unknown; a started controller\'s /debug/explain gives the offline answer', async () => {
    const offlineAllowed = await runExplain([...queryArgs(BOOKS_BOUGHT), '--manifests', EXAMPLE, '--output', 'json']);
    assert.equal(offlineAllowed.code, 0, offlineAllowed.stderr);
    assert.deepEqual(JSON.parse(offlineAllowed.stdout), JSON.parse(JSON.stringify(explain(BOOKS_BOUGHT))));
    const offlineDenied = await runExplain([...queryArgs(BOOKTHIEF), '--manifests', EXAMPLE]);
    assert.equal(offlineDenied.code, 1, offlineDenied.stderr);
    assert.match(offlineDenied.stdout, /^DENIED: bookthief\/bookthief → bookstore\.bookstore:14001 GET \//);
    const unknown = await runExplain(['--from', 'bookthief/nobody', '--to', 'bookstore.bookstore:14001', '--manifests', EXAMPLE]);
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /trellis explain: identity bookthief\/nobody unknown/);
    const unreachable = await runExplain([...queryArgs(BOOKTHIEF), '--controller', 'http://127.0.0.1:19622']);
    assert.equal(unreachable.code, 2);
    assert.match(unreachable.stderr, /cannot reach the controller at http:\/\/127\.0\.0\.1:19622/);

    const child = spawn(process.execPath, [BIN, 'controller', '--manifests', EXAMPLE, '--state-dir', path.join(dir, 'state'), '--xds-address', '127.0.0.1:19621', '--http-address', '127.0.0.1:19620'], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const controller = watchController(child);
    try {
      const port = await controller.httpPort;
      const url = `http://127.0.0.1:${port}`;
      for (const q of [BOOKS_BOUGHT, BOOKTHIEF, { ...BOOKS_BOUGHT, method: 'POST' }]) {
        // Offline: the same answer in process (the command line's --manifests path is the one above).
        const offline = explain(q);
        const online = await runExplain([...queryArgs(q), '--controller', url, '--output', 'json']);
        assert.equal(online.code, offline.decision === 'allowed' ? 0 : 1, online.stderr);
        assert.deepEqual({ ...(JSON.parse(online.stdout) as Explanation), generation: 0 }, { ...offline, generation: 0 });
      }
      const missing = await runExplain(['--from', 'bookbuyer/bookbuyer', '--to', 'bookstore.bookstore:80', '--controller', url]);
      assert.equal(missing.code, 2);
      assert.match(missing.stderr, /service bookstore\/bookstore has no port 80/);
      const bad = await fetch(`${url}/debug/explain?from=bookbuyer/bookbuyer`);
      assert.equal(bad.status, 400);
      assert.deepEqual(await bad.json(), { error: 'query parameter "to" (SERVICE.NAMESPACE:PORT) is required' });
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0);
  });
});
