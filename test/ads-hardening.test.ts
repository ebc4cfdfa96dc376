import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { parseCommonName } from '../src/proxy/types.js';
import { MAX_NACK_MESSAGE_CHARS, MAX_RESOURCE_NAMES_PER_TYPE } from '../src/xds/server/ads-server.js';
import { CLIENT_WARNING_LIMIT } from '../src/xds/server/stream-common.js';
import { TEST_NODE_ID, resourceNames, type AdsTestStream } from './helpers/ads-client.js';
import { snapshot, startAdsHarness, type AdsHarness, type Spec } from './helpers/ads-harness.js';
import { RawAdsStream, type RawAdsMethod } from './helpers/raw-ads-stream.js';
import { eventually } from './helpers/wait.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, Secret: SDS } = TypeUrl;

const SPEC: Spec = {
  clusters: { c1: 1, c2: 1, c3: 1 },
  endpoints: { c1: 1, c2: 1, c3: 1 },
  listeners: { 'outbound-listener': 1 },
  secrets: { 'service-cert': 1 },
};
/** Another proxy on the same server, which must not notice the slow reader. */
const OTHER = '6ba7b810-9dad-11d1-80b4-00c04fd43099.sidecar.bookstore.bookstore.cluster.local';

/** `count` resource names no snapshot has, distinct for each `round`. */
const junk = (round: number, count = 2000): string[] => Array.from({ length: count }, (_, j) => `junk-${round}-${j}.bookstore.svc.cluster.local`);

let h: AdsHarness<AdsTestStream, [nodeId?: string]>;
let raw: RawAdsStream | undefined;
let logLines: Record<string, unknown>[];

async function setup(options: { unreadTimeoutMs: number; firstRequestTimeoutMs?: number }): Promise<void> {
  logLines = [];
  const logger = pino({ level: 'info' }, { write: (line: string) => logLines.push(JSON.parse(line) as Record<string, unknown>) });
  h = await startAdsHarness((client, nodeId?: string) => client.openStream(nodeId), { spec: SPEC }, { ...options, logger });
  h.cache.setSnapshot(parseCommonName(OTHER).uuid, snapshot(SPEC));
}

afterEach(async () => {
  raw?.destroy();
  raw = undefined;
  h.client.close();
  await h.server.stop(1000);
});

/** The value of a metric sample of the harness's registry (0 when absent). */
async function metric(name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = (await h.registry.getMetricsAsJSON()).find((x) => x.name === name);
  const matching = m?.values.filter((v) => Object.entries(labels).every(([k, want]) => v.labels[k] === want)) ?? [];
  return matching.reduce((n, v) => n + v.value, 0);
}

const responsesWritten = (): Promise<number> => metric('trellis_xds_responses_total');

/** Waits until the server has received `count` requests in all (the client's writes take a while to arrive). */
const received = (count: number): Promise<void> =>
  eventually(async () => (await metric('trellis_xds_requests_total')) >= count, `${count} requests received`, 30_000);

/** Opens a raw stream whose client gives the server `window` bytes of HTTP/2 window per stream (0: none). */
function openRaw(method: RawAdsMethod, window: number): RawAdsStream {
  raw = new RawAdsStream(`http://127.0.0.1:${h.port}`, method, { initialWindowSize: window });
  return raw;
}

/** Stops the client reading: every stream's window drops to zero or less (RFC 9113 §6.9.2), so the next response stays unflushed. */
function block(s: RawAdsStream): Promise<void> {
  return new Promise((resolve) => s.session.settings({ initialWindowSize: 0 }, () => resolve()));
}

/**
 * Opens a raw `method` stream, sends `first` (with the node) and reads its response, then stops
 * reading and sends `second`, whose response is written and stays unflushed: every later
 * response of the stream waits behind it. @returns the stream and the first response.
 */
async function stuckStream(method: RawAdsMethod, first: object, second: object): Promise<{ s: RawAdsStream; firstResponse: Record<string, unknown> }> {
  const s = openRaw(method, 1 << 20);
  s.send({ node: { id: TEST_NODE_ID }, ...first });
  await s.until(() => s.responses.length === 1, 'the first response');
  await block(s);
  s.send(second);
  await eventually(async () => (await responsesWritten()) === 2, 'the second response written (and not flushed)');
  return { s, firstResponse: s.responses[0] };
}

/**
 * Once the server has received `requests` requests in all, lets `s` read again until its SDS
 * response (requested last) arrives. @returns its CDS responses: the first one, the one of the
 * request whose job had started when the stream stopped, and those of the requests queued since.
 */
async function unblockAndReadCds(s: RawAdsStream, requests: number): Promise<Record<string, unknown>[]> {
  await received(requests);
  await otherProxyIsServed();
  s.resume(1 << 24);
  await s.until(() => s.responses.some((r) => r.type_url === SDS), 'the SDS response');
  return s.responses.filter((r) => r.type_url === CDS);
}

/** The other proxy still gets its configuration, start to end, while the slow reader is stuck. */
async function otherProxyIsServed(): Promise<void> {
  const other = h.open(OTHER);
  other.request(CDS);
  const cds = await other.waitFor((r) => r.type_url === CDS);
  assert.deepEqual(resourceNames(cds).sort(), ['c1', 'c2', 'c3']);
  other.cancel();
}

describe('ADS server and a proxy that stops reading', () => {
  for (const method of ['StreamAggregatedResources', 'DeltaAggregatedResources'] as const) {
    const delta = method === 'DeltaAggregatedResources';
    it(`closes a ${delta ? 'delta' : 'SotW'} stream left unread past the unread timeout, resets it, logs and counts it`, async () => {
      await setup({ unreadTimeoutMs: 300 });
      const s = openRaw(method, 0);
      s.send(delta ? { node: { id: TEST_NODE_ID }, type_url: CDS } : { node: { id: TEST_NODE_ID }, type_url: CDS, resource_names: [] });
      for (let round = 0; round < 20; round++) s.send(delta ? { type_url: EDS, resource_names_subscribe: junk(round) } : { type_url: EDS, resource_names: junk(round) });
      await otherProxyIsServed();
      await s.until(() => s.rstCode !== undefined, 'the stream reset by the server');
      assert.equal(s.rstCode, http2.constants.NGHTTP2_CANCEL);
      assert.deepEqual(s.responses, [], 'nothing could be read');
      await eventually(() => h.events.some((e) => e.startsWith(`close ${parseCommonName(TEST_NODE_ID).uuid} `)), 'onStreamClose of the slow reader');
      assert.equal(await metric('trellis_xds_streams_closed_total', { reason: 'unread' }), 1);
      const closing = logLines.filter((l) => String(l.msg).startsWith(`closing ${delta ? 'delta ' : ''}ADS stream: the proxy has not read`));
      assert.equal(closing.length, 1, JSON.stringify(closing));
      assert.equal(closing[0].level, 40);
      assert.equal(closing[0].proxy, parseCommonName(TEST_NODE_ID).uuid);
      assert.deepEqual(h.server.streams().filter((x) => x.proxy.commonName === TEST_NODE_ID), [], 'the slow reader is not listed any more');
      await otherProxyIsServed();
    });
  }

  it('SotW: requests queued behind an unread response collapse to the latest per type; the NACK among them is recorded as it arrives', async () => {
    await setup({ unreadTimeoutMs: 60_000 });
    const { s, firstResponse: first } = await stuckStream('StreamAggregatedResources', { type_url: CDS, resource_names: [] }, { type_url: LDS, resource_names: [] });
    s.send({ type_url: CDS, response_nonce: first.nonce, resource_names: [], error_detail: { code: 3, message: 'cluster rejected' } });
    // Recorded while every response of the stream still waits behind the unread one.
    await eventually(() => h.nacks.length === 1, 'the NACK recorded');
    assert.equal(h.nacks[0].version, first.version_info);
    assert.equal(h.nacks[0].detail.message, 'cluster rejected');
    // 100 requests that must each be answered in full (first requests of a complete-set type),
    // one after the other: only the latest still counts.
    for (let round = 0; round < 100; round++) s.send({ type_url: CDS, resource_names: junk(round) });
    s.send({ type_url: CDS, resource_names: ['c1', 'c3'] });
    s.send({ type_url: SDS, resource_names: ['service-cert'] }); // answered after every CDS request
    const cds = await unblockAndReadCds(s, 105);
    assert.ok(cds.length <= 3, `CDS responses: ${cds.length}`);
    const names = ((cds.at(-1)!.resources as { name: string }[] | undefined) ?? []).map((r) => r.name).sort();
    assert.deepEqual(names, ['c1', 'c3'], 'the latest subscription is the one answered');
    assert.equal(h.nacks.length, 1);
  });

  it('delta: subscription changes queued behind an unread response are merged in order, and ACK/NACKs recorded as they arrive', async () => {
    await setup({ unreadTimeoutMs: 60_000 });
    const { s, firstResponse: first } = await stuckStream('DeltaAggregatedResources', { type_url: CDS, resource_names_subscribe: ['c1'] }, { type_url: EDS, resource_names_subscribe: ['c1'] });
    s.send({ type_url: CDS, response_nonce: first.nonce, error_detail: { code: 3, message: 'cluster rejected' }, resource_names_subscribe: ['c2'] });
    // Recorded while every response of the stream still waits behind the unread one.
    await eventually(() => h.nacks.length === 1, 'the NACK recorded');
    assert.equal(h.nacks[0].version, first.system_version_info);
    s.send({ type_url: CDS, resource_names_subscribe: ['c3'] });
    s.send({ type_url: CDS, resource_names_unsubscribe: ['c2'] });
    for (let round = 0; round < 40; round++) s.send({ type_url: CDS, resource_names_subscribe: junk(round) });
    s.send({ type_url: CDS, resource_names_unsubscribe: Array.from({ length: 40 }, (_, round) => junk(round)).flat() });
    s.send({ type_url: SDS, resource_names_subscribe: ['barrier'] }); // answered after every CDS request
    const cds = await unblockAndReadCds(s, 47);
    assert.ok(cds.length <= 3, `CDS responses: ${cds.length}`);
    const held = new Set<string>();
    for (const r of cds) {
      for (const res of (r.resources as { name: string }[] | undefined) ?? []) held.add(res.name);
      for (const name of (r.removed_resources as string[] | undefined) ?? []) held.delete(name);
    }
    held.delete('c2'); // the client drops what it unsubscribes from (sent before, or not at all)
    assert.deepEqual([...held].sort(), ['c1', 'c3'], 'what sequential requests would have left');
    const view = h.server.streams().find((x) => x.proxy.commonName === TEST_NODE_ID);
    assert.deepEqual(view?.types.find((t) => t.typeUrl === CDS)?.resourceNames, ['c1', 'c3']);
  });
});

describe('ADS server and a stream that never completes its first request', () => {
  for (const method of ['StreamAggregatedResources', 'DeltaAggregatedResources'] as const) {
    it(`ends a ${method === 'DeltaAggregatedResources' ? 'delta' : 'SotW'} stream holding a part of a message past the first-request timeout (DEADLINE_EXCEEDED), counts and logs it`, async () => {
      await setup({ unreadTimeoutMs: 30_000, firstRequestTimeoutMs: 400 });
      const s = openRaw(method, 1 << 20);
      // A prefix announcing 8 MiB, then 256 KiB of it: gRPC holds the part until the rest comes.
      const prefix = Buffer.alloc(5);
      prefix.writeUInt32BE(8 << 20, 1);
      s.sendRaw(Buffer.concat([prefix, Buffer.alloc(256 << 10, 0x0a)]));
      await s.until(() => s.grpcStatus !== undefined || s.rstCode !== undefined, 'the stream ended by the server', 10_000);
      assert.equal(s.grpcStatus, grpc.status.DEADLINE_EXCEEDED);
      assert.equal(await metric('trellis_xds_connections_refused_total', { reason: 'first_request_timeout' }), 1);
      const refused = logLines.filter((l) => String(l.msg).startsWith('ADS connection refused: no complete request within 0.4 s'));
      assert.equal(refused.length, 1, JSON.stringify(logLines.map((l) => l.msg)));
      await otherProxyIsServed();
    });
  }

  it('leaves a stream alone once its first request is complete', async () => {
    await setup({ unreadTimeoutMs: 30_000, firstRequestTimeoutMs: 300 });
    const s = openRaw('StreamAggregatedResources', 1 << 20);
    s.send({ node: { id: TEST_NODE_ID }, type_url: CDS, resource_names: [] });
    await s.until(() => s.responses.length === 1, 'the CDS response');
    await new Promise((r) => setTimeout(r, 600));
    assert.equal(s.grpcStatus, undefined);
    assert.equal(s.rstCode, undefined);
    assert.equal(await metric('trellis_xds_connections_refused_total', { reason: 'first_request_timeout' }), 0);
  });
});

describe('ADS server and a proxy asking for too many names', () => {
  it('ends a stream that subscribes to more than MAX_RESOURCE_NAMES_PER_TYPE names of a type', async () => {
    await setup({ unreadTimeoutMs: 60_000 });
    const s = h.open();
    s.request(EDS, junk(0, MAX_RESOURCE_NAMES_PER_TYPE + 1));
    const status = await s.ended();
    assert.equal(status.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.match(status.details, /more than 100000 resource names of EDS/);
    assert.equal(await metric('trellis_xds_streams_closed_total', { reason: 'server' }), 1);
    await otherProxyIsServed();
  });
});

describe('ADS server and a client reconnecting with requests it warns about', () => {
  it('logs each kind of warning about one client at most CLIENT_WARNING_LIMIT times a minute, however many streams it opens', async () => {
    await setup({ unreadTimeoutMs: 30_000 });
    for (let i = 0; i < 3 * CLIENT_WARNING_LIMIT; i++) {
      const s = openRaw('StreamAggregatedResources', 1 << 20);
      s.send({ node: { id: TEST_NODE_ID }, type_url: `type.googleapis.com/no.such.Type${i}`, resource_names: [] });
      s.send({ type_url: CDS, resource_names: ['x'.repeat(2000)] }); // a name too long: the stream ends
      await s.until(() => s.grpcStatus !== undefined || s.rstCode !== undefined, 'the stream ended');
      s.destroy();
    }
    raw = undefined;
    const warned = (text: string) => logLines.filter((l) => l.level === 40 && String(l.msg).includes(text));
    assert.equal(warned('requests for an unknown type URL ignored').length, CLIENT_WARNING_LIMIT);
    assert.equal(warned('asks for a resource name too long').length, CLIENT_WARNING_LIMIT);
    await otherProxyIsServed();
  });
});

describe('ADS server and NACKs with huge messages', () => {
  it('logs a NACK once, cut, rate-limited per type with a count of the rest; keeps only the cut message', async () => {
    await setup({ unreadTimeoutMs: 60_000 });
    const s = h.open();
    s.request(CDS);
    const huge = 'x'.repeat(1024 * 1024);
    for (let i = 1; i <= 5; i++) {
      const r = await s.waitFor((x) => x.type_url === CDS && s.responses.filter((y) => y.type_url === CDS).indexOf(x) === i - 1);
      s.nack(r, huge);
      await eventually(() => h.nacks.length === i, `NACK ${i} recorded`);
      if (i < 5) h.set({ ...SPEC, clusters: { ...SPEC.clusters, [`extra${i}`]: 1 } });
    }
    const cut = `${'x'.repeat(MAX_NACK_MESSAGE_CHARS)}… [${huge.length - MAX_NACK_MESSAGE_CHARS} more characters cut]`;
    assert.ok(h.nacks.every((n) => n.detail.message === cut), 'onNack gets the cut message');
    assert.equal(h.typeInfo(CDS)?.lastNack?.message, cut, 'the debug view keeps the cut message');
    assert.equal(await metric('trellis_xds_nacks_total', { type: 'CDS' }), 5, 'every NACK counted');
    const nackLines = logLines.filter((l) => l.msg === 'NACK');
    assert.equal(nackLines.length, 1, 'one line per type per interval');
    assert.equal(nackLines[0].error, cut);
    s.end();
    await eventually(() => logLines.some((l) => String(l.msg) === 'ADS stream closed'), 'the close line');
    assert.equal(logLines.find((l) => l.msg === 'ADS stream closed')?.nacksNotLogged, 4);
    const logged = logLines.reduce((n, l) => n + JSON.stringify(l).length, 0);
    assert.ok(logged < 64 * 1024, `bytes logged: ${logged}`);
  });
});
