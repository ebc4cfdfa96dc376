import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { encodeAny } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import {
  LayeredResourceMap,
  ResourceInterner,
  SharedResourceMap,
  SnapshotCache,
  VERSION_LENGTH,
  buildProxySnapshot,
  replaceResources,
  resourceVersion,
  sharedLayerChanges,
  sharedLayerOf,
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

describe('shared layers (SharedResourceMap, LayeredResourceMap)', () => {
  const names = ['a', 'b|1', 'b|1|local', 'b|10', 'c:x', 'envoy-metrics-cluster', 'z'];

  it('versions a layered map as typeVersion of the same resources, however they are split', () => {
    const interner = new ResourceInterner();
    const all = names.map((n, i) => interner.intern(n, cluster(n, i + 1).resource));
    for (let mask = 0; mask < 1 << all.length; mask++) {
      const shared = new SharedResourceMap(TypeUrl.Cluster, all.filter((_, i) => mask & (1 << i)));
      const own = new Map(all.filter((_, i) => !(mask & (1 << i))).map((r) => [r.name, r]));
      const layered = new LayeredResourceMap(shared, own);
      assert.equal(layered.version(), typeVersion(all), `split ${mask}`);
      assert.equal(layered.size, all.length);
      assert.deepEqual([...layered.keys()].sort(), [...names].sort());
      for (const r of all) assert.equal(layered.get(r.name), r);
      assert.equal(layered.has('nope'), false);
    }
    assert.equal(new SharedResourceMap(TypeUrl.Cluster, []).version, typeVersion([]));
  });

  it('refuses a name in both layers, and a name twice in one', () => {
    const interner = new ResourceInterner();
    const a = interner.intern('a', cluster('a').resource);
    assert.throws(() => new LayeredResourceMap(new SharedResourceMap(TypeUrl.Cluster, [a]), new Map([['a', a]])), /duplicate/);
    assert.throws(() => new SharedResourceMap(TypeUrl.Cluster, [a, a]), /duplicate/);
  });

  it('gives every snapshot built on one encoded layer the same shared map, with the own resources beside it', () => {
    const interner = new ResourceInterner();
    const layer = [cluster('a'), cluster('b')];
    const s1 = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('own-1')]]]), interner, new Map([[TypeUrl.Cluster, layer]]));
    const s2 = buildProxySnapshot(new Map([[TypeUrl.Cluster, []]]), interner, new Map([[TypeUrl.Cluster, layer]]));
    const [m1, m2] = [s1.resources.get(TypeUrl.Cluster)!, s2.resources.get(TypeUrl.Cluster)!];
    assert.ok(m1 instanceof LayeredResourceMap);
    assert.equal(sharedLayerOf(m1), m2, 'without own resources: the shared map itself');
    assert.deepEqual([...m1.keys()], ['a', 'b', 'own-1']);
    assert.equal(s1.versions.get(TypeUrl.Cluster), typeVersion(m1.values()));
    assert.throws(() => buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('a')]]]), interner, new Map([[TypeUrl.Cluster, layer]])), /duplicate/);
  });

  it('replaces resources of a shared layer once for every snapshot that has it, and keeps the own ones', () => {
    const interner = new ResourceInterner();
    const layer = [cluster('a'), cluster('b')];
    const s1 = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('own-1')]]]), interner, new Map([[TypeUrl.Cluster, layer]]));
    const s2 = buildProxySnapshot(new Map([[TypeUrl.Cluster, [cluster('own-2')]]]), interner, new Map([[TypeUrl.Cluster, layer]]));
    const [r1, r2] = [s1, s2].map((s) => replaceResources(s, TypeUrl.Cluster, [cluster('a', 5), cluster('own-1', 7)], interner));
    const [m1, m2] = [r1!.resources.get(TypeUrl.Cluster)!, r2!.resources.get(TypeUrl.Cluster)!];
    assert.equal(sharedLayerOf(m1), sharedLayerOf(m2), 'one new shared map');
    assert.notEqual(sharedLayerOf(m1), sharedLayerOf(s1.resources.get(TypeUrl.Cluster)!));
    assert.equal(m1.get('a')!.version, resourceVersion(cluster('a', 5).resource));
    assert.equal(m1.get('own-1')!.version, resourceVersion(cluster('own-1', 7).resource));
    assert.equal(m2.get('own-2'), s2.resources.get(TypeUrl.Cluster)!.get('own-2'));
    for (const s of [r1!, r2!]) assert.equal(s.versions.get(TypeUrl.Cluster), typeVersion(s.resources.get(TypeUrl.Cluster)!.values()));
    assert.equal(replaceResources(s1, TypeUrl.Cluster, [cluster('a')], interner), s1, 'the same bytes: nothing replaced');
  });
});

describe('sharedLayerChanges', () => {
  it('gives what changed between two shared layers, once per pair, and nothing between a layer and itself', () => {
    const interner = new ResourceInterner();
    const before = new SharedResourceMap(TypeUrl.Cluster, ['a', 'b', 'c'].map((n) => interner.intern(n, cluster(n).resource)));
    const after = new SharedResourceMap(TypeUrl.Cluster, [interner.intern('a', cluster('a').resource), interner.intern('b', cluster('b', 2).resource), interner.intern('d', cluster('d').resource)]);
    const changes = sharedLayerChanges(before, after);
    assert.deepEqual(changes.changed.map((r) => r.name), ['b', 'd']);
    assert.deepEqual(changes.removed, ['c']);
    assert.equal(sharedLayerChanges(before, after), changes, 'remembered for the pair');
    assert.deepEqual(sharedLayerChanges(after, after), { changed: [], removed: [] });
  });
});
