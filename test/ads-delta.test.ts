import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { encodeAny } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { SnapshotCache, ResourceInterner, buildProxySnapshot, replaceResources } from '../src/xds/cache/snapshot-cache.js';
import { AdsServer, LARGE_RESPONSE_BYTES, authenticateFromNodeId } from '../src/xds/server/ads-server.js';
import type { DeltaDiscoveryResponse__Output } from '../src/xds/server/discovery-types.js';
import { AdsTestClient, TEST_NODE_ID } from './helpers/ads-client.js';
import { PROXY, snapshot, startAdsHarness, type AdsHarness, type Spec } from './helpers/ads-harness.js';
import { decodeDeltaResources, deltaNames, openDeltaTestStream, type DeltaTestStream } from './helpers/delta-client.js';
import { eventually } from './helpers/wait.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, RouteConfiguration: RDS, Secret: SDS } = TypeUrl;

const BASE: Spec = {
  clusters: { 'bookstore/bookstore|14001': 1, 'bookwarehouse/bookwarehouse|14001': 1 },
  endpoints: { 'bookstore/bookstore|14001': 1, 'bookwarehouse/bookwarehouse|14001': 1 },
  listeners: { 'outbound-listener': 1, 'inbound-listener': 1 },
  routes: { 'rds-outbound.80': 1, 'rds-inbound.80': 1 },
  secrets: { 'service-cert': 1 },
};
const STORE = 'bookstore/bookstore|14001';
const WAREHOUSE = 'bookwarehouse/bookwarehouse|14001';

type Harness = AdsHarness<DeltaTestStream, [resumeFrom?: DeltaTestStream]>;

let h: Harness;

/** Starts a plaintext server; `initial`, when given, is the proxy's snapshot set in onStreamOpen if it has none yet. */
function setup(initial?: Spec): Promise<Harness> {
  return startAdsHarness(
    (client, resumeFrom?: DeltaTestStream) => openDeltaTestStream(client, TEST_NODE_ID, resumeFrom),
    initial && { spec: initial, unlessSet: true },
  );
}

let barriers = 0;

/**
 * Proves that nothing was sent between the last response read and now: subscribes to a secret
 * that doesn't exist, whose answer (its name in removed_resources) comes after anything the
 * server had queued before (one job at a time per stream), and must be the very next response.
 */
async function assertNothingMoreSent(s: DeltaTestStream): Promise<void> {
  const name = `barrier-${++barriers}`;
  s.subscribe(SDS, [name]);
  const r = await s.next();
  assert.equal(r.type_url, SDS, `expected only the barrier, got a ${r.type_url} response ${JSON.stringify(deltaNames(r))}`);
  assert.deepEqual(r.removed_resources ?? [], [name]);
  assert.deepEqual(deltaNames(r), []);
  s.ack(r);
}

/** Reads the next response, checks its type, ACKs it, and returns it. */
async function nextOf(s: DeltaTestStream, typeUrl: string): Promise<DeltaDiscoveryResponse__Output> {
  const r = await s.next();
  assert.equal(r.type_url, typeUrl, `expected a ${typeUrl} response, got ${r.type_url} ${JSON.stringify(deltaNames(r))} removed ${JSON.stringify(r.removed_resources)}`);
  s.ack(r);
  return r;
}

/** Invariants of every delta response: fresh nonce, type URL, resource types, names and versions. */
function assertResponseInvariants(): void {
  const nonces = new Set<string>();
  for (const s of h.streams) {
    for (const r of s.responses) {
      assert.ok(r.nonce, 'response has a nonce');
      assert.ok(!nonces.has(r.nonce!), `nonce ${r.nonce} is fresh`);
      nonces.add(r.nonce!);
      assert.ok(Object.values(TypeUrl).includes(r.type_url as TypeUrl), `known type_url ${r.type_url}`);
      assert.ok(r.system_version_info, 'response has a system_version_info');
      const names = new Set<string>();
      for (const res of r.resources ?? []) {
        assert.equal(res.resource?.type_url, r.type_url, 'resource type matches response type');
        assert.ok(res.name && res.version, 'resource has a name and a version');
        assert.ok(!names.has(res.name!), `resource ${res.name} once per response`);
        names.add(res.name!);
      }
      for (const removed of r.removed_resources ?? []) assert.ok(!names.has(removed), `${removed} both sent and removed`);
    }
  }
}

describe('Delta ADS server (DeltaAggregatedResources)', () => {
  afterEach(async () => {
    assertResponseInvariants();
    for (const s of h.streams) s.cancel();
    h.client.close();
    await h.server.stop(100);
  });

  describe('with a snapshot set on stream open', () => {
    beforeEach(async () => {
      h = await setup(BASE);
    });

    it('sends every cluster to a wildcard CDS subscription, with per-resource versions', async () => {
      const s = h.open();
      s.subscribe(CDS);
      const r = await nextOf(s, CDS);
      assert.deepEqual(deltaNames(r).sort(), [STORE, WAREHOUSE]);
      assert.deepEqual(r.removed_resources ?? [], []);
      const snap = h.cache.getSnapshot(PROXY.uuid)!;
      assert.equal(r.system_version_info, snap.versions.get(CDS));
      for (const res of r.resources ?? []) assert.equal(res.version, snap.resources.get(CDS)!.get(res.name!)!.version);
      const decoded = decodeDeltaResources(r);
      assert.deepEqual(decoded.map((c) => c.name).sort(), [STORE, WAREHOUSE]);
      assert.deepEqual(s.held(CDS), Object.fromEntries([...snap.resources.get(CDS)!].map(([n, c]) => [n, c.version]).sort()));
      await eventually(() => h.typeInfo(CDS)?.versionAcked === r.system_version_info, 'the ACK');
      assert.deepEqual(h.acks, [{ typeUrl: CDS, version: r.system_version_info }]);
      const [info] = h.server.streams();
      assert.equal(info.mode, 'delta');
      assert.equal(info.proxy.uuid, PROXY.uuid);
      assert.equal(h.typeInfo(CDS)?.wildcard, true);
      assert.equal(h.typeInfo(CDS)?.lastNonceSent, r.nonce);
    });

    it('sends only the subscribed ClusterLoadAssignment to a named EDS subscription', async () => {
      const s = h.open();
      s.subscribe(EDS, [STORE]);
      const r = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(r), [STORE]);
      assert.equal(decodeDeltaResources(r)[0].cluster_name, STORE);
      assert.deepEqual(h.typeInfo(EDS)?.resourceNames, [STORE]);
      assert.equal(h.typeInfo(EDS)?.wildcard, false);
      // A change to a CLA not subscribed sends nothing.
      h.set({ ...BASE, endpoints: { ...BASE.endpoints, [WAREHOUSE]: 2 } });
      await assertNothingMoreSent(s);
    });

    it('answers a re-subscribe to a resource the client already has, even though it is unchanged', async () => {
      const s = h.open();
      s.subscribe(EDS, [STORE]);
      const first = await nextOf(s, EDS);
      s.subscribe(EDS, [STORE]);
      const again = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(again), [STORE]);
      assert.equal(again.resources![0].version, first.resources![0].version);
      assert.notEqual(again.nonce, first.nonce);
    });

    it('sends nothing for a resource after it is unsubscribed, and sends it again on a new subscribe', async () => {
      const s = h.open();
      s.subscribe(EDS, [STORE, WAREHOUSE]);
      const r = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(r).sort(), [STORE, WAREHOUSE]);
      s.unsubscribe(EDS, [STORE]);
      await eventually(() => h.typeInfo(EDS)?.resourceNames.length === 1, 'the unsubscribe');
      assert.deepEqual(s.held(EDS), { [WAREHOUSE]: r.resources!.find((x) => x.name === WAREHOUSE)!.version! });
      h.set({ ...BASE, endpoints: { ...BASE.endpoints, [STORE]: 7 } });
      await assertNothingMoreSent(s);
      s.subscribe(EDS, [STORE]);
      const back = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(back), [STORE]);
      assert.match(JSON.stringify(decodeDeltaResources(back)[0]), /10\.0\.0\.7/);
    });

    it('sends a deleted cluster in removed_resources', async () => {
      const s = h.open();
      s.subscribe(CDS);
      await nextOf(s, CDS);
      h.set({ ...BASE, clusters: { [STORE]: 1 } });
      const r = await nextOf(s, CDS);
      assert.deepEqual(deltaNames(r), []);
      assert.deepEqual(r.removed_resources ?? [], [WAREHOUSE]);
      assert.deepEqual(Object.keys(s.held(CDS)), [STORE]);
      await assertNothingMoreSent(s);
    });

    it('answers a subscribe to a name that does not exist in removed_resources, and sends it once it appears', async () => {
      const s = h.open();
      s.subscribe(RDS, ['rds-outbound.9999']);
      const r = await nextOf(s, RDS);
      assert.deepEqual(deltaNames(r), []);
      assert.deepEqual(r.removed_resources ?? [], ['rds-outbound.9999']);
      h.set({ ...BASE, routes: { ...BASE.routes, 'rds-outbound.9999': 1 } });
      const later = await nextOf(s, RDS);
      assert.deepEqual(deltaNames(later), ['rds-outbound.9999']);
      assert.deepEqual(later.removed_resources ?? [], []);
    });

    it('sends only the resources that changed', async () => {
      const s = h.open();
      s.subscribe(LDS);
      await nextOf(s, LDS);
      s.subscribe(RDS, ['rds-outbound.80', 'rds-inbound.80']);
      await nextOf(s, RDS);
      h.set({ ...BASE, listeners: { ...BASE.listeners, 'inbound-listener': 2 }, routes: { ...BASE.routes, 'rds-outbound.80': 3 } });
      const lds = await nextOf(s, LDS);
      assert.deepEqual(deltaNames(lds), ['inbound-listener']);
      const rds = await nextOf(s, RDS);
      assert.deepEqual(deltaNames(rds), ['rds-outbound.80']);
      assert.equal(rds.system_version_info, h.cache.getSnapshot(PROXY.uuid)!.versions.get(RDS));
      // The same snapshot again (a resync) sends nothing.
      h.set({ ...BASE, listeners: { ...BASE.listeners, 'inbound-listener': 2 }, routes: { ...BASE.routes, 'rds-outbound.80': 3 } });
      await assertNothingMoreSent(s);
    });

    it('after a reconnect with initial_resource_versions, sends only what differs', async () => {
      const s1 = h.open();
      s1.subscribe(CDS);
      await nextOf(s1, CDS);
      s1.subscribe(EDS, [STORE, WAREHOUSE]);
      await nextOf(s1, EDS);
      s1.cancel();
      await eventually(() => h.events.some((e) => e.startsWith('close')), 'the first stream to close');
      // While disconnected: one cluster changes, one is removed, one is added; the CLAs don't change.
      h.set({ ...BASE, clusters: { [STORE]: 5, 'bookthief/bookthief|14001': 1 } });
      const s2 = h.open(s1);
      s2.subscribe(CDS);
      const updates = await nextOf(s2, CDS);
      assert.deepEqual(deltaNames(updates).sort(), [STORE, 'bookthief/bookthief|14001']);
      const removals = await nextOf(s2, CDS);
      assert.deepEqual(deltaNames(removals), []);
      assert.deepEqual(removals.removed_resources ?? [], [WAREHOUSE]);
      s2.subscribe(EDS);
      // The client holds both CLAs at their current versions, but the changed cluster warms
      // until it gets its CLA: that one is sent again, the other is not.
      const eds = await nextOf(s2, EDS);
      assert.deepEqual(deltaNames(eds), [STORE]);
      await assertNothingMoreSent(s2);
      assert.deepEqual(h.typeInfo(EDS)?.resourceNames, [STORE, WAREHOUSE]);
      assert.deepEqual(Object.keys(s2.held(CDS)).sort(), [STORE, 'bookthief/bookthief|14001']);
    });

    it('records a NACK (hook, metric, debug API) and does not resend until something changes', async () => {
      const s = h.open();
      s.subscribe(CDS);
      const r = await s.next();
      s.nack(r, 'cluster bookstore: invalid connect_timeout');
      await eventually(() => h.nacks.length === 1, 'the NACK hook');
      assert.equal(h.nacks[0].typeUrl, CDS);
      assert.equal(h.nacks[0].version, r.system_version_info);
      assert.equal(h.nacks[0].detail.message, 'cluster bookstore: invalid connect_timeout');
      assert.equal(h.typeInfo(CDS)?.lastNack?.message, 'cluster bookstore: invalid connect_timeout');
      assert.equal(h.typeInfo(CDS)?.versionAcked, undefined);
      const metrics = await h.registry.getMetricsAsJSON();
      const nacks = metrics.find((m) => m.name === 'trellis_xds_nacks_total')!;
      assert.deepEqual(
        nacks.values.filter((v) => v.value > 0).map((v) => [v.labels.type, v.value]),
        [['CDS', 1]],
      );
      await assertNothingMoreSent(s);
      // The same snapshot again sends nothing either; a change sends the changed cluster.
      h.set(BASE);
      await assertNothingMoreSent(s);
      h.set({ ...BASE, clusters: { ...BASE.clusters, [STORE]: 9 } });
      const fixed = await nextOf(s, CDS);
      assert.deepEqual(deltaNames(fixed), [STORE]);
      await eventually(() => h.typeInfo(CDS)?.versionAcked === fixed.system_version_info, 'the ACK of the fix');
    });

    it('applies a subscription change whatever its nonce; only ACK bookkeeping uses the nonce', async () => {
      const s = h.open();
      s.subscribe(EDS, [STORE]);
      const r1 = await s.next();
      s.subscribe(EDS, [WAREHOUSE]);
      const r2 = await s.next();
      s.ack(r2);
      await eventually(() => h.acks.length === 1, 'the ACK of r2');
      // An answer to the superseded r1, carrying a subscribe: the subscribe is answered, no ACK is recorded.
      s.send({ type_url: EDS, response_nonce: r1.nonce, resource_names_subscribe: [STORE] });
      const r3 = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(r3), [STORE]);
      await eventually(() => h.acks.length === 2, 'the ACK of r3');
      assert.deepEqual(
        h.acks.map((a) => a.typeUrl),
        [EDS, EDS],
      );
      assert.equal(h.typeInfo(EDS)?.lastNonceSent, r3.nonce);
    });

    it('resends a cluster’s ClusterLoadAssignment after the cluster changes, even if the CLA (or its whole map) is unchanged', async () => {
      const s = h.open();
      s.subscribe(CDS);
      await nextOf(s, CDS);
      s.subscribe(EDS, [STORE, WAREHOUSE]);
      const eds = await nextOf(s, EDS);
      h.set({ ...BASE, clusters: { ...BASE.clusters, [STORE]: 2 } });
      const cds = await nextOf(s, CDS);
      assert.deepEqual(deltaNames(cds), [STORE]);
      const warm = await nextOf(s, EDS);
      assert.deepEqual(deltaNames(warm), [STORE]);
      assert.equal(warm.resources![0].version, eds.resources!.find((x) => x.name === STORE)!.version);
      await assertNothingMoreSent(s);
      // Again with only the CDS map new (as the controller's per-type regeneration makes it): the
      // EDS map is the very object EDS was last planned from, and the CLA still goes out again.
      const before = h.cache.getSnapshot(PROXY.uuid)!;
      const changed = snapshot({ clusters: { [STORE]: 3 } }).resources.get(CDS)!.get(STORE)!;
      const after = replaceResources(before, CDS, [{ name: STORE, resource: changed.resource }], new ResourceInterner());
      assert.equal(after.resources.get(EDS), before.resources.get(EDS));
      h.cache.setSnapshot(PROXY.uuid, after);
      assert.deepEqual(deltaNames(await nextOf(s, CDS)), [STORE]);
      assert.deepEqual(deltaNames(await nextOf(s, EDS)), [STORE]);
      await assertNothingMoreSent(s);
      // The same snapshot again (every map the same object) sends nothing; a name unsubscribed
      // and subscribed again while its map is the same object is sent again.
      h.cache.setSnapshot(PROXY.uuid, after);
      await assertNothingMoreSent(s);
      s.unsubscribe(EDS, [WAREHOUSE]);
      await eventually(() => h.typeInfo(EDS)?.resourceNameCount === 1, 'the unsubscribe');
      s.subscribe(EDS, [WAREHOUSE]);
      assert.deepEqual(deltaNames(await nextOf(s, EDS)), [WAREHOUSE]);
      await assertNothingMoreSent(s);
    });

    it('subscribes with `*` to every cluster and stops with an unsubscribe of `*`', async () => {
      const s = h.open();
      s.subscribe(CDS, [STORE]);
      assert.deepEqual(deltaNames(await nextOf(s, CDS)), [STORE]);
      assert.equal(h.typeInfo(CDS)?.wildcard, false);
      s.subscribe(CDS, ['*']);
      assert.deepEqual(deltaNames(await nextOf(s, CDS)).sort(), [STORE, WAREHOUSE]);
      assert.equal(h.typeInfo(CDS)?.wildcard, true);
      s.unsubscribe(CDS, ['*']);
      await eventually(() => h.typeInfo(CDS)?.wildcard === false, 'the unsubscribe of *');
      assert.deepEqual(Object.keys(s.held(CDS)), [STORE]);
      h.set({ ...BASE, clusters: { [STORE]: 3, [WAREHOUSE]: 3 } });
      assert.deepEqual(deltaNames(await nextOf(s, CDS)), [STORE]);
      await assertNothingMoreSent(s);
    });

    it('ends the stream with UNAUTHENTICATED when node.id is not a proxy CommonName', async () => {
      const call = h.client.openDeltaStream() as unknown as DeltaTestStream['call'];
      call.write({ node: { id: 'nope' }, type_url: CDS });
      const err = await new Promise<grpc.ServiceError>((resolve) => call.on('error', resolve));
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      assert.deepEqual(h.events, []);
    });

    it('calls onStreamOpen and onStreamClose once, and counts the stream as a connected proxy', async () => {
      const s = h.open();
      s.subscribe(CDS);
      await nextOf(s, CDS);
      const gauge = async () =>
        (await h.registry.getMetricsAsJSON()).find((m) => m.name === 'trellis_xds_connected_proxies')!.values[0]?.value;
      assert.equal(await gauge(), 1);
      s.cancel();
      await eventually(() => h.events.length === 2, 'the close hook');
      assert.match(h.events[0], /^open /);
      assert.match(h.events[1], /^close /);
      assert.equal(await gauge(), 0);
      assert.deepEqual(h.server.streams(), []);
    });
  });

  describe('before the proxy has a snapshot', () => {
    beforeEach(async () => {
      h = await setup();
    });

    it('answers when the snapshot arrives, CDS, EDS, LDS, RDS, SDS; a later push removes clusters and endpoints last', async () => {
      const s = h.open();
      s.subscribe(SDS, ['service-cert']);
      s.subscribe(RDS, ['rds-outbound.80']);
      s.subscribe(LDS);
      s.subscribe(EDS, [STORE, WAREHOUSE]);
      s.subscribe(CDS);
      await eventually(() => (h.server.streams()[0]?.types.length ?? 0) === 5, 'all five subscriptions');
      assert.equal(s.responses.length, 0);
      h.set(BASE);
      const order: string[] = [];
      for (let i = 0; i < 5; i++) order.push((await nextOf(s, [CDS, EDS, LDS, RDS, SDS][i])).type_url!);
      assert.deepEqual(order, [CDS, EDS, LDS, RDS, SDS]);
      assert.deepEqual(deltaNames(s.responses[1]).sort(), [STORE, WAREHOUSE]);

      // Warehouse goes away (cluster and CLA); the listener and route stop referring to it.
      h.set({
        ...BASE,
        clusters: { [STORE]: 1 },
        endpoints: { [STORE]: 1 },
        listeners: { ...BASE.listeners, 'outbound-listener': 2 },
        routes: { ...BASE.routes, 'rds-outbound.80': 2 },
      });
      const lds = await nextOf(s, LDS);
      assert.deepEqual(deltaNames(lds), ['outbound-listener']);
      const rds = await nextOf(s, RDS);
      assert.deepEqual(deltaNames(rds), ['rds-outbound.80']);
      const cds = await nextOf(s, CDS);
      assert.deepEqual(cds.removed_resources ?? [], [WAREHOUSE]);
      const eds = await nextOf(s, EDS);
      assert.deepEqual(eds.removed_resources ?? [], [WAREHOUSE]);
      await assertNothingMoreSent(s);
    });

    it('answers a wildcard CDS subscription with an empty response when the snapshot has no clusters', async () => {
      const s = h.open();
      s.subscribe(CDS);
      await eventually(() => h.server.streams().length === 1, 'stream open');
      h.set({});
      const r = await nextOf(s, CDS);
      assert.deepEqual(r.resources ?? [], []);
      assert.deepEqual(r.removed_resources ?? [], []);
    });
  });
});

describe('large responses', () => {
  it('logs a response over 4 MiB with its type, proxy and size, on SotW and delta streams', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
    const cache = new SnapshotCache();
    const big = Buffer.alloc(LARGE_RESPONSE_BYTES + 1024, 0x41);
    const secret = { name: 'root-cert-for-mtls-inbound:bookbuyer/bookbuyer', validation_context: { trusted_ca: { inline_bytes: big } } };
    cache.setSnapshot(PROXY.uuid, buildProxySnapshot(new Map([[SDS, [{ name: secret.name, resource: encodeAny(SDS, secret) }]]]), new ResourceInterner()));
    const server = new AdsServer({ watcher: cache, logger });
    const port = await server.start({
      address: '127.0.0.1:0',
      credentials: grpc.ServerCredentials.createInsecure(),
      authenticate: authenticateFromNodeId,
    });
    const client = new AdsTestClient(`127.0.0.1:${port}`);
    try {
      // The server sends it; the clients, at gRPC's default 4 MiB receive limit, refuse it:
      // which is why the server says so in its log.
      const sotw = client.openStream();
      sotw.request(SDS, [secret.name]);
      assert.equal((await sotw.ended(15000)).code, grpc.status.RESOURCE_EXHAUSTED);
      const delta = openDeltaTestStream(client);
      delta.subscribe(SDS, [secret.name]);
      assert.equal((await delta.ended(15000)).code, grpc.status.RESOURCE_EXHAUSTED);
      const warnings = lines.filter((l) => String(l.msg).includes('large'));
      assert.equal(warnings.length, 2);
      for (const w of warnings) {
        assert.equal(w.type, 'SDS');
        assert.equal(w.proxy, PROXY.uuid);
        assert.ok(Number(w.bytes) > LARGE_RESPONSE_BYTES);
      }
    } finally {
      client.close();
      await server.stop(100);
    }
  });
});
