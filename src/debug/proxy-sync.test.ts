import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import type { CachedResource, ProxySnapshot } from '../xds/cache/types.js';
import type { TypeStreamInfo } from '../xds/server/stream-common.js';
import { typeSync } from './proxy-sync.js';

const resource = (name: string): CachedResource => ({ name, version: name, resource: { type_url: TypeUrl.ClusterLoadAssignment, value: Buffer.from(name) } });
const SNAPSHOT: ProxySnapshot = {
  resources: new Map([[TypeUrl.ClusterLoadAssignment, new Map(['a', 'b'].map((n) => [n, resource(n)]))]]),
  versions: new Map([[TypeUrl.ClusterLoadAssignment, 'v2']]),
};
const eds = (info: Partial<TypeStreamInfo>): TypeStreamInfo => ({ typeUrl: TypeUrl.ClusterLoadAssignment, type: 'EDS', wildcard: false, resourceNames: ['a', 'b'], resourceNameCount: 2, ...info });
const nack = (version: string) => ({ version, code: 3, message: 'rejected', at: new Date() });

describe('typeSync', () => {
  it('is synced when the ACKed version is the latest snapshot version (delta, or SotW subscribed to every name)', () => {
    for (const mode of ['sotw', 'delta'] as const) assert.deepEqual(typeSync(eds({ lastVersionSent: 'v2', versionAcked: 'v2' }), mode, SNAPSHOT), { state: 'synced', latestVersion: 'v2' });
  });
  it('is stale while the latest is sent but not answered, or not sent yet, or without a snapshot', () => {
    assert.equal(typeSync(eds({ lastVersionSent: 'v2', versionAcked: 'v1' }), 'delta', SNAPSHOT).state, 'stale');
    assert.equal(typeSync(eds({ lastVersionSent: 'v1', versionAcked: 'v1' }), 'delta', SNAPSHOT).state, 'stale');
    assert.equal(typeSync(eds({}), 'sotw', SNAPSHOT).state, 'stale');
    assert.deepEqual(typeSync(eds({ lastVersionSent: 'v1', versionAcked: 'v1' }), 'sotw', undefined), { state: 'stale', latestVersion: null });
  });
  it('is nacked when the last version sent was rejected and none accepted since; an ACK after it clears it', () => {
    assert.equal(typeSync(eds({ lastVersionSent: 'v2', versionAcked: 'v1', lastNack: nack('v2') }), 'sotw', SNAPSHOT).state, 'nacked');
    assert.equal(typeSync(eds({ lastVersionSent: 'v2', versionAcked: 'v2', lastNack: nack('v1') }), 'sotw', SNAPSHOT).state, 'synced');
    // A newer version sent after the NACK: waiting for its answer.
    assert.equal(typeSync(eds({ lastVersionSent: 'v2', versionAcked: 'v0', lastNack: nack('v1') }), 'delta', SNAPSHOT).state, 'stale');
  });
  it('a SotW stream subscribed to fewer names than the snapshot has is synced once it ACKed the last version sent (of that subset)', () => {
    const subset = eds({ resourceNames: ['a'], resourceNameCount: 1, lastVersionSent: 'va', versionAcked: 'va' });
    assert.equal(typeSync(subset, 'sotw', SNAPSHOT).state, 'synced');
    assert.equal(typeSync({ ...subset, versionAcked: 'v0' }, 'sotw', SNAPSHOT).state, 'stale');
    assert.equal(typeSync(subset, 'delta', SNAPSHOT).state, 'stale', 'a delta stream is sent the snapshot version whatever it subscribed');
  });
});
