import { afterEach, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as grpc from '@grpc/grpc-js';
import { encodeAny } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { parseCommonName } from '../src/proxy/types.js';
import { SnapshotCache, ResourceInterner, buildProxySnapshot } from '../src/xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../src/xds/cache/types.js';
import { AdsServer, authenticateFromNodeId } from '../src/xds/server/ads-server.js';
import { AdsTestClient, TEST_NODE_ID, resourceNames, type AdsTestStream } from './helpers/ads-client.js';

const PROXY = parseCommonName(TEST_NODE_ID);
const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS } = TypeUrl;

/** Listeners and clusters by name (a number changes the bytes), and one EDS resource per cluster. */
function snapshot(listeners: Record<string, number>, clusters: Record<string, number> = {}): ProxySnapshot {
  return buildProxySnapshot(
    new Map([
      [LDS, Object.entries(listeners).map(([name, n]) => ({ name, resource: encodeAny(LDS, { name, address: { socket_address: { address: '0.0.0.0', port_value: 15000 + n } } }) }))],
      [CDS, Object.entries(clusters).map(([name, n]) => ({ name, resource: encodeAny(CDS, { name, connect_timeout: { seconds: n } }) }))],
      [EDS, Object.keys(clusters).map((cluster_name) => ({ name: cluster_name, resource: encodeAny(EDS, { cluster_name }) }))],
    ]), new ResourceInterner(),
  );
}

let cache: SnapshotCache;
let server: AdsServer;
let client: AdsTestClient;
const nodes: unknown[] = [];

beforeEach(async () => {
  cache = new SnapshotCache();
  nodes.length = 0;
  server = new AdsServer({
    watcher: cache,
    hooks: {
      onStreamOpen: (proxy, _streamId, node) => {
        nodes.push(node);
        cache.setSnapshot(proxy.uuid, snapshot({ 'a.ns:80': 1 }, { 'ns/a|80': 1 }));
      },
    },
  });
  const port = await server.start({ address: '127.0.0.1:0', credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId });
  client = new AdsTestClient(`127.0.0.1:${port}`);
});

afterEach(async () => {
  client.close();
  await server.stop(1000);
});

/** The next response as [type URL, ...resource names]. */
async function nextAfter(s: AdsTestStream): Promise<string[]> {
  const r = await s.next();
  return [r.type_url!, ...resourceNames(r)];
}

describe('ADS server, LDS/CDS requested by name (as gRPC clients do)', () => {
  it('passes the first request node to onStreamOpen', async () => {
    const s = client.openStream();
    s.send({ type_url: LDS, resource_names: ['a.ns:80'], node: { id: TEST_NODE_ID, user_agent_name: 'gRPC Node Pure JS' } });
    await s.next();
    assert.equal((nodes[0] as { user_agent_name?: string }).user_agent_name, 'gRPC Node Pure JS');
    assert.equal((nodes[0] as { id?: string }).id, TEST_NODE_ID);
  });

  it('answers a first named request when none of the names exist, with an empty complete set', async () => {
    const s = client.openStream();
    s.request(LDS, ['missing.ns:80']);
    const r = await s.next();
    assert.equal(r.type_url, LDS);
    assert.deepEqual(r.resources ?? [], []);
    s.request(CDS, ['ns/missing|80']);
    const c = await s.next();
    assert.equal(c.type_url, CDS);
    assert.deepEqual(c.resources ?? [], []);
  });

  it('answers a name added in an ACK even when it does not exist, so the client learns it is missing', async () => {
    const s = client.openStream();
    s.request(LDS, ['a.ns:80']);
    const first = await s.next();
    assert.deepEqual(resourceNames(first), ['a.ns:80']);
    s.ack(first, ['a.ns:80', 'missing.ns:80']);
    const second = await s.next();
    assert.equal(second.type_url, LDS);
    assert.deepEqual(resourceNames(second), ['a.ns:80'], 'the complete set of the requested names that exist');
    assert.notEqual(second.nonce, first.nonce);

    // Same for CDS; and EDS follows CDS as always.
    s.request(CDS, ['ns/a|80']);
    const cds1 = await s.next();
    s.ack(cds1, ['ns/a|80', 'ns/missing|80']);
    assert.deepEqual(await nextAfter(s), [CDS, 'ns/a|80']);
  });

  it('does not answer an ACK whose names did not change (no resend loop)', async () => {
    const s = client.openStream();
    s.request(LDS, ['a.ns:80', 'missing.ns:80']);
    const first = await s.next();
    s.ack(first);
    // Barrier: a change of the subscribed listener is the next response, nothing before it.
    cache.setSnapshot(PROXY.uuid, snapshot({ 'a.ns:80': 2 }, { 'ns/a|80': 1 }));
    const next = await s.next();
    assert.equal(next.type_url, LDS);
    assert.notEqual(next.version_info, first.version_info);
  });

  it('sends a named listener once it appears, and its removal as the complete set', async () => {
    const s = client.openStream();
    s.request(LDS, ['a.ns:80', 'b.ns:80']);
    const first = await s.next();
    s.ack(first);
    cache.setSnapshot(PROXY.uuid, snapshot({ 'a.ns:80': 1, 'b.ns:80': 1 }, { 'ns/a|80': 1 }));
    const added = await s.next();
    assert.deepEqual(resourceNames(added).sort(), ['a.ns:80', 'b.ns:80']);
    s.ack(added);
    cache.setSnapshot(PROXY.uuid, snapshot({ 'b.ns:80': 1 }, { 'ns/a|80': 1 }));
    const removed = await s.next();
    assert.deepEqual(resourceNames(removed), ['b.ns:80']);
  });
});
