import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TypeUrl } from '../src/api/type-urls.js';
import { parseCommonName } from '../src/proxy/types.js';
import { resourceNames, type AdsTestStream } from './helpers/ads-client.js';
import { snapshot, startAdsHarness, type AdsHarness } from './helpers/ads-harness.js';
import { RawAdsStream } from './helpers/raw-ads-stream.js';
import { eventually } from './helpers/wait.js';

const { Cluster: CDS, Listener: LDS, Secret: SDS } = TypeUrl;

/** About 85 KB of clusters for proxy `i` (a few times the 64 KiB window of a client that does not read). */
const bigClusters = (i: number): Record<string, number> => Object.fromEntries(Array.from({ length: 6000 }, (_, k) => [`c${i}-${k}`, 1 + (k % 7)]));

/** The sum of a metric's samples in `h`'s registry (of the `reason` label `reason` when given). */
async function metricOf(h: AdsHarness<AdsTestStream, [nodeId?: string]>, name: string, reason?: string): Promise<number> {
  const m = (await h.registry.getMetricsAsJSON()).find((x) => x.name === name);
  return m?.values.filter((v) => reason === undefined || v.labels.reason === reason).reduce((n, v) => n + v.value, 0) ?? 0;
}

/** Opens a raw SotW stream for each of `nodeIds` that asks for CDS and never reads, into `raws`. */
function openStuck(port: number, nodeIds: readonly string[], raws: RawAdsStream[]): void {
  for (const id of nodeIds) {
    const raw = new RawAdsStream(`http://127.0.0.1:${port}`, 'StreamAggregatedResources');
    raw.pause();
    raw.send({ node: { id }, type_url: CDS });
    raws.push(raw);
  }
}

describe('ADS server with a send budget of one byte (every response waits for the previous one to flush)', () => {
  let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
  const nodeIds = Array.from({ length: 8 }, (_, i) => `6ba7b810-9dad-11d1-80b4-00c04fd4300${i}.sidecar.sa${i}.ns${i}.cluster.local`);

  before(async () => {
    h = await startAdsHarness((client, nodeId?: string) => client.openStream(nodeId), undefined, { maxBytesInFlight: 1 });
    for (const [i, id] of nodeIds.entries()) {
      h.cache.setSnapshot(parseCommonName(id).uuid, snapshot({ clusters: { [`c${i}`]: 1, shared: 2 }, listeners: { [`l${i}`]: 1 } }));
    }
  });
  after(async () => {
    h.client.close();
    await h.server.stop(1000);
  });

  it('still serves every stream its own complete configuration, and nothing stays in flight', async () => {
    const streams = nodeIds.map((id) => h.open(id));
    for (const s of streams) {
      s.request(CDS);
      s.request(LDS);
    }
    for (const [i, s] of streams.entries()) {
      const cds = await s.waitFor((r) => r.type_url === CDS);
      const lds = await s.waitFor((r) => r.type_url === LDS);
      assert.deepEqual(resourceNames(cds).sort(), [`c${i}`, 'shared']);
      assert.deepEqual(resourceNames(lds), [`l${i}`]);
    }
    const inFlight = async () => (await h.registry.getMetricsAsJSON()).find((m) => m.name === 'trellis_xds_send_bytes_in_flight')!.values[0].value;
    await eventually(async () => (await inFlight()) === 0, 'every grant given back');
  });
});

describe('ADS server with a proxy that stops reading', () => {
  let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
  let raw: RawAdsStream | undefined;
  const nodeId = '6ba7b810-9dad-11d1-80b4-00c04fd43011.sidecar.stuck.stuck.cluster.local';
  // Each response is several times the 64 KiB HTTP/2 window a client that never reads grants.
  const many = (prefix: string): Record<string, number> => Object.fromEntries(Array.from({ length: 12_000 }, (_, i) => [`${prefix}-${i}`, 1 + (i % 7)]));

  before(async () => {
    h = await startAdsHarness((client, id?: string) => client.openStream(id));
    h.cache.setSnapshot(parseCommonName(nodeId).uuid, snapshot({ clusters: many('c'), listeners: many('l'), secrets: many('s') }));
  });
  after(async () => {
    raw?.destroy();
    h.client.close();
    await h.server.stop(1000);
  });

  it('holds at most one response of the send budget at a time', async () => {
    raw = new RawAdsStream(`http://127.0.0.1:${h.port}`, 'StreamAggregatedResources');
    raw.pause(); // never read: the server's writes stop once the stream's window is used up
    const sds = Object.keys(many('s'));
    raw.send({ node: { id: nodeId }, type_url: CDS });
    raw.send({ node: { id: nodeId }, type_url: LDS });
    raw.send({ node: { id: nodeId }, type_url: SDS, resource_names: sds });
    const written = async (): Promise<number> =>
      (await h.registry.getMetricsAsJSON()).find((x) => x.name === 'trellis_xds_responses_total')?.values.reduce((n, v) => n + v.value, 0) ?? 0;
    await eventually(async () => (await written()) >= 1, 'a response written');
    await new Promise((r) => setTimeout(r, 300)); // time for more writes, if the server were to make them
    const inFlight = (await h.registry.getMetricsAsJSON()).find((x) => x.name === 'trellis_xds_send_bytes_in_flight')!.values[0].value;
    assert.equal(await written(), 1, 'responses written to a stream that does not read');
    assert.ok(inFlight > 64 * 1024 && inFlight < 400 * 1024, `bytes in flight: ${inFlight}`);
  });
});

describe('ADS server with many proxies that read nothing for longer than the send hold limit', () => {
  let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
  const raws: RawAdsStream[] = [];
  const MAX_IN_FLIGHT = 200_000;
  const nodeIds = Array.from({ length: 8 }, (_, i) => `6ba7b810-9dad-11d1-80b4-00c04fd4302${i}.sidecar.slow${i}.slow.cluster.local`);

  before(async () => {
    // Grants go past the hold limit after 50 ms; no unread timeout: the proxies are only slow.
    h = await startAdsHarness((client, id?: string) => client.openStream(id), undefined, { maxBytesInFlight: MAX_IN_FLIGHT, sendHoldLimitMs: 50, unreadTimeoutMs: 0 });
    for (const [i, id] of nodeIds.entries()) h.cache.setSnapshot(parseCommonName(id).uuid, snapshot({ clusters: bigClusters(i) }));
  });
  after(async () => {
    for (const raw of raws) raw.destroy();
    h.client.close();
    await h.server.stop(1000);
  });

  it('holds at most twice the budget of responses, however long they stay unread, and serves every proxy once they read', async () => {
    const metric = (name: string): Promise<number> => metricOf(h, name);
    openStuck(h.port, nodeIds, raws);
    await eventually(async () => (await metric('trellis_xds_send_bytes_overdue')) > 0, 'responses held past the hold limit');
    await new Promise((r) => setTimeout(r, 500)); // ten hold limits: time for more writes, if the server were to make them
    const written = await metric('trellis_xds_responses_total');
    const held = (await metric('trellis_xds_send_bytes_in_flight')) + (await metric('trellis_xds_send_bytes_overdue'));
    assert.ok(held <= 2 * MAX_IN_FLIGHT, `bytes held: ${held}`);
    assert.equal(held, await metric('trellis_xds_response_bytes_total'), 'every response written is still held');
    assert.ok(written >= 2 && written < nodeIds.length, `responses written while nobody reads: ${written}`);

    for (const raw of raws) raw.resume();
    for (const [i, raw] of raws.entries()) {
      await raw.until(() => raw.responses.length > 0, `proxy ${i}'s CDS`);
      assert.equal((raw.responses[0]!.resources as unknown[]).length, 6000);
    }
    await eventually(async () => (await metric('trellis_xds_send_bytes_in_flight')) + (await metric('trellis_xds_send_bytes_overdue')) === 0, 'every grant given back');
  });
});

describe('ADS server with proxies that stopped reading and one that reads, all past the send budget', () => {
  let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
  const raws: RawAdsStream[] = [];
  const MAX_IN_FLIGHT = 200_000;
  const stuck = Array.from({ length: 8 }, (_, i) => `6ba7b810-9dad-11d1-80b4-00c04fd4304${i}.sidecar.stuck${i}.slow.cluster.local`);
  const reader = '6ba7b810-9dad-11d1-80b4-00c04fd43050.sidecar.reader.fast.cluster.local';

  before(async () => {
    // Past the hold limit after 50 ms; the unread timeout (60 s) would close the stuck ones much later.
    h = await startAdsHarness((client, id?: string) => client.openStream(id), undefined, { maxBytesInFlight: MAX_IN_FLIGHT, sendHoldLimitMs: 50, unreadTimeoutMs: 60_000 });
    for (const [i, id] of [...stuck, reader].entries()) h.cache.setSnapshot(parseCommonName(id).uuid, snapshot({ clusters: bigClusters(i) }));
  });
  after(async () => {
    for (const raw of raws) raw.destroy();
    h.client.close();
    await h.server.stop(1000);
  });

  it('closes the oldest stuck streams held past the hold limit when what is held is full, so the reader gets its response long before the unread timeout', async () => {
    const metric = (name: string, reason?: string): Promise<number> => metricOf(h, name, reason);
    openStuck(h.port, stuck, raws);
    await eventually(async () => (await metric('trellis_xds_send_bytes_overdue')) > 0, 'responses held past the hold limit');
    const started = Date.now();
    const fast = h.open(reader);
    fast.request(CDS);
    const cds = await fast.waitFor((r) => r.type_url === CDS);
    assert.equal(resourceNames(cds).length, 6000);
    assert.ok(Date.now() - started < 10_000, `the reader waited ${Date.now() - started} ms`);
    assert.ok((await metric('trellis_xds_streams_closed_total', 'unread')) >= 1, 'stuck streams were closed for it');
    const held = (await metric('trellis_xds_send_bytes_in_flight')) + (await metric('trellis_xds_send_bytes_overdue'));
    assert.ok(held <= 2 * MAX_IN_FLIGHT, `bytes held: ${held}`);
    fast.cancel();
  });
});
