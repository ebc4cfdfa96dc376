import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { TypeUrl } from '../api/type-urls.js';
import { buildMeshSnapshot } from '../catalog/build-snapshot.js';
import type { ConnectedProxy } from '../proxy/registry.js';
import type { Proxy } from '../proxy/types.js';
import type { CachedResource, ProxySnapshot } from '../xds/cache/types.js';
import type { StreamInfo, TypeStreamInfo } from '../xds/server/stream-common.js';
import { meshView } from './mesh-view.js';
import { typeSync } from './proxy-sync.js';

const proxy = { uuid: 'u1', kind: 'sidecar', identity: 'bookbuyer/bookbuyer', commonName: 'u1.sidecar.bookbuyer.bookbuyer.cluster.local' } as unknown as Proxy;
const resource = (name: string): CachedResource => ({ name, version: name, resource: { type_url: TypeUrl.Cluster, value: Buffer.from(name) } });
/** The proxy's latest snapshot: CDS at v2 (a push under way: the stream ACKed v1, v2 not sent yet). */
const LATEST: ProxySnapshot = { resources: new Map([[TypeUrl.Cluster, new Map([['a', resource('a')]])]]), versions: new Map([[TypeUrl.Cluster, 'v2']]) };
const cds: TypeStreamInfo = { typeUrl: TypeUrl.Cluster, type: 'CDS', wildcard: true, resourceNames: [], resourceNameCount: 0, lastVersionSent: 'v1', versionAcked: 'v1' };
const stream: StreamInfo = { streamId: 1, proxy, connectedAt: new Date(0), listener: '127.0.0.1:15128', mode: 'delta', types: [cds] };

describe('meshView', () => {
  it("gives each type the state /debug/proxies gives it (typeSync against the proxy's latest snapshot): stale while a push is under way", () => {
    const view = meshView({
      snapshot: buildMeshSnapshot(memoryStore([]), { meshName: 'osm', generation: 1 }).snapshot,
      meshIdentities: new Set(),
      connected: [{ proxy, connectedSince: new Date(0), streamIds: new Set([1]) } as unknown as ConnectedProxy],
      streams: [stream],
      snapshotOf: (uuid) => (uuid === 'u1' ? LATEST : undefined),
      policies: {},
      manifestErrors: [],
      manifestWarnings: 0,
      policyProblems: [],
      validationFailures: [],
    });
    assert.equal(typeSync(cds, 'delta', LATEST).state, 'stale');
    assert.deepEqual(view.proxies.map((p) => p.types), [{ CDS: 'stale' }]);
  });
});
