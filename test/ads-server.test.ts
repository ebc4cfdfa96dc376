import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { TypeUrl } from '../src/api/type-urls.js';
import { resourceNames, type AdsTestStream } from './helpers/ads-client.js';
import { PROXY, snapshot, startAdsHarness, type AdsHarness, type Spec } from './helpers/ads-harness.js';
import { eventually } from './helpers/wait.js';
import type { DiscoveryResponse__Output } from '../src/xds/server/discovery-types.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, RouteConfiguration: RDS, Secret: SDS } = TypeUrl;

type Harness = AdsHarness<AdsTestStream, [nodeId?: string]>;

let h: Harness;

/** Starts a plaintext server; `initial`, when given, is set as the proxy's snapshot in onStreamOpen (as the controller does). */
function setup(initial?: Spec): Promise<Harness> {
  return startAdsHarness((client, nodeId?: string) => client.openStream(nodeId), initial && { spec: initial });
}

/** Invariants of every response of every stream: fresh nonce, and resources of the response's type. */
function assertResponseInvariants(): void {
  for (const s of h.streams) {
    const nonces = new Set<string>();
    for (const r of s.responses) {
      assert.ok(r.nonce, 'response has a nonce');
      assert.ok(!nonces.has(r.nonce!), `nonce ${r.nonce} is fresh`);
      nonces.add(r.nonce!);
      assert.ok(Object.values(TypeUrl).includes(r.type_url as TypeUrl), `known type_url ${r.type_url}`);
      for (const res of r.resources ?? []) assert.equal(res.type_url, r.type_url, 'resource type matches response type');
      assert.ok(r.version_info, 'response has a version');
    }
  }
}

/**
 * A barrier proving absence: change a listener, wait for the LDS response, and return what came
 * before it (the stream must be subscribed to LDS).
 */
async function barrier(stream: AdsTestStream, spec: Spec, n: number): Promise<DiscoveryResponse__Output[]> {
  h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, listeners: { ...spec.listeners, barrier: n } }));
  const before: DiscoveryResponse__Output[] = [];
  for (;;) {
    const r = await stream.next();
    if (r.type_url === LDS && resourceNames(r).includes('barrier')) return before;
    before.push(r);
  }
}

afterEach(async () => {
  try {
    assertResponseInvariants();
  } finally {
    h.client.close();
    await h.server.stop(1000);
  }
});

describe('ADS server, state of the world', () => {
  describe('with a snapshot set on stream open', () => {
    const spec: Spec = { clusters: { a: 1, b: 1 }, endpoints: { a: 1, b: 1 }, listeners: { l: 1 } };
    beforeEach(async () => {
      h = await setup(spec);
    });

    it('answers a wildcard CDS request with every cluster, a nonce and the type URL; ACK records the version', async () => {
      const s = h.open();
      s.request(CDS);
      const r = await s.next();
      assert.equal(r.type_url, CDS);
      assert.deepEqual(resourceNames(r).sort(), ['a', 'b']);
      assert.deepEqual(h.events, [`open ${PROXY.uuid} 1`]);
      s.ack(r);
      await eventually(() => h.acks.length === 1, 'onAck');
      assert.deepEqual(h.acks, [{ typeUrl: CDS, version: r.version_info }]);
      const info = h.typeInfo(CDS)!;
      assert.equal(info.versionAcked, r.version_info);
      assert.equal(info.lastVersionSent, r.version_info);
      assert.equal(info.lastNonceSent, r.nonce);
      assert.equal(info.wildcard, true);
      const metrics = await h.registry.getMetricsAsJSON();
      const responses = metrics.find((m) => m.name === 'trellis_xds_responses_total')!;
      assert.deepEqual(
        responses.values.filter((v) => v.value > 0).map((v) => [v.labels.type, v.value]),
        [['CDS', 1]],
      );
      const connected = metrics.find((m) => m.name === 'trellis_xds_connected_proxies')!;
      assert.equal(connected.values[0].value, 1);
    });

    it('records a NACK and does not resend the same configuration; sends again when it changes', async () => {
      const s = h.open();
      s.request(CDS);
      s.request(LDS);
      const cds1 = await s.waitFor((r) => r.type_url === CDS);
      const lds1 = await s.waitFor((r) => r.type_url === LDS);
      s.ack(lds1);
      s.nack(cds1, 'cluster a: bad connect_timeout');
      await eventually(() => h.nacks.length === 1, 'onNack');
      assert.deepEqual(h.nacks[0], {
        typeUrl: CDS,
        version: cds1.version_info,
        detail: { code: grpc.status.INVALID_ARGUMENT, message: 'cluster a: bad connect_timeout' },
      });
      const nack = h.typeInfo(CDS)!.lastNack!;
      assert.equal(nack.version, cds1.version_info);
      assert.equal(nack.message, 'cluster a: bad connect_timeout');
      assert.equal(h.typeInfo(CDS)!.versionAcked, undefined);
      const nacks = (await h.registry.getMetricsAsJSON()).find((m) => m.name === 'trellis_xds_nacks_total')!;
      assert.deepEqual(nacks.values.filter((v) => v.value > 0).map((v) => [v.labels.type, v.value]), [['CDS', 1]]);
      assert.deepEqual(nacks.values.map((v) => v.labels.type).sort(), ['CDS', 'EDS', 'LDS', 'RDS', 'SDS'], 'every type has its series from the start');

      // The same content again (a new snapshot object with identical resources): nothing to send.
      await s.next(); // cds1
      await s.next(); // lds1
      h.cache.setSnapshot(PROXY.uuid, snapshot(spec));
      assert.deepEqual(await barrier(s, spec, 1), [], 'no CDS resent after the NACK');

      // A changed cluster: CDS goes out again (then EDS, see below).
      h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, clusters: { a: 2, b: 1 }, listeners: { ...spec.listeners, barrier: 1 } }));
      const cds2 = await s.next();
      assert.equal(cds2.type_url, CDS);
      assert.notEqual(cds2.version_info, cds1.version_info);
    });

    it('ignores a request whose nonce is stale', async () => {
      const s = h.open();
      s.request(CDS);
      s.request(LDS);
      const cds1 = await s.waitFor((r) => r.type_url === CDS);
      const lds1 = await s.waitFor((r) => r.type_url === LDS);
      s.ack(lds1);
      await s.next();
      await s.next();
      h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, clusters: { a: 3, b: 1 } }));
      const cds2 = await s.next();
      assert.equal(cds2.type_url, CDS);
      // A NACK of the superseded response: stale, so neither recorded nor answered.
      s.nack(cds1, 'old complaint');
      assert.deepEqual(await barrier(s, { ...spec, clusters: { a: 3, b: 1 } }, 1), []);
      assert.equal(h.nacks.length, 0);
      assert.equal(h.typeInfo(CDS)!.lastNack, undefined);
      s.ack(cds2);
      await eventually(() => h.acks.some((a) => a.typeUrl === CDS), 'ACK of the latest CDS');
      assert.equal(h.typeInfo(CDS)!.versionAcked, cds2.version_info);
    });

    it('treats a nonce the stream never sent as a first request (reconnect after a restart)', async () => {
      const s = h.open();
      s.request(CDS, [], 'nonce-from-an-earlier-controller', 'some-old-version');
      const r = await s.next();
      assert.equal(r.type_url, CDS);
      assert.deepEqual(resourceNames(r).sort(), ['a', 'b']);
    });

    it('sends a resource again when it is unsubscribed then subscribed again', async () => {
      const s = h.open();
      s.request(LDS);
      s.request(EDS, ['a', 'b']);
      const lds1 = await s.waitFor((r) => r.type_url === LDS);
      const eds1 = await s.waitFor((r) => r.type_url === EDS);
      s.ack(lds1);
      await s.next();
      await s.next();
      assert.deepEqual(resourceNames(eds1).sort(), ['a', 'b']);
      s.ack(eds1, ['a']); // unsubscribes b: nothing to send
      assert.deepEqual(await barrier(s, spec, 1), []);
      s.ack(eds1, ['a', 'b']); // subscribes b again (the latest EDS nonce is still eds1's)
      const eds2 = await s.next();
      assert.equal(eds2.type_url, EDS);
      assert.deepEqual(resourceNames(eds2).sort(), ['a', 'b']);
      assert.equal(eds2.version_info, eds1.version_info, 'same content, same version');
      assert.notEqual(eds2.nonce, eds1.nonce);
    });

    it('resends EDS after CDS changes, even if the ClusterLoadAssignment did not change', async () => {
      const s = h.open();
      s.request(CDS);
      const cds1 = await s.next();
      s.ack(cds1);
      s.request(EDS, ['a', 'b']);
      const eds1 = await s.next();
      assert.equal(eds1.type_url, EDS);
      s.ack(eds1);
      h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, clusters: { a: 5, b: 1 } }));
      const cds2 = await s.next();
      const eds2 = await s.next();
      assert.equal(cds2.type_url, CDS);
      assert.equal(eds2.type_url, EDS);
      assert.equal(eds2.version_info, eds1.version_info);
      assert.deepEqual(resourceNames(eds2).sort(), ['a', 'b']);
    });

    it('sends a requested name once it appears', async () => {
      const s = h.open();
      s.request(EDS, ['a', 'c']);
      const eds1 = await s.next();
      assert.deepEqual(resourceNames(eds1), ['a']);
      s.ack(eds1);
      h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, endpoints: { a: 1, b: 1, c: 1 } }));
      const eds2 = await s.next();
      assert.equal(eds2.type_url, EDS);
      assert.deepEqual(resourceNames(eds2).sort(), ['a', 'c']);
    });

    it('sends LDS/CDS deletions as the complete set', async () => {
      const s = h.open();
      s.request(CDS);
      s.ack(await s.next());
      h.cache.setSnapshot(PROXY.uuid, snapshot({ ...spec, clusters: { a: 1 } }));
      const r = await s.next();
      assert.equal(r.type_url, CDS);
      assert.deepEqual(resourceNames(r), ['a']);
    });

    it('ignores an unknown type URL and keeps serving the stream', async () => {
      const s = h.open();
      s.request('type.googleapis.com/envoy.service.runtime.v3.Runtime', ['rtds']);
      s.request(CDS);
      const r = await s.next();
      assert.equal(r.type_url, CDS);
    });

    it('calls onStreamClose once when the client cancels', async () => {
      const s = h.open();
      s.request(CDS);
      await s.next();
      s.cancel();
      assert.equal(await h.closed, 1);
      await eventually(() => h.server.streams().length === 0, 'stream unregistered');
      assert.deepEqual(h.events, [`open ${PROXY.uuid} 1`, `close ${PROXY.uuid} 1`]);
      const connected = (await h.registry.getMetricsAsJSON()).find((m) => m.name === 'trellis_xds_connected_proxies')!;
      assert.equal(connected.values[0].value, 0);
    });

    it('calls onStreamClose when the server stops', async () => {
      const s = h.open();
      s.request(CDS);
      await s.next();
      await h.server.stop(1000);
      assert.equal(await h.closed, 1);
      assert.equal((await s.ended()).code, grpc.status.UNAVAILABLE);
    });

    it('ends the stream with UNAUTHENTICATED when node.id is not a proxy CommonName', async () => {
      const s = h.open('not-a-proxy.sidecar.x.y.cluster.local');
      s.request(CDS);
      const status = await s.ended();
      assert.equal(status.code, grpc.status.UNAUTHENTICATED);
      assert.match(status.details, /not a UUID/);
      assert.deepEqual(h.events, []);
      assert.equal(s.responses.length, 0);
    });

    it('serves DeltaAggregatedResources on the same port, with the same authentication', async () => {
      const call = h.client.openDeltaStream();
      call.write({ node: { id: 'not-a-proxy.sidecar.x.y.cluster.local' }, type_url: CDS });
      const err = await new Promise<grpc.ServiceError>((resolve) => call.on('error', resolve));
      assert.equal(err.code, grpc.status.UNAUTHENTICATED);
      assert.deepEqual(h.events, []);
    });
  });

  describe('before the proxy has a snapshot', () => {
    beforeEach(async () => {
      h = await setup();
    });

    it('answers requests when the snapshot arrives, in make-before-break order CDS, EDS, LDS, RDS, SDS', async () => {
      const s = h.open();
      s.request(SDS, ['service-cert']);
      s.request(RDS, ['rds-outbound.80']);
      s.request(LDS);
      s.request(EDS, ['bookstore/bookstore|14001']);
      s.request(CDS);
      await eventually(() => (h.server.streams()[0]?.types.length ?? 0) === 5, 'all five subscriptions');
      assert.equal(s.responses.length, 0);
      h.cache.setSnapshot(
        PROXY.uuid,
        snapshot({
          clusters: { 'bookstore/bookstore|14001': 1 },
          endpoints: { 'bookstore/bookstore|14001': 1 },
          listeners: { 'outbound-listener': 1 },
          routes: { 'rds-outbound.80': 1 },
          secrets: { 'service-cert': 1 },
        }),
      );
      const order: string[] = [];
      for (let i = 0; i < 5; i++) order.push((await s.next()).type_url!);
      assert.deepEqual(order, [CDS, EDS, LDS, RDS, SDS]);
      assert.deepEqual(resourceNames(s.responses[1]), ['bookstore/bookstore|14001']);
      assert.deepEqual(resourceNames(s.responses[4]), ['service-cert']);
      const metrics = await h.registry.getMetricsAsJSON();
      const push = metrics.find((m) => m.name === 'trellis_xds_push_duration_seconds')!;
      assert.equal((push.values as Array<{ metricName?: string; value: number }>).find((v) => v.metricName === 'trellis_xds_push_duration_seconds_count')?.value, 1);
      const bytes = metrics.find((m) => m.name === 'trellis_xds_response_bytes_total')!;
      assert.deepEqual(bytes.values.map((v) => v.labels.type).sort(), ['CDS', 'EDS', 'LDS', 'RDS', 'SDS']);
      assert.ok(bytes.values.every((v) => v.value > 0), 'every type was sent');
    });

    it('answers a wildcard CDS request with an empty set when the snapshot has no clusters', async () => {
      const s = h.open();
      s.request(CDS);
      await eventually(() => h.server.streams().length === 1, 'stream open');
      h.cache.setSnapshot(PROXY.uuid, snapshot({}));
      const r = await s.next();
      assert.equal(r.type_url, CDS);
      assert.deepEqual(r.resources ?? [], []);
    });
  });
});
