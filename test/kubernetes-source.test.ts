import { randomUUID } from 'node:crypto';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, beforeEach, it } from 'node:test';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { runController, type RunningController } from '../src/main.js';
import { KubernetesSource, loadKubeConfig } from '../src/sources/kubernetes/index.js';
import { ObjectStore } from '../src/store/object-store.js';
import type { KubeObject, ObjectKind } from '../src/store/objects.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { DEFAULT_RESOURCE_TYPES, FakeKubeApiServer } from './helpers/fake-kube-apiserver.js';
import { describeOn, RealKubeApiServer, statusOf } from './helpers/kube-real-apiserver.js';
import { Kubectl, findKubectl } from './helpers/kubectl.js';
import { freePort } from './helpers/ports.js';
import { SimulatedSidecar } from './helpers/sidecar.js';
import { eventually } from './helpers/wait.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');
const kubectl = findKubectl();
const silent = pino({ level: 'silent' });
const FAST = { backoff: { initialMs: 20, maxMs: 200 }, watchTimeoutSeconds: 30 };

/** Polls `check` until it returns true (bounded). */
const until = (check: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000) => eventually(check, what, timeoutMs, 20);

function names(store: ObjectStore, kind: ObjectKind, namespace?: string): string[] {
  return store.list(kind, namespace).map((o) => (namespace || !o.metadata.namespace ? o.metadata.name : `${o.metadata.namespace}/${o.metadata.name}`));
}

function service(namespace: string, name: string, port = 80): Record<string, unknown> {
  return { apiVersion: 'v1', kind: 'Service', metadata: { name, namespace }, spec: { ports: [{ name: 'http', port }], selector: { app: name } } };
}

/** The file's real kube-apiserver, started by the first suite that needs it, stopped when the file ends. */
let realServerStarting: Promise<RealKubeApiServer> | undefined;
const realServerOfFile = () => (realServerStarting ??= RealKubeApiServer.start({ name: 'source', apiserverArgs: ['--watch-cache-sizes=services#0'] }));
after(async () => {
  await (await realServerStarting?.catch(() => undefined))?.shutdown();
});

// Against a new fake per test, and against one real kube-apiserver for the file (skipped without
// its binaries, which .ci/run installs), each test in its own namespaces there. The real server
// sends Service watches to etcd (no watch cache for them) so that an etcd compaction gives the
// 410 a resumed watch gets; other kinds go through its watch cache, which sends a bookmark 2 s
// before a watch's timeout (hence the short watches). What only the fake can do (count and drop
// watches, fail requests, serve without a CRD) is tested against the fake only.
for (const target of ['fake', 'real'] as const) describeOn(target, `Kubernetes source against the ${target} API server`, () => {
  let dir: string;
  let realServer: RealKubeApiServer | undefined;
  const cleanups: (() => Promise<void>)[] = [];
  const options = target === 'fake' ? FAST : { ...FAST, watchTimeoutSeconds: 5 };
  let tests = 0;
  /** A namespace name of this test: `base` on a fake (a new server per test), unique on the real server. */
  let ns = (base: string) => base;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-kube-source-'));
    if (target === 'real') realServer = await realServerOfFile();
  });
  beforeEach(() => {
    const n = ++tests;
    if (target === 'real') ns = (base) => `${base}-${n}`;
  });
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** The server of one test: a new fake, or the file's real server. */
  const serverFor = (fakeOptions: ConstructorParameters<typeof FakeKubeApiServer>[0] = {}) => realServer ?? new FakeKubeApiServer(fakeOptions);

  /** Creates namespace {@link ns}(`base`) (a real server refuses objects in a missing one) and returns its name. */
  async function namespace(server: FakeKubeApiServer | RealKubeApiServer, base: string): Promise<string> {
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns(base) } });
    return ns(base);
  }

  async function setUp(server: FakeKubeApiServer | RealKubeApiServer): Promise<{ store: ObjectStore; source: KubernetesSource }> {
    if (!server.running) await server.start();
    cleanups.push(() => server.stop());
    const kubeconfig = await server.writeKubeconfig(path.join(dir, randomUUID()));
    const store = new ObjectStore();
    const source = new KubernetesSource({ store, kubeConfig: loadKubeConfig(kubeconfig), meshName: 'osm', logger: silent, ...options });
    cleanups.push(() => source.stop());
    source.start();
    return { store, source };
  }

  if (target === 'fake') {
    it('refuses to start without any kubeconfig instead of trying http://localhost:8080', () => {
      const saved = { KUBECONFIG: process.env.KUBECONFIG, KUBERNETES_SERVICE_HOST: process.env.KUBERNETES_SERVICE_HOST };
      process.env.KUBECONFIG = path.join(os.tmpdir(), `${randomUUID()}-missing`);
      delete process.env.KUBERNETES_SERVICE_HOST; // not in a pod, even if the tests run in one
      try {
        assert.throws(() => loadKubeConfig(), /no kubeconfig: not in a pod, and no file of \$KUBECONFIG/);
      } finally {
        for (const [name, value] of Object.entries(saved)) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
      }
    });
  }

  it('lists and watches every kind into the store, normalised to one shape', async () => {
    const server = serverFor({ bookmarkIntervalMs: 100 });
    const [app, elsewhere] = [ns('app'), ns('elsewhere')];
    const mine = (store: ObjectStore) => names(store, 'Namespace').filter((n) => n === app || n === elsewhere);
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: app, labels: { 'openservicemesh.io/monitored-by': 'osm' } } });
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: elsewhere } });
    await server.apply({ ...service(app, 'listed'), metadata: { name: 'listed', namespace: app, managedFields: [{ manager: 'kubectl' }] } });
    const { store, source } = await setUp(server);
    await source.whenSynced();
    assert.ok(source.synced);
    assert.deepEqual(mine(store), [app], 'only monitored namespaces');
    await server.apply({ ...service(app, 'watched'), metadata: { name: 'watched', namespace: app, managedFields: [{ manager: 'kubectl' }] } });
    await until(() => store.get('Service', app, 'watched') !== undefined, 'the watched service');
    for (const name of ['listed', 'watched']) {
      const object = store.get<KubeObject>('Service', app, name)!;
      assert.equal(object.apiVersion, 'v1');
      assert.equal(object.kind, 'Service');
      assert.equal((object.metadata as unknown as Record<string, unknown>).managedFields, undefined);
      assert.equal(typeof (object.metadata as unknown as Record<string, unknown>).creationTimestamp, 'string');
    }
    // A namespace that gets the label joins the mesh; one that loses it leaves.
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: elsewhere, labels: { 'openservicemesh.io/monitored-by': 'osm' } } });
    await server.apply({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: app } });
    await until(() => mine(store).join() === elsewhere, 'namespace label changes');
    // Bookmarks advance the resourceVersion without changes to the kind.
    const reflector = source.reflector('TrafficSplit')!;
    const before = Number(reflector.resourceVersion);
    await until(() => Number(reflector.resourceVersion) > before, 'a bookmark to advance the resourceVersion', target === 'real' ? 30_000 : 10_000);
  });

  it('recovers a dropped watch with nothing missed, including changes made while the server was down', async () => {
    const server = serverFor();
    const app = await namespace(server, 'app');
    const services = (store: ObjectStore) => names(store, 'Service', app).join();
    await server.apply(service(app, 'a'));
    await server.apply(service(app, 'b'));
    const { store, source } = await setUp(server);
    await source.whenSynced();
    const lists = source.reflector('Service')!.stats.lists;
    const kinds = DEFAULT_RESOURCE_TYPES.length - 3; // not secrets, configmaps, leases
    if (server instanceof FakeKubeApiServer) {
      await until(() => server.activeWatches === kinds, 'every watch open');
      assert.equal(server.dropWatches(), kinds);
    } else {
      assert.ok(server.dropConnections() > 0, 'connections cut');
    }
    await server.apply(service(app, 'c'));
    await server.remove('Service', app, 'a');
    await until(() => services(store) === 'b,c', 'changes made right after the drop');
    if (server instanceof FakeKubeApiServer) await until(() => server.activeWatches === kinds, 'every watch re-opened');
    await server.stop();
    await server.apply(service(app, 'd', 8080));
    await server.apply(service(app, 'b', 9090));
    await server.remove('Service', app, 'c');
    assert.deepEqual(names(store, 'Service', app), ['b', 'c'], 'the store keeps its objects while the server is down');
    await server.start();
    await until(() => services(store) === 'b,d', 'changes made while the server was down');
    assert.equal((store.get<KubeObject>('Service', app, 'b')!.spec as { ports: { port: number }[] }).ports[0].port, 9090);
    assert.equal(source.reflector('Service')!.stats.lists, lists, 'resumed from the resourceVersion, no relist');
    assert.ok(source.reflector('Service')!.stats.failures > 0);
  });

  for (const expiredWatch of target === 'fake' ? (['error-event', 'http-410'] as const) : (['etcd compaction'] as const)) {
    it(`relists on 410 (${expiredWatch}) and reconciles deletions made meanwhile`, async () => {
      const server = expiredWatch === 'etcd compaction' ? serverFor() : new FakeKubeApiServer({ expiredWatch });
      const app = await namespace(server, 'app');
      await server.apply(service(app, 'kept'));
      await server.apply(service(app, 'deleted'));
      const { store, source } = await setUp(server);
      await source.whenSynced();
      await server.stop();
      await server.remove('Service', app, 'deleted');
      await server.apply(service(app, 'added'));
      await server.compact();
      await server.start();
      await until(() => names(store, 'Service', app).join() === 'added,kept', 'the relist');
      const reflector = source.reflector('Service')!;
      assert.ok(reflector.stats.expired >= 1, 'a 410 was seen');
      assert.ok(reflector.stats.lists >= 2, 'relisted');
    });
  }

  if (target === 'fake') {
    it('retries a list that fails with 5xx, with backoff, until it succeeds', async () => {
      const server = new FakeKubeApiServer();
      server.apply(service('app', 'a'));
      server.failNext(6, 500, (method, url) => method === 'GET' && url.startsWith('/api/v1/services') && !url.includes('watch='));
      await server.start();
      const { store, source } = await setUp(server);
      await source.whenSynced();
      assert.deepEqual(names(store, 'Service'), ['app/a']);
      const serviceLists = server.requests.filter((r) => r.url.startsWith('/api/v1/services') && !r.watch);
      assert.deepEqual(serviceLists.map((r) => r.status), [500, 500, 500, 500, 500, 500, 200]);
      assert.equal(source.reflector('Service')!.stats.failures, 6);
    });

    it('treats a kind whose CRD is not installed as empty, without blocking readiness', async () => {
      const server = new FakeKubeApiServer({ resources: DEFAULT_RESOURCE_TYPES.filter((r) => r.kind !== 'TrafficSplit' && r.kind !== 'Retry') });
      const { source } = await setUp(server);
      await source.whenSynced();
      const missing = source.status().filter((s) => s.missing).map((s) => s.kind).sort();
      assert.deepEqual(missing, ['Retry', 'TrafficSplit']);
    });
  } else {
    // Last: it deletes two CRDs of the file's server (and installs them again).
    it('treats a kind whose CRD is not installed as empty, without blocking readiness, and watches it once installed', async () => {
      const server = realServer!;
      const crds = ['trafficsplits.split.smi-spec.io', 'retries.policy.openservicemesh.io'];
      for (const name of crds) await server.objectsApi.delete({ apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition', metadata: { name } });
      await until(async () => (await server.objects('TrafficSplit').then(() => false, (err: unknown) => statusOf(err) === 404)), 'the TrafficSplit CRD gone', 30_000);
      const { store, source } = await setUp(server);
      await source.whenSynced();
      const missing = source.status().filter((s) => s.missing).map((s) => s.kind).sort();
      assert.deepEqual(missing, ['Retry', 'TrafficSplit']);
      const app = await namespace(server, 'app');
      await server.installCrds();
      await server.apply({ apiVersion: 'split.smi-spec.io/v1alpha2', kind: 'TrafficSplit', metadata: { name: 'late', namespace: app }, spec: { service: 'a', backends: [{ service: 'b', weight: 1 }] } });
      await until(() => store.get('TrafficSplit', app, 'late') !== undefined, 'a TrafficSplit of the CRD installed after the start', 30_000);
      assert.equal(source.reflector('TrafficSplit')!.missing, false);
    });
  }
});

// Each test is skipped on its own when kubectl is missing (a skipped suite would not count its tests as skipped).
/**
 * Deletes the Services of the file's earlier suites that hold a ClusterIP the example names: the
 * real server gave theirs at random from 10.96.0.0/16, so one may hold 10.96.10.1 and the
 * example's create would be refused (`provided IP is already allocated`).
 */
async function freeExampleClusterIps(k: Kubectl): Promise<void> {
  const wanted = new Set<string>();
  for (const file of await readdir(EXAMPLE)) {
    for (const m of (await readFile(path.join(EXAMPLE, file), 'utf8')).matchAll(/clusterIP: (\d+\.\d+\.\d+\.\d+)/g)) wanted.add(m[1]);
  }
  const list = JSON.parse(await k.ok(['get', 'services', '--all-namespaces', '-o', 'json'])) as { items: { metadata: { namespace: string; name: string }; spec: { clusterIP?: string } }[] };
  for (const svc of list.items) {
    if (svc.spec.clusterIP && wanted.has(svc.spec.clusterIP)) await k.ok(['delete', 'service', '-n', svc.metadata.namespace, svc.metadata.name]);
  }
}

// Against a fake, and a real kube-apiserver (skipped without its binaries, which .ci/run installs).
for (const target of ['fake', 'real'] as const) describeOn(target, `controller with --kubernetes, driven by a real kubectl, against the ${target} API server`, () => {
  let dir: string;
  let server: FakeKubeApiServer | RealKubeApiServer;
  let k: Kubectl;
  let running: RunningController;
  let starting: Promise<RunningController>;
  let httpPort: number;
  const buyerUuid = randomUUID();
  const clients: AdsTestClient[] = [];
  const sidecars: SimulatedSidecar[] = [];

  before(async () => {
    if (kubectl.skip) return;
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-kube-e2e-'));
    if (target === 'fake') server = await new FakeKubeApiServer({ bookmarkIntervalMs: 200 }).start();
    else {
      server = await realServerOfFile();
      await server.applyFile(path.join(import.meta.dirname, '../deploy/00-namespace.yaml')); // the controller's namespace, for its CA Secret
    }
    k = await Kubectl.for(server, kubectl.path ?? '', dir);
    await server.stop(); // unreachable when the controller starts
    httpPort = await freePort();
    // Not awaited: in Kubernetes mode the controller may wait for the API server (the shared CA) before it listens.
    starting = runController({
      kubernetes: { kubeconfig: k.kubeconfig, ...FAST },
      meshName: 'osm',
      stateDir: path.join(dir, 'state'),
      xdsAddress: '127.0.0.1:0',
      xdsPlaintextAddress: '127.0.0.1:0',
      httpAddress: `127.0.0.1:${httpPort}`,
      resyncIntervalMs: 60_000,
      debounceQuietMs: 20,
      controllerNamespace: 'osm-system',
      logger: silent,
    });
    starting.catch(() => undefined);
  });

  after(async () => {
    if (kubectl.skip) return;
    for (const s of sidecars) s.stop();
    for (const c of clients) c.close();
    await server?.start();
    await (running ?? (await starting.catch(() => undefined)))?.stop();
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** The /readyz status, 0 when nothing listens yet. */
  const readyz = async (): Promise<number> => {
    try {
      return (await fetch(`http://127.0.0.1:${httpPort}/readyz`)).status;
    } catch {
      return 0;
    }
  };

  function connect(namespace: string, serviceAccount: string): SimulatedSidecar {
    const client = new AdsTestClient(`127.0.0.1:${running.xdsPlaintextPort}`);
    clients.push(client);
    const sidecar = new SimulatedSidecar(client.openStream(`${buyerUuid}.sidecar.${serviceAccount}.${namespace}.cluster.local`)).start();
    sidecars.push(sidecar);
    return sidecar;
  }

  function bookstoreSplit(sidecar: SimulatedSidecar): [string, number][] | undefined {
    const rds = sidecar.get(TypeUrl.RouteConfiguration, 'rds-outbound.14001');
    const route = rds?.virtual_hosts?.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local')?.routes?.[0]?.route;
    return route?.weighted_clusters?.clusters.map((c: Decoded) => [c.name, c.weight.value]);
  }

  it('keeps /readyz false while the API server is unreachable, and true once every kind has synced', { skip: kubectl.skip }, async () => {
    // The operations server starts first, so the probes get an answer while the API server is down.
    await until(async () => (await readyz()) !== 0, 'the operations server to listen');
    for (let i = 0; i < 10; i += 1) {
      assert.equal(await readyz(), 503, 'not ready while the API server is unreachable');
      const health = await fetch(`http://127.0.0.1:${httpPort}/healthz`);
      assert.equal(health.status, 200, 'alive while waiting for the API server');
      await new Promise((r) => setTimeout(r, 50));
    }
    await server.start();
    running = await starting;
    await until(async () => (await readyz()) === 200, '/readyz after the API server came up');
  });

  it('serves proxies what kubectl applies: the bookstore example, then a split changed to 100/0', { skip: kubectl.skip }, async () => {
    // A real server refuses objects in a namespace not created yet (the directory's files are applied in name order).
    if (server instanceof RealKubeApiServer) {
      await k.apply(path.join(EXAMPLE, 'namespaces.yaml'));
      await freeExampleClusterIps(k);
    }
    await k.apply(EXAMPLE);
    // The proxy's pod, as the sidecar injector labels it (the controller checks proxy identities against pods).
    await k.ok(['label', 'pod', '-n', 'bookbuyer', '--all', `osm-proxy-uuid=${buyerUuid}`]);
    // No kubelet there: the pods' status (Running, their IP), which a create drops, is written as the manifests say.
    if (server instanceof RealKubeApiServer) await server.writePodStatuses(EXAMPLE);
    const buyer = connect('bookbuyer', 'bookbuyer');
    await buyer.until((s) => bookstoreSplit(s) !== undefined, 'the bookstore split for bookbuyer');
    assert.deepEqual(bookstoreSplit(buyer), [
      ['bookstore/bookstore-v1|14001', 50],
      ['bookstore/bookstore-v2|14001', 50],
    ]);
    const split = (await readFile(path.join(EXAMPLE, 'split.yaml'), 'utf8')).replace(/weight: 50(\s+- service: bookstore-v2\s+)weight: 50/, 'weight: 100$1weight: 0');
    assert.match(split, /weight: 0/);
    const file = path.join(dir, 'split.yaml');
    await writeFile(file, split);
    assert.match(await k.apply(file), /configured/);
    await buyer.until((s) => JSON.stringify(bookstoreSplit(s)) === JSON.stringify([['bookstore/bookstore-v1|14001', 100]]) || bookstoreSplit(s)?.some((c) => c[1] === 0) === true, 'the 100/0 split');
    const weights = Object.fromEntries(bookstoreSplit(buyer) ?? []);
    assert.equal(weights['bookstore/bookstore-v1|14001'], 100);
    assert.ok(!weights['bookstore/bookstore-v2|14001'], 'v2 gets nothing');
  });

  it('keeps serving the last configuration while the API server is down, and catches up afterwards', { skip: kubectl.skip }, async () => {
    const buyer = connect('bookbuyer', 'bookbuyer');
    await buyer.until((s) => bookstoreSplit(s) !== undefined, 'the bookstore split');
    await server.stop();
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await readyz(), 200, 'stays ready: it has synced once');
    // The proxy reconnects during the outage (same pod, same UUID): the new stream replaces the old one.
    const late = connect('bookbuyer', 'bookbuyer');
    await late.until((s) => bookstoreSplit(s) !== undefined, 'configuration for a proxy connecting during the outage');
    await eventually(() => buyer.stream.status !== undefined, 'the old stream replaced');
    server.remove('TrafficSplit', 'bookstore', 'bookstore-split');
    await server.start();
    await late.until((s) => bookstoreSplit(s) === undefined, 'the split removed after the outage');
  });

  it('applies deletions made with kubectl', { skip: kubectl.skip }, async () => {
    const buyer = connect('bookbuyer', 'bookbuyer');
    await buyer.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore|14001') !== undefined, 'the bookstore cluster');
    await k.ok(['delete', 'service', '-n', 'bookstore', 'bookstore']);
    await buyer.until((s) => s.get(TypeUrl.Cluster, 'bookstore/bookstore|14001') === undefined, 'the bookstore cluster removed');
  });
});
