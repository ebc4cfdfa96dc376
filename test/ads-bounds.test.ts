import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { pino } from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import {
  MAX_DEBUG_NAMES_PER_TYPE,
  MAX_NACK_MESSAGE_CHARS,
  MAX_RECEIVE_MESSAGE_LENGTH,
  MAX_RESOURCE_NAME_CHARS,
  MAX_RESOURCE_NAMES_PER_TYPE,
  MAX_SUBSCRIBED_NAME_CHARS,
} from '../src/xds/server/ads-server.js';
import { STREAM_LOG_LIMIT, SUBSCRIBED_NAME_OVERHEAD } from '../src/xds/server/stream-common.js';
import { TEST_NODE_ID, type AdsTestClient } from './helpers/ads-client.js';
import { startAdsHarness, type AdsHarness, type Spec } from './helpers/ads-harness.js';
import { openDeltaTestStream } from './helpers/delta-client.js';
import type { RecordedStream } from './helpers/recorded-stream.js';
import { eventually } from './helpers/wait.js';

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS } = TypeUrl;

const SPEC: Spec = { clusters: { c1: 1, c2: 1 }, endpoints: { c1: 1, c2: 1 }, listeners: { 'outbound-listener': 1 } };
/** A proxy of the same identity as TEST_NODE_ID, with a new UUID. */
const sameIdentity = (): string => `${randomUUID()}.sidecar.bookbuyer.bookbuyer.cluster.local`;
/** `count` distinct names of `chars` characters each, tagged `tag`. */
const names = (tag: string, count: number, chars = 20): string[] => Array.from({ length: count }, (_, i) => `${tag}-${i}-`.padEnd(chars, 'n'));

type Mode = 'sotw' | 'delta';
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- either test stream, used through what both have
type AnyStream = RecordedStream<any, any> & { nack(r: unknown, message: string): void };
let h: AdsHarness<AnyStream, [nodeId?: string]>;
let logLines: Record<string, unknown>[];

/**
 * Starts a server whose proxies get SPEC, with its log (info and above) in `logLines`; a log line
 * whose message is `throwOn` makes the logger throw instead (a failing log destination).
 */
async function setup(mode: Mode, throwOn?: string, maxSubscribedNamesCost?: number): Promise<void> {
  logLines = [];
  const logger = pino(
    { level: 'info' },
    {
      write: (line: string) => {
        const parsed = JSON.parse(line) as Record<string, unknown>;
        if (parsed.msg === throwOn) throw new Error('log destination failed');
        logLines.push({ ...parsed, bytes: line.length });
      },
    },
  );
  const opener = (client: AdsTestClient, nodeId?: string): AnyStream =>
    (mode === 'delta' ? openDeltaTestStream(client, nodeId ?? TEST_NODE_ID) : client.openStream(nodeId)) as unknown as AnyStream;
  h = await startAdsHarness(opener, { spec: SPEC }, { logger, unreadTimeoutMs: 60_000, ...(maxSubscribedNamesCost === undefined ? {} : { maxSubscribedNamesCost }) });
}

afterEach(async () => {
  h.client.close();
  await h.server.stop(1000);
});

/** Sends a request of `type` subscribing to `subscribe` (SotW: its `resource_names`), and more fields. */
function request(s: AnyStream, mode: Mode, type: string, subscribe: string[], more: Record<string, unknown> = {}): void {
  s.send(mode === 'delta' ? { type_url: type, resource_names_subscribe: subscribe, ...more } : { type_url: type, resource_names: subscribe, ...more });
}

/** Another proxy is still served, start to end. */
async function otherProxyIsServed(mode: Mode): Promise<void> {
  const other = h.open(sameIdentity());
  request(other, mode, CDS, []);
  await other.next();
  other.cancel();
}

describe('ADS server bounds on what a stream subscribes to', () => {
  for (const mode of ['sotw', 'delta'] as const) {
    it(`${mode}: ends a stream that asks for a name longer than MAX_RESOURCE_NAME_CHARS with INVALID_ARGUMENT`, async () => {
      await setup(mode);
      const s = h.open();
      request(s, mode, EDS, ['c1', 'x'.repeat(MAX_RESOURCE_NAME_CHARS + 1)]);
      const status = await s.ended();
      assert.equal(status.code, grpc.status.INVALID_ARGUMENT);
      assert.match(status.details, /resource name of EDS is 1025 characters long, more than 1024/);
      await otherProxyIsServed(mode);
    });

    it(`${mode}: ends a stream whose names add up to more than MAX_SUBSCRIBED_NAME_CHARS across types with RESOURCE_EXHAUSTED`, async () => {
      await setup(mode);
      const s = h.open();
      const perType = Math.ceil(MAX_SUBSCRIBED_NAME_CHARS / 2 / 1000); // each type alone is within the bound, both are not
      request(s, mode, EDS, ['c1', ...names('eds', perType, 1000)]);
      await s.next();
      request(s, mode, LDS, names('lds', perType, 1000));
      const status = await s.ended(20_000);
      assert.equal(status.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(status.details, /more than 4194304 characters of resource names subscribed/);
      await otherProxyIsServed(mode);
    });

    it(`${mode}: ends a stream that would take the server past its budget of subscribed names (all streams together), and frees a closed stream's share`, async () => {
      const cost = (list: string[]) => list.reduce((n, name) => n + name.length + SUBSCRIBED_NAME_OVERHEAD, 0);
      const share = ['c1', ...names('a', 100, 50)];
      await setup(mode, undefined, Math.floor(cost(share) * 1.5)); // one stream's names fit, two do not
      const first = h.open(sameIdentity());
      request(first, mode, EDS, share);
      await first.next();
      const second = h.open(sameIdentity());
      request(second, mode, EDS, ['c1', ...names('b', 100, 50)]);
      const status = await second.ended(20_000);
      assert.equal(status.code, grpc.status.RESOURCE_EXHAUSTED);
      assert.match(status.details, /as many subscribed resource names as it may \(all streams together\)/);
      first.cancel();
      await first.ended().catch(() => undefined);
      await eventually(async () => {
        const third = h.open(sameIdentity());
        request(third, mode, EDS, ['c1', ...names('c', 100, 50)]);
        const served = await Promise.race([third.next().then(() => true), third.ended().then(() => false)]);
        third.cancel();
        return served;
      }, 'a stream is served once the first one closed');
    });

    it(`${mode}: the debug view lists at most MAX_DEBUG_NAMES_PER_TYPE names per type, with their count`, async () => {
      await setup(mode);
      const s = h.open();
      request(s, mode, EDS, ['c1', ...names('junk', 150)]);
      await s.next();
      const eds = h.typeInfo(EDS)!;
      assert.equal(eds.resourceNames.length, MAX_DEBUG_NAMES_PER_TYPE);
      assert.deepEqual(eds.resourceNames, ['c1', ...names('junk', 150)].sort().slice(0, MAX_DEBUG_NAMES_PER_TYPE), 'the first names, sorted');
      assert.equal(eds.resourceNameCount, 151);
    });

    it(`${mode}: a throw while a request is handled ends that stream with INTERNAL, not the process`, async () => {
      await setup(mode, 'NACK');
      const s = h.open();
      request(s, mode, CDS, []);
      const cds = await s.next();
      s.nack(cds, 'rejected');
      const status = await s.ended();
      assert.equal(status.code, grpc.status.INTERNAL);
      assert.match(status.details, /log destination failed/);
      assert.ok(logLines.some((l) => l.level === 50 && String(l.msg).endsWith('ADS request handling failed')), 'logged as an error');
      await otherProxyIsServed(mode);
    });
  }

  it('refuses a request message over MAX_RECEIVE_MESSAGE_LENGTH with RESOURCE_EXHAUSTED', async () => {
    await setup('sotw');
    const s = h.open();
    request(s, 'sotw', EDS, names('big', Math.ceil(MAX_RECEIVE_MESSAGE_LENGTH / 1000) + 1, 1000));
    const status = await s.ended(20_000);
    assert.equal(status.code, grpc.status.RESOURCE_EXHAUSTED);
    await otherProxyIsServed('sotw');
  });

  it('delta: ends a stream whose request unsubscribes more than MAX_RESOURCE_NAMES_PER_TYPE names with RESOURCE_EXHAUSTED', async () => {
    await setup('delta');
    const s = h.open();
    request(s, 'delta', CDS, []);
    await s.next();
    s.send({ type_url: CDS, resource_names_unsubscribe: names('never-subscribed', MAX_RESOURCE_NAMES_PER_TYPE + 1, 8) });
    const status = await s.ended(20_000);
    assert.equal(status.code, grpc.status.RESOURCE_EXHAUSTED);
    assert.match(status.details, /more than 100000 resource names of CDS/);
    await otherProxyIsServed('delta');
  });
});

describe('ADS server log limits across streams of one identity', () => {
  it('logs one NACK line per identity and type, whatever the streams and UUIDs; control characters are replaced before the cut', async () => {
    await setup('sotw');
    const message = '\x01\u202e'.repeat(10_000);
    for (let i = 0; i < 3; i++) {
      const s = h.open(sameIdentity());
      request(s, 'sotw', CDS, []);
      s.nack(await s.next(), message);
      await eventually(() => h.nacks.length === i + 1, `NACK ${i + 1} recorded`);
      s.cancel();
    }
    const cut = `${'?'.repeat(MAX_NACK_MESSAGE_CHARS)}… [${message.length - MAX_NACK_MESSAGE_CHARS} more characters cut]`;
    assert.equal(h.nacks[0].detail.message, cut, 'onNack gets the safe, cut message');
    const nackLines = logLines.filter((l) => l.msg === 'NACK');
    assert.equal(nackLines.length, 1, 'one line for the identity and type');
    assert.equal(nackLines[0].error, cut);
    assert.ok(Number(nackLines[0].bytes) < MAX_NACK_MESSAGE_CHARS + 1024, `the line is ${String(nackLines[0].bytes)} bytes`);
  });

  it('logs the lifecycle lines of a reconnecting identity at info level at most STREAM_LOG_LIMIT times', async () => {
    await setup('sotw');
    const rounds = STREAM_LOG_LIMIT + 5;
    for (let i = 0; i < rounds; i++) {
      const s = h.open(sameIdentity());
      request(s, 'sotw', CDS, []);
      await s.next();
      s.cancel();
      await eventually(() => h.events.filter((e) => e.startsWith('close ')).length === i + 1, `stream ${i + 1} closed`);
    }
    for (const msg of ['ADS stream opened', 'ADS stream closed']) {
      const lines = logLines.filter((l) => l.msg === msg).length;
      assert.equal(lines, STREAM_LOG_LIMIT, `${msg}: ${lines} lines at info level`);
    }
  });
});
