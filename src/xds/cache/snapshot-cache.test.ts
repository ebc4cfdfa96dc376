import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeAny } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import {
  ResourceInterner,
  SnapshotCache,
  VERSION_LENGTH,
  buildProxySnapshot,
  replaceResources,
  resourceVersion,
  typeVersion,
  type NamedResource,
} from './snapshot-cache.js';
import type { ProxySnapshot } from './types.js';

function cluster(name: string, seconds = 1): NamedResource {
  return { name, resource: encodeAny(TypeUrl.Cluster, { name, connect_timeout: { seconds } }) };
}

describe('resourceVersion / typeVersion', () => {
  it('is a hex hash of the bytes, equal for equal bytes and different for different bytes', () => {
    const v = resourceVersion(cluster('a').resource);
    assert.match(v, new RegExp(`^[0-9a-f]{${VERSION_LENGTH}}$`));
    assert.equal(resourceVersion(cluster('a').resource), v);
    assert.notEqual(resourceVersion(cluster('a', 2).resource), v);
  });

  it('gives a type version that does not depend on order and changes with any name or version', () => {
    const i = new ResourceInterner();
    const a = i.intern('a', cluster('a').resource);
    const b = i.intern('b', cluster('b').resource);
    const b2 = i.intern('b', cluster('b', 2).resource);
    assert.equal(typeVersion([a, b]), typeVersion([b, a]));
    assert.notEqual(typeVersion([a, b]), typeVersion([a, b2]));
    assert.notEqual(typeVersion([a, b]), typeVersion([a]));
    assert.match(typeVersion([]), /^[0-9a-f]{16}$/);
  });
});

describe('buildProxySnapshot', () => {
  it('versions every resource and type, and shares identical resources between snapshots', () => {
    const interner = new ResourceInterner();
    const s1 = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a'), cluster('b')]]]), interner);
    const s2 = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('b'), cluster('a')]]]), interner);
    const a1 = s1.resources.get(TypeUrl.Cluster)!.get('a')!;
    assert.equal(a1.name, 'a');
    assert.equal(a1.version, resourceVersion(a1.resource));
    assert.equal(s2.resources.get(TypeUrl.Cluster)!.get('a'), a1, 'same bytes, same CachedResource object');
    assert.equal(s1.versions.get(TypeUrl.Cluster), s2.versions.get(TypeUrl.Cluster));
    assert.equal(interner.size, 2);
  });

  it('keeps a type given with no resources, with a version', () => {
    const s = buildProxySnapshot(new Map([[TypeUrl.Listener, []]]), new ResourceInterner());
    assert.equal(s.resources.get(TypeUrl.Listener)!.size, 0);
    assert.equal(s.versions.get(TypeUrl.Listener), typeVersion([]));
    assert.equal(s.resources.get(TypeUrl.Cluster), undefined);
  });

  it('rejects duplicate names and resources listed under the wrong type', () => {
    assert.throws(() => buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a'), cluster('a', 2)]]]), new ResourceInterner()), /duplicate .* "a"/);
    assert.throws(() => buildProxySnapshot(new Map([[TypeUrl.Listener, [cluster('a')]]]), new ResourceInterner()), /listed under/);
  });

  it('forgets the least recently used resources beyond its bound', () => {
    const interner = new ResourceInterner(2);
    const a = interner.intern('a', cluster('a').resource);
    interner.intern('b', cluster('b').resource);
    assert.equal(interner.intern('a', cluster('a').resource), a); // a is now the most recent
    interner.intern('c', cluster('c').resource); // evicts b
    assert.equal(interner.size, 2);
    assert.equal(interner.intern('a', cluster('a').resource), a);
  });

  it('keeps what it remembers to itself: another interner versions the bytes it is given (no module-level memo)', () => {
    const first = new ResourceInterner();
    const shared = cluster('a');
    const before = buildProxySnapshot(new Map([[TypeUrl.Cluster, [shared]]]), first).resources.get(TypeUrl.Cluster)!.get('a')!.version;
    // Another owner in the same process (a second controller, a test) whose Buffer happens to be
    // the same object with other bytes: what the first owner remembered must not leak into it.
    shared.resource.value[shared.resource.value.length - 1] ^= 1;
    const expected = resourceVersion({ type_url: TypeUrl.Cluster, value: Buffer.from(shared.resource.value) });
    assert.notEqual(expected, before);
    const after = buildProxySnapshot(new Map([[TypeUrl.Cluster, [shared]]]), new ResourceInterner()).resources.get(TypeUrl.Cluster)!.get('a')!;
    assert.equal(after.version, expected);
    assert.equal(new ResourceInterner().version(shared.resource), expected);
  });
});

describe('SnapshotCache', () => {
  const snap = (): ProxySnapshot => buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a')]]]), new ResourceInterner());

  it('stores, returns and clears snapshots by proxy UUID', () => {
    const cache = new SnapshotCache();
    const s = snap();
    assert.equal(cache.getSnapshot('p1'), undefined);
    cache.setSnapshot('p1', s);
    assert.equal(cache.getSnapshot('p1'), s);
    assert.deepEqual(cache.proxyUuids(), ['p1']);
    cache.clearSnapshot('p1');
    assert.equal(cache.getSnapshot('p1'), undefined);
  });

  it('calls the watchers of a proxy on every set until cancelled', () => {
    const cache = new SnapshotCache();
    const seen: string[] = [];
    const cancel1 = cache.watch('p1', () => seen.push('w1'));
    cache.watch('p1', () => seen.push('w2'));
    cache.watch('p2', () => seen.push('other proxy'));
    cache.setSnapshot('p1', snap());
    cache.setSnapshot('p1', snap());
    cancel1();
    cancel1();
    cache.setSnapshot('p1', snap());
    assert.deepEqual(seen, ['w1', 'w2', 'w1', 'w2', 'w2']);
  });

  it('calls every watcher even when one throws, then reports the error', () => {
    const cache = new SnapshotCache();
    const seen: string[] = [];
    cache.watch('p1', () => {
      throw new Error('boom');
    });
    cache.watch('p1', () => seen.push('second'));
    assert.throws(() => cache.setSnapshot('p1', snap()), AggregateError);
    assert.deepEqual(seen, ['second']);
  });
});

describe('replaceResources', () => {
  const listener = (name: string, port: number): NamedResource => ({
    name,
    resource: encodeAny(TypeUrl.Listener, { name, address: { socket_address: { address: '0.0.0.0', port_value: port } } }),
  });
  const interner = new ResourceInterner();
  const base = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a'), cluster('b')]], [TypeUrl.Listener, [listener('l', 1)]]]), interner);

  it('replaces named resources of one type, recomputes only that type\'s version, and keeps the other types as they are', () => {
    const next = replaceResources(base, TypeUrl.Cluster, [cluster('b', 2)], interner);
    assert.notEqual(next.versions.get(TypeUrl.Cluster), base.versions.get(TypeUrl.Cluster));
    assert.equal(next.resources.get(TypeUrl.Cluster)!.get('a'), base.resources.get(TypeUrl.Cluster)!.get('a'));
    assert.equal(next.resources.get(TypeUrl.Cluster)!.get('b')!.version, resourceVersion(cluster('b', 2).resource));
    assert.equal(next.resources.get(TypeUrl.Listener), base.resources.get(TypeUrl.Listener));
    assert.equal(next.versions.get(TypeUrl.Listener), base.versions.get(TypeUrl.Listener));
    // The same as building the whole snapshot anew.
    const rebuilt = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a'), cluster('b', 2)]], [TypeUrl.Listener, [listener('l', 1)]]]), interner);
    assert.deepEqual(next.versions, rebuilt.versions);
  });

  it('returns the same snapshot when nothing differs, and never adds a name it does not have', () => {
    assert.equal(replaceResources(base, TypeUrl.Cluster, [cluster('a')], interner), base);
    assert.equal(replaceResources(base, TypeUrl.Cluster, [cluster('c')], interner), base);
    assert.throws(() => replaceResources(base, TypeUrl.Cluster, [listener('a', 2)], interner), /listed|replaced under/);
  });
});
