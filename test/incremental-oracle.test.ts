/**
 * A property test of the incremental push pipeline (scoped pushes, the endpoints-only patch,
 * resources shared across snapshots, the incremental MeshSnapshot build): random sequences of
 * store changes (fixed seeds) are applied to the bookstore mesh with ten proxies connected (two of
 * them proxyless), and after every flush each proxy's snapshot must be exactly what a brand-new
 * controller generates for it (in this thread: its generation context and MeshSnapshot builder
 * are its own, nothing is module-level), and a
 * MeshSnapshot built with `previous` must equal one built without. Steps where a policy keeps its
 * last valid version are not compared (that history is intended).
 */
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { ObjectStore } from '../src/store/object-store.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { MeshController } from '../src/controller/mesh-controller.js';
import { buildMeshSnapshot, MeshSnapshotBuilder } from '../src/catalog/build-snapshot.js';
import { formatProblem } from '../src/catalog/problems.js';
import { diffMeshSnapshots, onlyEndpointsChanged, onlySplitWeightsChanged } from '../src/catalog/snapshot-diff.js';
import { KEPT_NOTE } from '../src/catalog/last-good.js';
import { parseCommonName } from '../src/proxy/types.js';
import { decodeMessage } from '../src/api/codec.js';
import type { TypeUrl } from '../src/api/type-urls.js';
import type { KubeObject } from '../src/store/objects.js';
import type { MeshSnapshot } from '../src/catalog/types.js';
import { bookstoreMesh, k8s } from './fixtures/mesh.js';
import { summarize, meshJson, type Summary } from './helpers/snapshot-summary.js';
import { diff, ideal } from './helpers/incremental-harness.js';
import { freshController } from './helpers/fresh-controller.js';
import { mulberry32 } from './helpers/seeded-random.js';

type O = any; // eslint-disable-line @typescript-eslint/no-explicit-any


const PROXIES: { cn: string; grpc?: boolean }[] = [
  { cn: '11111111-1111-4111-8111-111111111111.sidecar.bookbuyer.bookbuyer.cluster.local' },
  { cn: '22222222-2222-4222-8222-222222222222.sidecar.bookthief.bookthief.cluster.local' },
  { cn: '33333333-3333-4333-8333-333333333333.sidecar.bookstore.bookstore.cluster.local' },
  { cn: '44444444-4444-4444-8444-444444444444.sidecar.bookstore-v2.bookstore.cluster.local' },
  { cn: '55555555-5555-4555-8555-555555555555.sidecar.bookwarehouse.bookwarehouse.cluster.local' },
  { cn: '66666666-6666-4666-8666-666666666666.sidecar.mysql.bookwarehouse.cluster.local' },
  { cn: '77777777-7777-4777-8777-777777777777.sidecar.bookbuyer.bookbuyer.cluster.local', grpc: true },
  { cn: '88888888-8888-4888-8888-888888888888.sidecar.bookstore-v3.bookstore.cluster.local' },
  { cn: '99999999-9999-4999-8999-999999999999.sidecar.thief2.bookthief.cluster.local' },
  { cn: 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa.sidecar.bookthief.bookthief.cluster.local', grpc: true },
];

const key = (o: KubeObject) => `${o.kind}/${o.metadata.namespace ?? ''}/${o.metadata.name}`;
const clone = <T>(o: T): T => JSON.parse(JSON.stringify(o));

function initialObjects(): KubeObject[] {
  return [
    ...bookstoreMesh(),
    k8s.serviceAccount('bookstore', 'bookstore-v3'),
    k8s.service('bookstore', 'bookstore-v3', { app: 'bookstore-v3' }, [{ port: 14001, name: 'bookstore-port' }], '10.96.0.13'),
    k8s.pod('bookstore', 'bookstore-v3-1', 'bookstore-v3', { app: 'bookstore-v3' }, '10.244.2.30', [14001]),
  ];
}

type Model = Map<string, KubeObject>;
type Mutation = (m: Model, r: () => number) => string | undefined;

const pick = <T>(r: () => number, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
const list = (m: Model, kind: string) => [...m.values()].filter((o) => o.kind === kind);
const put = (m: Model, o: KubeObject) => m.set(key(o), o);
const ip = (r: () => number, base = '10.244') => `${base}.${1 + Math.floor(r() * 4)}.${1 + Math.floor(r() * 40)}`;
const NAMESPACES = ['bookbuyer', 'bookthief', 'bookstore', 'bookwarehouse'];
const SAS: Record<string, string[]> = {
  bookbuyer: ['bookbuyer', 'buyer2'],
  bookthief: ['bookthief', 'thief2'],
  bookstore: ['bookstore', 'bookstore-v2', 'bookstore-v3'],
  bookwarehouse: ['bookwarehouse', 'mysql'],
};
const APPS: Record<string, Record<string, string>[]> = {
  bookbuyer: [{ app: 'bookbuyer' }],
  bookthief: [{ app: 'bookthief' }],
  bookstore: [{ app: 'bookstore', version: 'v1' }, { app: 'bookstore', version: 'v2' }, { app: 'bookstore-v3' }],
  bookwarehouse: [{ app: 'bookwarehouse' }, { app: 'mysql' }],
};

const MUTATIONS: Record<string, Mutation> = {
  podIp(m, r) {
    const p = pick(r, list(m, 'Pod')) as O;
    if (!p) return;
    const n = clone(p);
    n.status.podIP = ip(r);
    put(m, n);
    return `Pod ${key(p)} ip ${n.status.podIP}`;
  },
  podPhase(m, r) {
    const p = pick(r, list(m, 'Pod')) as O;
    if (!p) return;
    const n = clone(p);
    n.status.phase = n.status.phase === 'Running' ? 'Failed' : 'Running';
    put(m, n);
    return `Pod ${key(p)} phase ${n.status.phase}`;
  },
  podDelete(m, r) {
    const p = pick(r, list(m, 'Pod'));
    if (!p) return;
    m.delete(key(p));
    return `delete ${key(p)}`;
  },
  podAdd(m, r) {
    const ns = pick(r, NAMESPACES);
    const name = `pod-${Math.floor(r() * 1000)}`;
    const labels = pick(r, APPS[ns]);
    const sa = pick(r, SAS[ns]);
    const p = k8s.pod(ns, name, sa, { ...labels }, ip(r), [14001]);
    put(m, p);
    return `add ${key(p)} sa=${sa} labels=${JSON.stringify(labels)} ip=${(p as O).status.podIP}`;
  },
  podSa(m, r) {
    const p = pick(r, list(m, 'Pod')) as O;
    if (!p) return;
    const n = clone(p);
    n.spec.serviceAccountName = pick(r, SAS[p.metadata.namespace] ?? ['default']);
    put(m, n);
    return `Pod ${key(p)} sa ${n.spec.serviceAccountName}`;
  },
  saRename(m, r) {
    const s = pick(r, list(m, 'ServiceAccount')) as O;
    if (!s) return;
    const ns = s.metadata.namespace;
    const to = pick(r, SAS[ns] ?? ['x']);
    m.delete(key(s));
    put(m, k8s.serviceAccount(ns, to));
    // pods follow
    for (const p of list(m, 'Pod') as O[]) {
      if (p.metadata.namespace === ns && p.spec.serviceAccountName === s.metadata.name) {
        const n = clone(p);
        n.spec.serviceAccountName = to;
        put(m, n);
      }
    }
    return `ServiceAccount ${ns}/${s.metadata.name} renamed ${to} (pods follow)`;
  },
  endpoints(m, r) {
    const svc = pick(r, list(m, 'Service')) as O;
    if (!svc) return;
    const ns = svc.metadata.namespace;
    const k = `Endpoints/${ns}/${svc.metadata.name}`;
    if (m.has(k) && r() < 0.4) {
      m.delete(k);
      return `delete ${k}`;
    }
    const ips = Array.from({ length: Math.floor(r() * 3) }, () => ip(r, '10.250'));
    const e = k8s.endpoints(ns, svc.metadata.name, ips, pick(r, [14001, 3306, 8080]));
    put(m, e);
    return `set ${k} ${JSON.stringify((e as O).subsets)}`;
  },
  endpointSlice(m, r) {
    const svc = pick(r, list(m, 'Service')) as O;
    if (!svc) return;
    const ns = svc.metadata.namespace;
    const name = `${svc.metadata.name}-slice${Math.floor(r() * 2)}`;
    const k = `EndpointSlice/${ns}/${name}`;
    if (m.has(k) && r() < 0.4) {
      m.delete(k);
      return `delete ${k}`;
    }
    const o: O = {
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name, namespace: ns, labels: { 'kubernetes.io/service-name': svc.metadata.name } },
      addressType: 'IPv4',
      endpoints: Array.from({ length: 1 + Math.floor(r() * 2) }, () => ({ addresses: [ip(r, '10.251')], conditions: { ready: r() < 0.8 } })),
      ports: [{ name: svc.spec.ports?.[0]?.name, port: pick(r, [14001, 3306]) }],
    };
    put(m, o);
    return `set ${k} ${JSON.stringify(o.endpoints)}`;
  },
  headless(m, r) {
    const svc = pick(r, list(m, 'Service').filter((s) => s.metadata.namespace !== 'unmonitored')) as O;
    if (!svc) return;
    const n = clone(svc);
    n.spec.clusterIP = n.spec.clusterIP === 'None' ? `10.96.1.${Math.floor(r() * 50)}` : 'None';
    put(m, n);
    return `Service ${key(svc)} clusterIP ${n.spec.clusterIP}`;
  },
  clusterIpClash(m, r) {
    const svcs = list(m, 'Service') as O[];
    const a = pick(r, svcs);
    const b = pick(r, svcs);
    if (!a || !b || b.spec.clusterIP === 'None') return;
    const n = clone(a);
    n.spec.clusterIP = b.spec.clusterIP;
    put(m, n);
    return `Service ${key(a)} clusterIP ${n.spec.clusterIP} (same as ${key(b)})`;
  },
  ports(m, r) {
    const svc = pick(r, list(m, 'Service').filter((s) => s.metadata.namespace !== 'unmonitored')) as O;
    if (!svc) return;
    const n = clone(svc);
    const choice = Math.floor(r() * 5);
    if (choice === 0) n.spec.ports.push({ port: 8080 + Math.floor(r() * 2), name: pick(r, ['http-alt', 'tcp-alt', 'grpc-x']) });
    else if (choice === 1 && n.spec.ports.length > 1) n.spec.ports.pop();
    else if (choice === 2) n.spec.ports[0].targetPort = pick(r, [14001, 14002, 'bookstore-port', undefined]);
    else if (choice === 3) n.spec.ports[0].appProtocol = pick(r, ['tcp', 'http', 'grpc', undefined]);
    else n.spec.ports[0].port = pick(r, [14001, 14003, 3306]);
    n.spec.ports = n.spec.ports.filter((p: O, i: number, a: O[]) => a.findIndex((q) => q.port === p.port) === i);
    put(m, n);
    return `Service ${key(svc)} ports ${JSON.stringify(n.spec.ports)}`;
  },
  serviceAddDelete(m) {
    const k = 'Service/bookstore/bookstore-v3';
    if (m.has(k)) {
      m.delete(k);
      return `delete ${k}`;
    }
    put(m, k8s.service('bookstore', 'bookstore-v3', { app: 'bookstore-v3' }, [{ port: 14001, name: 'bookstore-port' }], '10.96.0.13'));
    return `add ${k}`;
  },
  split(m, r) {
    const k = 'TrafficSplit/bookstore/bookstore-split';
    const choice = Math.floor(r() * 4);
    if (choice === 0 && m.has(k)) {
      m.delete(k);
      return `delete ${k}`;
    }
    const svcs = (list(m, 'Service') as O[]).filter((s) => s.metadata.namespace === 'bookstore' && s.metadata.name !== 'bookstore').map((s) => s.metadata.name);
    const backends = svcs.filter(() => r() < 0.6).map((s) => ({ service: s, weight: pick(r, [0, 10, 50, 90]) }));
    if (backends.length === 0) return;
    const o = k8s.trafficSplit('bookstore', 'bookstore-split', 'bookstore.bookstore', backends);
    put(m, o);
    return `set ${k} backends ${JSON.stringify(backends)}`;
  },
  ust(m, r) {
    const svcs = (list(m, 'Service') as O[]).filter((s) => s.metadata.namespace !== 'unmonitored');
    const svc = pick(r, svcs);
    const ns = svc.metadata.namespace;
    const name = `ust-${svc.metadata.name}`;
    const k = `UpstreamTrafficSetting/${ns}/${name}`;
    if (m.has(k) && r() < 0.3) {
      m.delete(k);
      return `delete ${k}`;
    }
    const o: O = {
      apiVersion: 'policy.openservicemesh.io/v1alpha1',
      kind: 'UpstreamTrafficSetting',
      metadata: { name, namespace: ns },
      spec: {
        host: `${svc.metadata.name}.${ns}.svc.cluster.local`,
        connectionSettings: { tcp: { maxConnections: pick(r, [10, 100]) }, http: { maxRequests: pick(r, [5, 50]) } },
        ...(r() < 0.5 ? { rateLimit: { local: { tcp: { connections: pick(r, [5, 20]), unit: 'minute' } } } } : {}),
      },
    };
    put(m, o);
    return `set ${k} ${JSON.stringify(o.spec)}`;
  },
  meshConfig(m, r) {
    const k = 'MeshConfig/osm-system/osm-mesh-config';
    const mc = clone(m.get(k) ?? k8s.meshConfig(false)) as O;
    const choice = Math.floor(r() * 4);
    mc.spec.sidecar ??= {};
    if (choice === 0) mc.spec.traffic.enablePermissiveTrafficPolicyMode = !mc.spec.traffic.enablePermissiveTrafficPolicyMode;
    else if (choice === 1) mc.spec.sidecar.cipherSuites = pick(r, [[], ['ECDHE-ECDSA-AES128-GCM-SHA256'], ['ECDHE-RSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-AES128-GCM-SHA256']]);
    else if (choice === 2) mc.spec.sidecar.tlsMinProtocolVersion = pick(r, ['TLSv1_2', 'TLSv1_3', 'TLS_AUTO']);
    else mc.spec.traffic.enableEgress = !mc.spec.traffic.enableEgress;
    put(m, mc);
    return `MeshConfig ${JSON.stringify(mc.spec)}`;
  },
  trafficTarget(m, r) {
    const ns = pick(r, NAMESPACES);
    const name = `tt-${Math.floor(r() * 3)}`;
    const k = `TrafficTarget/${ns}/${name}`;
    if (m.has(k) && r() < 0.5) {
      m.delete(k);
      return `delete ${k}`;
    }
    const dest = pick(r, SAS[ns]);
    const srcNs = pick(r, NAMESPACES);
    const sources = [{ ns: srcNs, sa: pick(r, SAS[srcNs]) }];
    let rules: { kind: string; name: string; matches?: string[] }[];
    if (ns === 'bookstore') rules = [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes', matches: ['buy-a-book'] }];
    else if (ns === 'bookwarehouse') rules = r() < 0.5 ? [{ kind: 'TCPRoute', name: 'mysql' }] : [{ kind: 'HTTPRouteGroup', name: 'bookwarehouse-service-routes' }];
    else {
      if (!m.has(`TCPRoute/${ns}/any`)) put(m, k8s.tcpRoute(ns, 'any', []));
      rules = [{ kind: 'TCPRoute', name: 'any' }];
    }
    const o = k8s.trafficTarget(ns, name, dest, sources, rules);
    put(m, o);
    return `set ${k} dest=${dest} sources=${JSON.stringify(sources)} rules=${JSON.stringify(rules)}`;
  },
  deleteFixtureTT(m, r) {
    const tts = list(m, 'TrafficTarget');
    const t = pick(r, tts);
    if (!t) return;
    m.delete(key(t));
    return `delete ${key(t)}`;
  },
  routeGroup(m, r) {
    const k = 'HTTPRouteGroup/bookstore/bookstore-service-routes';
    const g = clone(m.get(k)) as O;
    if (!g) return;
    const buy = g.spec.matches.find((x: O) => x.name === 'buy-a-book');
    buy.methods = pick(r, [['GET'], ['GET', 'POST'], ['*']]);
    buy.pathRegex = pick(r, ['.*a-book.*new', '/buy.*']);
    put(m, g);
    return `set ${k} buy-a-book ${JSON.stringify(buy)}`;
  },
  nsLabel(m, r) {
    const ns = pick(r, NAMESPACES);
    const k = `Namespace//${ns}`;
    const o = clone(m.get(k)) as O;
    const inMesh = o.metadata.labels['openservicemesh.io/monitored-by'] === 'osm';
    o.metadata.labels['openservicemesh.io/monitored-by'] = inMesh ? 'other' : 'osm';
    put(m, o);
    return `Namespace ${ns} ${inMesh ? 'out of' : 'into'} mesh`;
  },
  podLabels(m, r) {
    const p = pick(r, list(m, 'Pod')) as O;
    if (!p) return;
    const n = clone(p);
    n.metadata.labels = { ...pick(r, APPS[p.metadata.namespace] ?? [{ app: 'x' }]) };
    put(m, n);
    return `Pod ${key(p)} labels ${JSON.stringify(n.metadata.labels)}`;
  },
  selector(m, r) {
    const svc = pick(r, list(m, 'Service').filter((s) => s.metadata.namespace !== 'unmonitored')) as O;
    if (!svc) return;
    const n = clone(svc);
    n.spec.selector = { ...pick(r, APPS[svc.metadata.namespace]) };
    put(m, n);
    return `Service ${key(svc)} selector ${JSON.stringify(n.spec.selector)}`;
  },
  deployment(m, r) {
    const ns = pick(r, NAMESPACES);
    const name = `dep-${Math.floor(r() * 2)}`;
    const k = `Deployment/${ns}/${name}`;
    if (m.has(k) && r() < 0.5) {
      m.delete(k);
      return `delete ${k}`;
    }
    const labels = pick(r, APPS[ns]);
    const sa = pick(r, SAS[ns]);
    const o: O = {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name, namespace: ns },
      spec: { selector: { matchLabels: labels }, template: { metadata: { labels: { ...labels } }, spec: { serviceAccountName: sa, containers: [{ name: 'c', ports: [{ name: 'bookstore-port', containerPort: pick(r, [14001, 14002]) }] }] } } },
    };
    put(m, o);
    return `set ${k} sa=${sa} labels=${JSON.stringify(labels)}`;
  },
};

function diffSummaries(a: Summary, b: Summary, out: string[], who: string) {
  const types = new Set([...Object.keys(a.resources), ...Object.keys(b.resources)]);
  for (const t of types) {
    const short = t.split('.').pop();
    if (a.versions[t] !== b.versions[t]) out.push(`${who} ${short}: type version ${a.versions[t]} (incremental) != ${b.versions[t]} (fresh)`);
    const ra = a.resources[t] ?? {};
    const rb = b.resources[t] ?? {};
    for (const n of new Set([...Object.keys(ra), ...Object.keys(rb)])) {
      if (!ra[n]) out.push(`${who} ${short} ${n}: missing in incremental`);
      else if (!rb[n]) out.push(`${who} ${short} ${n}: extra in incremental`);
      else if (ra[n].v !== rb[n].v) {
        const dec = (x: { b: string }) => JSON.stringify(decodeMessage(t as TypeUrl, Buffer.from(x.b, 'base64')));
        out.push(`${who} ${short} ${n}: version differs\n      incr:  ${dec(ra[n]).slice(0, 600)}\n      fresh: ${dec(rb[n]).slice(0, 600)}`);
      }
    }
  }
}

function firstDiff(a: string, b: string): string {
  let i = 0;
  while (i < a.length && a[i] === b[i]) i++;
  return `@${i}: incr …${a.slice(Math.max(0, i - 150), i + 150)}…\n      fresh …${b.slice(Math.max(0, i - 150), i + 150)}…`;
}

describe('the incremental push pipeline against a fresh controller (oracle)', () => {
  it('after every random change sequence, each proxy has exactly what a new controller would give it', { timeout: 10 * 60_000 }, async (t) => {
    const caDir = await mkdtemp(path.join(tmpdir(), 'trellis-oracle-ca-'));
    const ca = await CertificateAuthority.loadOrCreate(caDir);
    const certificates = new CertificateManager({ ca, deterministic: true });
    // The fresh controllers' own manager (the same CA, deterministic: the same certificates).
    const freshCertificates = new CertificateManager({ ca, deterministic: true });
    const oracle = (objects: KubeObject[]) => freshController(objects, PROXIES, freshCertificates);

    // More with ORACLE_SEQUENCES / ORACLE_STEPS / ORACLE_SEED; ORACLE_CHANGES=a,b limits the kinds of change.
    const SEQS = Number(process.env.ORACLE_SEQUENCES ?? 40);
    const STEPS = Number(process.env.ORACLE_STEPS ?? 30);
    const SEED0 = Number(process.env.ORACLE_SEED ?? 1);
    const only = process.env.ORACLE_CHANGES?.split(',');
    const names = only ?? Object.keys(MUTATIONS);
    const failures: string[] = [];
    let steps = 0;
    let compared = 0;
    let keptSteps = 0;
    let proxyCompares = 0;
    let resourceCompares = 0;
    let skippedProxy = 0;
    const scopes: Record<string, number> = {};
    for (let seq = SEED0; seq < SEED0 + SEQS; seq++) {
      const r = mulberry32(seq);
      const model: Model = new Map(initialObjects().map((o) => [key(o), o]));
      const store = new ObjectStore();
      store.replaceAll('test', [...model.values()]);
      const cache = new SnapshotCache();
      const controller = new MeshController({
        store, certificates, cache, logger: pino({ level: 'silent' }), metrics: new Registry(), meshName: 'osm',
        debounceQuietMs: 1, debounceMaxDelayMs: 5, resyncIntervalMs: 0,
      });
      controller.start();
      // Configurations generated ahead, kept through changes that cannot alter them: proxies
      // connect at the start or later, and reconnect, and must get what a fresh controller gives.
      await controller.warmUp({ concurrency: 2 });
      let sid = 0;
      const connected = new Map<string, number>();
      const open = async (p: (typeof PROXIES)[number]): Promise<void> => {
        const proxy = { ...parseCommonName(p.cn), verified: true }; // an mTLS sidecar
        const previous = connected.get(proxy.uuid);
        if (previous !== undefined) controller.onStreamClose(proxy, previous);
        try {
          await controller.onStreamOpen(proxy, ++sid, p.grpc ? { user_agent_name: 'gRPC Node Pure JS' } : undefined);
          connected.set(proxy.uuid, sid);
        } catch (err) {
          failures.push(`seq ${seq}: open ${p.cn}: ${err}`);
        }
      };
      for (const p of PROXIES) if (r() < 0.6) await open(p);
      // Built with previous by a builder of its own (reusing what the store did not change), and
      // compared with a one-off build without previous at every step.
      const chainBuilder = new MeshSnapshotBuilder();
      let chain: MeshSnapshot | undefined = chainBuilder.build(store, { meshName: 'osm', generation: 1 }).snapshot;
      const history: string[] = [];
      let stepFailed = false;
      for (let step = 0; step < STEPS && !stepFailed; step++) {
        const n = 1 + Math.floor(r() * 3);
        const applied: string[] = [];
        for (let i = 0; i < n; i++) {
          const what = MUTATIONS[pick(r, names)](model, r);
          if (what) applied.push(what);
          if (r() < 0.3) store.replaceAll('test', [...model.values()]); // intermediate store writes
          if (r() < 0.15) await new Promise((res) => setTimeout(res, 3)); // let a push start meanwhile
        }
        history.push(`step ${step}: ${applied.join(' ; ')}`);
        const meshBefore = controller.snapshot;
        store.replaceAll('test', [...model.values()]);
        await controller.flush();
        await controller.flush();
        for (const p of PROXIES) if (r() < (connected.has(parseCommonName(p.cn).uuid) ? 0.1 : 0.3)) await open(p);
        steps++;
        {
          const d = diffMeshSnapshots(meshBefore, controller.snapshot);
          const k = d === 'all' ? 'all' : d.services.size + d.identities.size === 0 && !d.servicesChanged ? 'none' : onlyEndpointsChanged(meshBefore, controller.snapshot, d) ? 'eps' : onlySplitWeightsChanged(meshBefore, controller.snapshot, d) ? 'routes' : 'partial';
          scopes[k] = (scopes[k] ?? 0) + 1;
        }
        const problems = controller.policyProblems().map(formatProblem).sort();
        // previous vs no previous
        const withPrev = chainBuilder.build(store, { meshName: 'osm', generation: 7, previous: chain });
        const noPrev = buildMeshSnapshot(store, { meshName: 'osm', generation: 7 });
        chain = withPrev.snapshot;
        const kept = problems.some((p) => p.includes(KEPT_NOTE)) || withPrev.problems.some((p) => p.message.endsWith(KEPT_NOTE));
        if (kept) {
          // A fresh controller has no last valid version to keep: compare with a full generation
          // on the controller's own MeshSnapshot instead.
          keptSteps++;
          const out: string[] = [];
          for (const p of PROXIES) {
            const proxy = { ...parseCommonName(p.cn), verified: true, ...(p.grpc ? { clientType: 'grpc' as const } : {}) };
            const got = cache.getSnapshot(proxy.uuid);
            const want = connected.has(proxy.uuid) && got ? await ideal(controller, certificates, proxy) : undefined;
            if (got && want) out.push(...diff(got, want, `${proxy.identity}${p.grpc ? '(grpc)' : ''}`));
          }
          if (out.length > 0) {
            failures.push(`seq ${seq} step ${step} (a policy kept at its last valid version):\n  history:\n    ${history.join('\n    ')}\n  diffs:\n    ${out.slice(0, 12).join('\n    ')}`);
            stepFailed = true;
          }
          continue;
        }
        const out: string[] = [];
        if (meshJson(withPrev.snapshot) !== meshJson(noPrev.snapshot)) out.push(`buildMeshSnapshot(previous) != buildMeshSnapshot(): ${firstDiff(meshJson(withPrev.snapshot), meshJson(noPrev.snapshot))}`);
        const p1 = withPrev.problems.map(formatProblem).sort();
        const p2 = noPrev.problems.map(formatProblem).sort();
        if (JSON.stringify(p1) !== JSON.stringify(p2)) out.push(`problems(previous) != problems(): ${JSON.stringify(p1)} vs ${JSON.stringify(p2)}`);
        const fresh = await oracle([...model.values()]);
        compared++;
        const mine = meshJson(controller.snapshot);
        if (mine !== fresh.mesh) out.push(`controller.snapshot != fresh controller snapshot: ${firstDiff(mine, fresh.mesh)}`);
        if (JSON.stringify(problems) !== JSON.stringify(fresh.problems)) out.push(`problems differ: ${JSON.stringify(problems)} vs fresh ${JSON.stringify(fresh.problems)}`);
        for (const p of PROXIES) {
          const proxy = parseCommonName(p.cn);
          if (!connected.has(proxy.uuid)) continue;
          const f = fresh.proxies[proxy.uuid];
          const s = cache.getSnapshot(proxy.uuid);
          const who = `${proxy.identity}${p.grpc ? '(grpc)' : ''}`;
          if ('error' in f || f.violations || controller.validationFailures().some((v) => v.proxy.uuid === proxy.uuid)) {
            skippedProxy++; // the incremental one legitimately keeps its last good config
            continue;
          }
          if (!s) {
            out.push(`${who}: no snapshot in incremental`);
            continue;
          }
          diffSummaries(summarize(s), f, out, who);
          proxyCompares++;
          resourceCompares += Object.values(f.resources).reduce((n: number, x) => n + Object.keys(x).length, 0);
        }
        if (out.length > 0) {
          failures.push(`seq ${seq} step ${step}:\n  history:\n    ${history.join('\n    ')}\n  diffs:\n    ${out.slice(0, 12).join('\n    ')}`);
          stepFailed = true;
        }
      }
      controller.stop();
    }
    freshCertificates.stop();
    certificates.stop();
    t.diagnostic(`steps=${steps} compared=${compared} keptSteps=${keptSteps} proxyCompares=${proxyCompares} resourceCompares=${resourceCompares} skippedProxy=${skippedProxy} scopes=${JSON.stringify(scopes)}`);
    assert.equal(failures.length, 0, `${failures.length} step(s) differ from a fresh controller:\n${failures.join('\n')}`);
  });
});
