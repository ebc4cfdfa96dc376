import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { TypeUrl } from '../api/type-urls.js';
import { decodeMessage } from '../api/codec.js';
import { CertificateAuthority } from '../certificate/authority.js';
import { CertificateManager, type Timers } from '../certificate/manager.js';
import { parseCommonName, serviceIdentity, type Proxy } from '../proxy/types.js';
import { ObjectStore } from '../store/object-store.js';
import { SnapshotCache } from '../xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../xds/cache/types.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { MeshController, mergePushRequests, PROXY_LOG_LIMIT } from './mesh-controller.js';
import { eventually } from '../../test/helpers/wait.js';

/** Manual clock for the certificate manager: timers fire only when the clock passes them. */
class ManualTimers implements Timers {
  private t = Math.floor(Date.now() / 1000) * 1000;
  private id = 0;
  private readonly pending = new Map<number, { fn: () => void; at: number }>();
  now(): number {
    return this.t;
  }
  setTimer(fn: () => void, ms: number): unknown {
    this.pending.set(++this.id, { fn, at: this.t + ms });
    return this.id;
  }
  clearTimer(h: unknown): void {
    this.pending.delete(h as number);
  }
  advance(ms: number): void {
    const to = this.t + ms;
    for (;;) {
      const next = [...this.pending.entries()].filter(([, p]) => p.at <= to).sort((a, b) => a[1].at - b[1].at)[0];
      if (!next) break;
      this.pending.delete(next[0]);
      this.t = next[1].at;
      next[1].fn();
    }
    this.t = to;
  }
}

/** A proxy authenticated by its certificate (the mTLS listener), as `authenticateFromPeerCertificate` gives it. */
const verified = (cn: string): Proxy => ({ ...parseCommonName(cn), verified: true });

const BUYER = verified('11111111-1111-4111-8111-111111111111.sidecar.bookbuyer.bookbuyer.cluster.local');
const THIEF = verified('22222222-2222-4222-8222-222222222222.sidecar.bookthief.bookthief.cluster.local');

const until = (cond: () => boolean, what: string) => eventually(cond, what, 2000, 10);

describe('MeshController', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-ctl-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  async function setup(timers?: ManualTimers, logger = pino({ level: 'silent' })) {
    const ca = await CertificateAuthority.loadOrCreate(path.join(dir, String(Math.random())), timers ? { clock: timers } : {});
    const certificates = new CertificateManager({ ca, validitySeconds: 3600, timers });
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh());
    const cache = new SnapshotCache();
    const metrics = new Registry();
    const controller = new MeshController({
      store,
      certificates,
      cache,
      logger,
      metrics,
      meshName: 'osm',
      debounceQuietMs: 5,
      debounceMaxDelayMs: 50,
      resyncIntervalMs: 0,
    });
    controller.start();
    const seen = new Map<string, ProxySnapshot[]>();
    for (const p of [BUYER, THIEF]) {
      seen.set(p.uuid, []);
      cache.watch(p.uuid, (s) => seen.get(p.uuid)!.push(s));
    }
    const count = async (name: string): Promise<number> => (await metrics.getSingleMetric(name)!.get()).values[0]?.value ?? 0;
    /** Proxy snapshots published so far (`trellis_proxy_snapshots_total`). */
    const generated = () => count('trellis_proxy_snapshots_total');
    /** Configurations generated so far (`trellis_configurations_generated_total`). */
    const configurations = () => count('trellis_configurations_generated_total');
    /** Resource types generated so far, by xDS type (`trellis_configuration_types_generated_total{type}`). */
    const typesGenerated = async (): Promise<Record<string, number>> =>
      Object.fromEntries((await metrics.getSingleMetric('trellis_configuration_types_generated_total')!.get()).values.map((v) => [String(v.labels.type), v.value]));
    return { store, cache, controller, certificates, seen, generated, configurations, typesGenerated };
  }

  /** What grew between two `typesGenerated()` readings (types that did not are left out). */
  const grown = (before: Record<string, number>, after: Record<string, number>) =>
    Object.fromEntries(Object.entries(after).filter(([type, n]) => n !== (before[type] ?? 0)).map(([type, n]) => [type, n - (before[type] ?? 0)]));

  it('an endpoint change replaces only the ClusterLoadAssignments it changes, as a full generation would', async () => {
    const { store, cache, controller, certificates } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    const before = cache.getSnapshot(BUYER.uuid)!;
    const withPod = (name: string, ip: string) =>
      bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === name ? { ...o, status: { podIP: ip, phase: 'Running' as const } } : o));
    store.replaceAll('test', withPod('bookstore-v1-1', '10.244.9.9'));
    await controller.flush();
    const after = cache.getSnapshot(BUYER.uuid)!;
    assert.notEqual(after, before);
    const ips = (s: ProxySnapshot, name: string) => {
      const cla = decodeMessage(TypeUrl.ClusterLoadAssignment, s.resources.get(TypeUrl.ClusterLoadAssignment)!.get(name)!.resource.value) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
      return cla.endpoints.flatMap((l: any) => l.lb_endpoints.map((e: any) => e.endpoint.address.socket_address.address)); // eslint-disable-line @typescript-eslint/no-explicit-any
    };
    assert.deepEqual(ips(after, 'bookstore/bookstore-v1|14001'), ['10.244.9.9']);
    assert.deepEqual(ips(after, 'bookstore/bookstore-v2|14001'), ips(before, 'bookstore/bookstore-v2|14001'));
    for (const type of [TypeUrl.Cluster, TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.Secret]) {
      assert.equal(after.resources.get(type), before.resources.get(type), `${type} untouched`);
      assert.equal(after.versions.get(type), before.versions.get(type));
    }
    assert.notEqual(after.versions.get(TypeUrl.ClusterLoadAssignment), before.versions.get(TypeUrl.ClusterLoadAssignment));
    // What a full generation from the new mesh gives is what the patch gave.
    const late = verified('55555555-5555-4555-8555-555555555555.sidecar.bookbuyer.bookbuyer.cluster.local');
    await controller.onStreamOpen(late, 2);
    assert.deepEqual(cache.getSnapshot(late.uuid)!.versions, after.versions);
    controller.stop();
    certificates.stop();
  });

  it('an endpoint change regenerates, validates and encodes EDS alone, once for the proxies of one kind, which share its snapshot', async () => {
    const { store, cache, controller, certificates, typesGenerated } = await setup();
    const twin = verified('55555555-5555-4555-8555-555555555555.sidecar.bookbuyer.bookbuyer.cluster.local');
    await controller.onStreamOpen(BUYER, 1);
    await controller.onStreamOpen(twin, 2);
    const before = await typesGenerated();
    store.replaceAll('test', bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v1-1' ? { ...o, status: { podIP: '10.244.9.9', phase: 'Running' as const } } : o)));
    await controller.flush();
    assert.deepEqual(grown(before, await typesGenerated()), { EDS: 1 }, 'EDS only, once for both bookbuyer proxies');
    assert.equal(cache.getSnapshot(twin.uuid), cache.getSnapshot(BUYER.uuid), 'one snapshot object for both');
    assert.match(JSON.stringify(decodeMessage(TypeUrl.ClusterLoadAssignment, cache.getSnapshot(BUYER.uuid)!.resources.get(TypeUrl.ClusterLoadAssignment)!.get('bookstore/bookstore-v1|14001')!.resource.value)), /10\.244\.9\.9/);
    controller.stop();
    certificates.stop();
  });

  it('a proxy connecting after a split weight change is served the updated configuration, not a new generation', async () => {
    const { store, controller, certificates, cache, configurations, typesGenerated } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    store.replaceAll('test', bookstoreMesh({ split: [90, 10] }));
    await controller.flush();
    const [generatedBefore, typesBefore] = [await configurations(), await typesGenerated()];
    const late = verified('55555555-5555-4555-8555-555555555555.sidecar.bookbuyer.bookbuyer.cluster.local');
    await controller.onStreamOpen(late, 2);
    assert.equal(await configurations(), generatedBefore, 'no generation for the late proxy');
    assert.deepEqual(grown(typesBefore, await typesGenerated()), {});
    assert.equal(cache.getSnapshot(late.uuid), cache.getSnapshot(BUYER.uuid));
    controller.stop();
    certificates.stop();
  });

  it('a split weight change replaces only the RouteConfigurations, as a full generation would', async () => {
    const { store, controller, certificates, cache, configurations } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    const before = cache.getSnapshot(BUYER.uuid)!;
    const generatedBefore = await configurations();
    store.replaceAll('test', bookstoreMesh({ split: [90, 10] }));
    await controller.flush();
    const after = cache.getSnapshot(BUYER.uuid)!;
    assert.equal(await configurations(), generatedBefore, 'no full generation');
    for (const type of [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.Secret]) {
      assert.equal(after.resources.get(type), before.resources.get(type), `${type} untouched`);
    }
    assert.notEqual(after.versions.get(TypeUrl.RouteConfiguration), before.versions.get(TypeUrl.RouteConfiguration));
    const rc = decodeMessage(TypeUrl.RouteConfiguration, after.resources.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001')!.resource.value) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
    const weights = rc.virtual_hosts.flatMap((vh: any) => vh.routes.flatMap((r: any) => r.route.weighted_clusters?.clusters ?? [])); // eslint-disable-line @typescript-eslint/no-explicit-any
    assert.deepEqual(weights.map((c: any) => `${c.name}=${c.weight.value}`).sort(), ['bookstore/bookstore-v1|14001=90', 'bookstore/bookstore-v2|14001=10']); // eslint-disable-line @typescript-eslint/no-explicit-any
    const late = verified('55555555-5555-4555-8555-555555555555.sidecar.bookbuyer.bookbuyer.cluster.local');
    await controller.onStreamOpen(late, 2);
    assert.deepEqual(cache.getSnapshot(late.uuid)!.versions, after.versions, 'a full generation gives the same');
    controller.stop();
    certificates.stop();
  });

  it('issues the certificates and generates the configurations of the mesh identities ahead, once, for the proxies that connect', async () => {
    const { controller, certificates, generated, configurations, cache } = await setup();
    assert.equal(certificates.peekServiceCertificate(BUYER.identity), undefined);
    const done = await controller.warmUp({ concurrency: 2 });
    assert.equal(await configurations(), done.configurationsGenerated);
    assert.ok(done.certificatesIssued >= 5, `issued ${done.certificatesIssued}`);
    assert.equal(done.configurationsGenerated, done.certificatesIssued, 'one configuration per identity');
    assert.ok(done.configurationBytes > 10_000, `${done.configurationBytes} bytes`);
    const buyerCert = certificates.peekServiceCertificate(BUYER.identity);
    assert.ok(buyerCert, 'bookbuyer (a client with no Service) has its certificate');
    assert.ok(certificates.peekServiceCertificate(serviceIdentity('bookwarehouse', 'bookwarehouse')));
    assert.equal((await controller.warmUp({ concurrency: 2 })).certificatesIssued, 0, 'nothing left to issue');
    const before = await generated();
    await controller.onStreamOpen(BUYER, 1);
    assert.equal(certificates.peekServiceCertificate(BUYER.identity), buyerCert, 'the connection used the certificate issued ahead');
    const buyer = cache.getSnapshot(BUYER.uuid)!;
    assert.ok(buyer.resources.get(TypeUrl.Cluster)!.has('bookstore/bookstore-v1|14001'), 'bookbuyer has its own configuration');
    assert.equal(await generated(), before + 1, 'published once');
    assert.equal(await configurations(), done.configurationsGenerated, 'the configuration generated ahead, not generated again');
    controller.stop();
    certificates.stop();
  });

  it('keeps a configuration generated ahead through changes that cannot alter it, and only those', async () => {
    const { store, controller, certificates, configurations, cache } = await setup();
    const done = await controller.warmUp();
    const movePod = (name: string, ip: string) =>
      bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === name ? { ...o, status: { podIP: ip, phase: 'Running' } } : o));
    // bookstore's endpoints change: bookbuyer reaches bookstore, bookthief reaches nothing.
    store.replaceAll('test', movePod('bookstore-v2-1', '10.244.9.9'));
    await controller.flush();
    await controller.onStreamOpen(THIEF, 2);
    assert.equal(await configurations(), done.configurationsGenerated, "bookthief's configuration generated ahead still serves");
    await controller.onStreamOpen(BUYER, 1);
    assert.equal(await configurations(), done.configurationsGenerated + 1, "bookbuyer's was generated again");
    const endpoints = cache.getSnapshot(BUYER.uuid)!.resources.get(TypeUrl.ClusterLoadAssignment)!.get('bookstore/bookstore-v2|14001')!;
    assert.match(JSON.stringify(decodeMessage(TypeUrl.ClusterLoadAssignment, endpoints.resource.value)), /10\.244\.9\.9/);
    controller.stop();
    certificates.stop();
  });

  it('generates no configuration ahead beyond its budget', async () => {
    const { controller, certificates } = await setup();
    const none = await controller.warmUp({ configurationBytes: 0 });
    assert.ok(none.certificatesIssued >= 5);
    assert.deepEqual([none.configurationsGenerated, none.configurationBytes], [0, 0]);
    const one = await controller.warmUp({ concurrency: 4, configurationBytes: 1 });
    assert.equal(one.configurationsGenerated, 1, 'stops once the budget is used up, whatever the concurrency');
    assert.equal(one.budgetReached, true);
    controller.stop();
    certificates.stop();
  });

  it('a service that becomes a TrafficSplit backend gets the apex host names on its inbound routes', async () => {
    const { store, cache, controller, certificates } = await setup();
    const v3 = [
      k8s.serviceAccount('bookstore', 'bookstore-v3'),
      k8s.service('bookstore', 'bookstore-v3', { app: 'bookstore-v3' }, [{ port: 14001, name: 'bookstore-port' }], '10.96.0.13'),
      k8s.pod('bookstore', 'bookstore-v3-1', 'bookstore-v3', { app: 'bookstore-v3' }, '10.244.2.30', [14001]),
    ];
    store.replaceAll('test', [...bookstoreMesh(), ...v3]);
    await controller.flush();
    const V3 = verified('66666666-6666-4666-8666-666666666666.sidecar.bookstore-v3.bookstore.cluster.local');
    await controller.onStreamOpen(V3, 1);
    const domains = () => {
      const rc = decodeMessage(TypeUrl.RouteConfiguration, cache.getSnapshot(V3.uuid)!.resources.get(TypeUrl.RouteConfiguration)!.get('rds-inbound.14001')!.resource.value) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
      return rc.virtual_hosts.flatMap((vh: { domains: string[] }) => vh.domains) as string[];
    };
    assert.ok(!domains().includes('bookstore.bookstore'), 'not a backend yet: no apex names');
    const split = k8s.trafficSplit('bookstore', 'bookstore-split', 'bookstore.bookstore', [
      { service: 'bookstore-v2', weight: 90 },
      { service: 'bookstore-v3', weight: 10 },
    ]);
    store.replaceAll('test', [...bookstoreMesh().filter((o) => o.kind !== 'TrafficSplit'), ...v3, split]);
    await controller.flush();
    assert.ok(domains().includes('bookstore.bookstore'), 'a backend now: the apex names route to it');
    controller.stop();
    certificates.stop();
  });

  it('registers a proxy with its first snapshot and drops it on disconnect', async () => {
    const { cache, controller, certificates } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    assert.deepEqual(controller.registry.proxies().map((p) => p.uuid), [BUYER.uuid]);
    const snapshot = cache.getSnapshot(BUYER.uuid)!;
    assert.ok(snapshot.resources.get(TypeUrl.Cluster)!.has('bookstore/bookstore-v1|14001'));
    controller.onStreamClose(BUYER, 1);
    assert.deepEqual(controller.registry.proxies(), []);
    assert.equal(cache.getSnapshot(BUYER.uuid), undefined);
    controller.stop();
    certificates.stop();
  });

  it('serves a proxy of an identity unknown to the mesh, and warns', async () => {
    const lines: string[] = [];
    const { controller, certificates, cache } = await setup(undefined, pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) }));
    const stranger = verified('66666666-6666-4666-8666-666666666666.sidecar.nobody.nosuchns.cluster.local');
    const typo = verified('77777777-7777-4777-8777-777777777777.sidecar.bookbyuer.bookbuyer.cluster.local');
    await controller.onStreamOpen(stranger, 1);
    await controller.onStreamOpen(typo, 2);
    await controller.onStreamOpen(BUYER, 3);
    assert.ok(cache.getSnapshot(stranger.uuid), 'served');
    const messages = lines.map((l) => JSON.parse(l).msg as string);
    assert.deepEqual(messages, [
      'proxy of an identity outside the mesh: namespace nosuchns is not monitored by mesh osm; it reaches only what policies naming it allow',
      'proxy of an unknown identity: no ServiceAccount bookbyuer in namespace bookbuyer; it reaches only what policies naming it allow',
    ]);
    controller.stop();
    certificates.stop();
  });

  it('logs the connect and disconnect lines of a reconnecting identity at info level at most PROXY_LOG_LIMIT times a window', async () => {
    const lines: Array<{ level: number; msg: string }> = [];
    const { controller, certificates } = await setup(undefined, pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) }));
    const reconnects = PROXY_LOG_LIMIT + 15;
    for (let i = 1; i <= reconnects; i++) {
      await controller.onStreamOpen(BUYER, i);
      controller.onStreamClose(BUYER, i);
    }
    const at = (msg: string, level: number) => lines.filter((l) => l.msg === msg && l.level === level).length;
    assert.equal(at('proxy connected', 30), PROXY_LOG_LIMIT);
    assert.equal(at('proxy disconnected', 30), PROXY_LOG_LIMIT);
    assert.equal(at('proxy connected', 20), reconnects - PROXY_LOG_LIMIT, 'the rest at debug level');
    await controller.onStreamOpen(THIEF, reconnects + 1);
    assert.equal(at('proxy connected', 30), PROXY_LOG_LIMIT + 1, 'another identity is logged');
    controller.stop();
    certificates.stop();
  });

  it('refuses a second identity under a UUID that is already connected', async () => {
    const { controller, certificates, cache } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    const impostor = verified(`${BUYER.uuid}.sidecar.bookthief.bookthief.cluster.local`);
    await assert.rejects(controller.onStreamOpen(impostor, 2), /already connected as bookbuyer\/bookbuyer/);
    controller.onStreamClose(impostor, 2);
    assert.equal(controller.registry.get(BUYER.uuid)?.proxy.identity, 'bookbuyer/bookbuyer');
    assert.ok(cache.getSnapshot(BUYER.uuid)!.resources.get(TypeUrl.Secret)!.has('service-cert'));
    controller.stop();
    certificates.stop();
  });

  it('admits only the first of two identities under one UUID whose streams open together while a push is pending', async () => {
    const { store, controller, certificates, cache } = await setup();
    store.replaceAll('test', bookstoreMesh({ permissive: true })); // a push is now pending
    const impostor = verified(`${BUYER.uuid}.sidecar.bookthief.bookthief.cluster.local`);
    const results = await Promise.allSettled([controller.onStreamOpen(BUYER, 1), controller.onStreamOpen(impostor, 2)]);
    assert.equal(results[0].status, 'fulfilled');
    assert.equal(results[1].status, 'rejected');
    assert.match(String((results[1] as PromiseRejectedResult).reason), /already connected as bookbuyer\/bookbuyer/);
    controller.onStreamClose(impostor, 2);
    assert.deepEqual([...controller.registry.get(BUYER.uuid)!.streamIds], [1]);
    const own = cache.getSnapshot(BUYER.uuid)!.resources.get(TypeUrl.Secret)!.get('service-cert')!;
    const key = (decodeMessage(TypeUrl.Secret, own.resource.value) as { tls_certificate: { private_key: { inline_string: string } } }).tls_certificate.private_key.inline_string;
    assert.equal(key, certificates.peekServiceCertificate(BUYER.identity)?.keyPem, "the proxy's service-cert is its own identity's, not the impostor's");
    controller.stop();
    certificates.stop();
  });

  it('forgets the certificate of an identity removed from the manifests, and of one outside the mesh once its proxy left', async () => {
    const { store, controller, certificates } = await setup();
    await controller.warmUp({ configurationBytes: 0 });
    const thief = serviceIdentity('bookthief', 'bookthief');
    assert.ok(certificates.peekServiceCertificate(thief), 'issued ahead');
    store.replaceAll('test', bookstoreMesh().filter((o) => o.metadata.namespace !== 'bookthief' && !(o.kind === 'Namespace' && o.metadata.name === 'bookthief')));
    await controller.flush();
    assert.equal(certificates.peekServiceCertificate(thief), undefined, 'bookthief left the mesh: its certificate is forgotten');
    assert.ok(certificates.peekServiceCertificate(serviceIdentity('bookbuyer', 'bookbuyer')), 'the others are kept');
    const stranger = verified('66666666-6666-4666-8666-666666666666.sidecar.nobody.nosuchns.cluster.local');
    await controller.onStreamOpen(stranger, 7);
    assert.ok(certificates.peekServiceCertificate(stranger.identity), 'a connected proxy outside the mesh has its certificate');
    controller.onStreamClose(stranger, 7);
    assert.equal(certificates.peekServiceCertificate(stranger.identity), undefined, 'forgotten once it left');
    controller.stop();
    certificates.stop();
  });

  it('keeps the last good snapshot when a change yields a resource Envoy would reject', async () => {
    const { store, controller, certificates, cache } = await setup();
    const STORE_PROXY = verified('33333333-3333-4333-8333-333333333333.sidecar.bookstore.bookstore.cluster.local');
    await controller.onStreamOpen(STORE_PROXY, 1);
    const good = cache.getSnapshot(STORE_PROXY.uuid)!;
    // A header value with CR LF passes the CRD schema but breaks Envoy's HTTP_HEADER_VALUE rule.
    store.replaceAll('test', [
      ...bookstoreMesh(),
      {
        apiVersion: 'policy.openservicemesh.io/v1alpha1',
        kind: 'UpstreamTrafficSetting',
        metadata: { name: 'limits', namespace: 'bookstore' },
        spec: {
          host: 'bookstore-v1.bookstore.svc.cluster.local',
          rateLimit: { local: { http: { requests: 10, unit: 'second', responseHeadersToAdd: [{ name: 'x-limited', value: 'yes\r\nInjected: 1' }] } } },
        },
      },
    ]);
    await controller.flush();
    await until(() => controller.validationFailures().length > 0, 'the violation');
    const [failure] = controller.validationFailures();
    assert.equal(failure.proxy.uuid, STORE_PROXY.uuid);
    assert.ok(failure.violations.some((v) => v.name === 'rds-inbound.14001' && /value/.test(v.path)));
    assert.equal(cache.getSnapshot(STORE_PROXY.uuid), good, 'the last good snapshot stays');

    const late = verified('44444444-4444-4444-8444-444444444444.sidecar.bookstore.bookstore.cluster.local');
    await controller.onStreamOpen(late, 2);
    const first = cache.getSnapshot(late.uuid)!;
    assert.equal(first.resources.get(TypeUrl.RouteConfiguration)!.has('rds-inbound.14001'), false, 'the invalid route configuration is left out');
    assert.ok(first.resources.get(TypeUrl.Cluster)!.has('bookstore/bookstore-v1|14001|local'));
    controller.stop();
    certificates.stop();
  });

  it('pushes a config change to every connected proxy once, after the debounce', async () => {
    const { store, controller, certificates, seen } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    await controller.onStreamOpen(THIEF, 2);
    const objects = bookstoreMesh().filter((o) => o.kind !== 'MeshConfig');
    objects.push(k8s.meshConfig(true));
    store.replaceAll('test', objects);
    await until(() => seen.get(THIEF.uuid)!.length === 2, 'the permissive-mode push');
    const thief = seen.get(THIEF.uuid)!.at(-1)!;
    assert.ok(thief.resources.get(TypeUrl.Cluster)!.has('bookstore/bookstore|14001'), 'bookthief reaches bookstore in permissive mode');
    assert.equal(seen.get(BUYER.uuid)!.length, 2);
    controller.stop();
    certificates.stop();
  });

  it('regenerates only the proxies that reach a service whose endpoints changed', async () => {
    const { store, controller, certificates, seen } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    await controller.onStreamOpen(THIEF, 2);
    const objects = bookstoreMesh().map((o) =>
      o.kind === 'Pod' && o.metadata.name === 'bookstore-v2-1' ? { ...o, status: { podIP: '10.244.9.9', phase: 'Running' } } : o,
    );
    store.replaceAll('test', objects);
    await until(() => seen.get(BUYER.uuid)!.length === 2, "bookbuyer's new endpoints");
    await controller.flush();
    assert.equal(seen.get(THIEF.uuid)!.length, 1, 'bookthief reaches no bookstore: not regenerated');
    const buyer = seen.get(BUYER.uuid)!;
    assert.notEqual(buyer[1].versions.get(TypeUrl.ClusterLoadAssignment), buyer[0].versions.get(TypeUrl.ClusterLoadAssignment));
    assert.equal(buyer[1].versions.get(TypeUrl.Listener), buyer[0].versions.get(TypeUrl.Listener));
    controller.stop();
    certificates.stop();
  });

  it('regenerates only the proxies of the identities a new TrafficTarget names', async () => {
    const { store, controller, certificates, seen, generated } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    await controller.onStreamOpen(THIEF, 2);
    const before = await generated();
    const grant = k8s.trafficTarget('bookstore', 'thief-access', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }]);
    store.replaceAll('test', [...bookstoreMesh(), grant]);
    await until(() => seen.get(THIEF.uuid)!.length === 2, "bookthief's new access");
    await controller.flush();
    const thief = seen.get(THIEF.uuid)!.at(-1)!;
    assert.ok(thief.resources.get(TypeUrl.Cluster)!.has('bookstore/bookstore-v1|14001'), 'bookthief now reaches bookstore');
    assert.equal(await generated(), before + 1, 'only bookthief was regenerated, not bookbuyer');
    assert.equal(seen.get(BUYER.uuid)!.length, 1);
    controller.stop();
    certificates.stop();
  });

  it('keeps a proxy on its last good snapshot when a change leaves it unchanged', async () => {
    const { store, controller, certificates, cache } = await setup();
    await controller.onStreamOpen(BUYER, 1);
    const before = cache.getSnapshot(BUYER.uuid)!;
    store.replaceAll('test', [...bookstoreMesh(), k8s.namespace('elsewhere', 'another-mesh')]);
    await controller.flush();
    await new Promise((r) => setTimeout(r, 30));
    await controller.flush();
    assert.deepEqual(cache.getSnapshot(BUYER.uuid)!.versions, before.versions);
    controller.stop();
    certificates.stop();
  });

  it("regenerates only the rotated identity's proxies when a certificate rotates", async () => {
    const timers = new ManualTimers();
    const { controller, certificates, seen } = await setup(timers);
    await controller.onStreamOpen(BUYER, 1);
    timers.advance(1200_000); // the thief's certificate is issued 20 min later, so it rotates later
    await controller.onStreamOpen(THIEF, 2);
    const buyerSecret = seen.get(BUYER.uuid)![0].versions.get(TypeUrl.Secret);
    const thiefCount = seen.get(THIEF.uuid)!.length;
    // Past the buyer's renewal time: 2/3 of the 24 h MeshConfig default validity.
    timers.advance(16 * 3600_000 - 1200_000 + 1000);
    await certificates.settled();
    await until(() => seen.get(BUYER.uuid)!.length === 2, "the buyer's SDS push");
    assert.notEqual(seen.get(BUYER.uuid)![1].versions.get(TypeUrl.Secret), buyerSecret, 'new service certificate');
    assert.equal(
      seen.get(BUYER.uuid)![1].versions.get(TypeUrl.Cluster),
      seen.get(BUYER.uuid)![0].versions.get(TypeUrl.Cluster),
      'only SDS changed',
    );
    await controller.flush();
    assert.equal(seen.get(THIEF.uuid)!.length, thiefCount, 'the other identity got nothing');
    controller.stop();
    certificates.stop();
  });

  it('a certificate rotation regenerates SDS alone, and nothing of a proxyless client of that identity', async () => {
    const timers = new ManualTimers();
    const { controller, certificates, cache, configurations, typesGenerated } = await setup(timers);
    const GRPC = verified('88888888-8888-4888-8888-888888888888.sidecar.bookbuyer.bookbuyer.cluster.local');
    await controller.onStreamOpen(BUYER, 1);
    await controller.onStreamOpen(GRPC, 2, { user_agent_name: 'gRPC Node Pure JS' });
    const [buyer, grpc] = [cache.getSnapshot(BUYER.uuid)!, cache.getSnapshot(GRPC.uuid)!];
    const [generatedBefore, typesBefore] = [await configurations(), await typesGenerated()];
    timers.advance(16 * 3600_000 + 1000); // past the renewal time: 2/3 of the 24 h default validity
    await certificates.settled();
    await until(() => cache.getSnapshot(BUYER.uuid) !== buyer, "the buyer's SDS push");
    await controller.flush();
    assert.equal(await configurations(), generatedBefore, 'no full generation');
    assert.deepEqual(grown(typesBefore, await typesGenerated()), { SDS: 1 });
    const after = cache.getSnapshot(BUYER.uuid)!;
    assert.notEqual(after.versions.get(TypeUrl.Secret), buyer.versions.get(TypeUrl.Secret), 'a new service certificate');
    for (const type of [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration]) assert.equal(after.resources.get(type), buyer.resources.get(type), `${type} untouched`);
    assert.equal(cache.getSnapshot(GRPC.uuid), grpc, 'the proxyless client (no SDS) keeps its snapshot');
    controller.stop();
    certificates.stop();
  });
});

describe('mergePushRequests', () => {
  it('keeps every reason of both requests', () => {
    const merged = mergePushRequests(
      { configChanged: false, resync: false, rotated: new Set([BUYER.identity]), kinds: new Set(['Pod']), firstEventAt: 2000 },
      { configChanged: true, resync: true, rotated: new Set([THIEF.identity]), kinds: new Set(['Service']), firstEventAt: 1000 },
    );
    assert.equal(merged.configChanged, true);
    assert.equal(merged.resync, true);
    assert.deepEqual([...merged.rotated].sort(), [BUYER.identity, THIEF.identity]);
    assert.deepEqual([...merged.kinds].sort(), ['Pod', 'Service']);
    assert.equal(merged.firstEventAt, 1000, 'the earliest event is when the wait started');
  });
});

describe('MeshController policy problems while the source syncs', () => {
  it('logs no problem of a store still filling, then the problems of the synced store once each', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'trellis-ctl-sync-'));
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const ca = await CertificateAuthority.loadOrCreate(dir);
    const store = new ObjectStore();
    let synced = false;
    const controller = new MeshController({
      store,
      certificates: new CertificateManager({ ca, validitySeconds: 3600 }),
      cache: new SnapshotCache(),
      logger,
      metrics: new Registry(),
      meshName: 'osm',
      debounceQuietMs: 5,
      debounceMaxDelayMs: 50,
      resyncIntervalMs: 0,
      sourceSynced: () => synced,
    });
    try {
      controller.start();
      // A Kubernetes source's first objects: a namespace, not labelled into the mesh yet.
      store.replaceAll('test', [k8s.namespace('default', 'another-mesh')]);
      await controller.flush();
      assert.match(controller.policyProblems().map((p) => p.message).join('\n'), /no namespace is labelled/);
      assert.deepEqual(lines.filter((l) => l.includes('policy problem')), []);
      // Synced, and still no namespace in the mesh: now it is a problem, logged once.
      synced = true;
      store.replaceAll('test', [k8s.namespace('default', 'another-mesh'), k8s.namespace('other', 'another-mesh')]);
      await controller.flush();
      store.replaceAll('test', [k8s.namespace('default', 'another-mesh')]);
      await controller.flush();
      assert.equal(lines.filter((l) => l.includes('no namespace is labelled')).length, 1);
    } finally {
      controller.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
