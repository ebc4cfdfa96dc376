/**
 * Permissive mode at scale: what one proxy's snapshot holds that depends on the proxy, and what a
 * change sends it. In-process (generation, encoding, snapshots with one interner, as the
 * controller has them); a delta stream sends exactly the resources whose version changed
 * (`src/xds/server/delta-stream.ts`), so the versions compared here are what it sends.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TypeUrl } from '../src/api/type-urls.js';
import { buildMeshSnapshot } from '../src/catalog/build-snapshot.js';
import { encodeResources } from '../src/controller/configuration.js';
import { GenerationContext, proxyProfile } from '../src/envoy/context.js';
import { generateProxyResources } from '../src/envoy/generate.js';
import { ResourceCheckCache } from '../src/envoy/validate/index.js';
import type { KubeObject } from '../src/store/objects.js';
import { decodeMessage } from '../src/api/codec.js';
import { ResourceInterner, buildProxySnapshot, sharedLayerOf, typeVersion } from '../src/xds/cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot } from '../src/xds/cache/types.js';
import { bookstoreMesh, k8s } from './fixtures/mesh.js';
import { TEST_CERTS, proxyOf } from './helpers/generate-config.js';
import { harness } from './helpers/incremental-harness.js';
import { memoryStore } from './helpers/memory-store.js';

const INVENTORY: KubeObject[] = [
  k8s.serviceAccount('bookwarehouse', 'inventory'),
  k8s.service('bookwarehouse', 'inventory', { app: 'inventory' }, [{ port: 14001, name: 'inventory-port' }], '10.96.0.30'),
  k8s.pod('bookwarehouse', 'inventory-1', 'inventory', { app: 'inventory' }, '10.244.3.30', [14001]),
];

/** Certificate material of identity `<ns>/<sa>`: its own certificate and key, the one mesh root. */
function certsOf(ns: string, sa: string): typeof TEST_CERTS {
  return { ...TEST_CERTS, certChainPem: `CERT ${ns}/${sa}`, privateKeyPem: `KEY ${ns}/${sa}` };
}

/** Names of `type` whose version differs between the snapshots (added, removed or changed), sorted. */
function changed(a: ProxySnapshot, b: ProxySnapshot, type: TypeUrl): string[] {
  const [x, y] = [a.resources.get(type) ?? new Map(), b.resources.get(type) ?? new Map()];
  return [...new Set([...x.keys(), ...y.keys()])].filter((n) => x.get(n)?.version !== y.get(n)?.version).sort();
}

describe('permissive mode: what depends on the proxy, and what a change sends', () => {
  const checked = new ResourceCheckCache();
  const interner = new ResourceInterner();
  const snapshotOf = (context: GenerationContext, sa: string, ns: string): ProxySnapshot =>
    buildProxySnapshot(encodeResources(generateProxyResources(context, proxyProfile(proxyOf(sa, ns)), certsOf(ns, sa)), checked), interner);
  const beforeMesh = buildMeshSnapshot(memoryStore(bookstoreMesh({ permissive: true })), { meshName: 'osm', generation: 1 }).snapshot;
  const before = new GenerationContext(beforeMesh);
  const after = new GenerationContext(buildMeshSnapshot(memoryStore([...bookstoreMesh({ permissive: true }), ...INVENTORY]), { meshName: 'osm', generation: 2, previous: beforeMesh }).snapshot, before);

  it('a new service changes its own Cluster and ClusterLoadAssignment in every proxy, and no Secret: one shared outbound root, not one per upstream service', () => {
    for (const [sa, ns] of [['bookbuyer', 'bookbuyer'], ['bookstore', 'bookstore']]) {
      const [a, b] = [snapshotOf(before, sa, ns), snapshotOf(after, sa, ns)];
      assert.deepEqual(changed(a, b, TypeUrl.Cluster), ['bookwarehouse/inventory|14001'], `${ns}/${sa} clusters`);
      assert.deepEqual(changed(a, b, TypeUrl.ClusterLoadAssignment), ['bookwarehouse/inventory|14001'], `${ns}/${sa} endpoints`);
      assert.deepEqual(changed(a, b, TypeUrl.Secret), [], `${ns}/${sa} secrets`);
      assert.deepEqual([...b.resources.get(TypeUrl.Secret)!.keys()].sort(), [`root-cert-for-mtls-inbound:${ns}/${sa}`, 'root-cert-for-mtls-outbound', 'service-cert']);
    }
  });

  it('two identities hold the very same encoded bytes for every upstream Cluster: only their own certificate and inbound side differ', () => {
    const [buyer, thief] = [snapshotOf(after, 'bookbuyer', 'bookbuyer'), snapshotOf(after, 'bookthief', 'bookthief')];
    const own: string[] = [];
    for (const [type, resources] of buyer.resources) {
      for (const [name, r] of resources) {
        const other = thief.resources.get(type)?.get(name);
        if (other?.version === r.version) assert.equal(other.resource.value, r.resource.value, `${name}: one Buffer`);
        else own.push(`${type.slice(type.lastIndexOf('.') + 1)} ${name}`);
      }
    }
    // Every upstream Cluster is one Buffer for both (the own certificate Secret is `service-cert`
    // for every proxy, so its TLS context names no identity), and so are their endpoints.
    const upstream = [...buyer.resources.get(TypeUrl.Cluster)!.keys()].filter((n) => !n.endsWith('|local') && n.includes('/'));
    assert.ok(upstream.length >= 4, upstream.join(', '));
    for (const name of upstream) assert.equal(thief.resources.get(TypeUrl.Cluster)?.get(name)?.resource.value, buyer.resources.get(TypeUrl.Cluster)!.get(name)!.resource.value, `Cluster ${name}: one Buffer`);
    // What differs: the proxy's own certificate (same name, its own identity's key), its inbound
    // root, and its inbound side (bookbuyer serves no service: its inbound listener differs).
    assert.deepEqual(own.filter((o) => o.startsWith('Secret ')), ['Secret root-cert-for-mtls-inbound:bookbuyer/bookbuyer', 'Secret service-cert']);
    for (const o of own) assert.match(o, /^(Secret |Listener inbound-listener$|RouteConfiguration rds-inbound|Cluster .*\|local$)/, `${o} differs`);
    assert.notEqual(thief.resources.get(TypeUrl.Secret)!.get('service-cert')!.version, buyer.resources.get(TypeUrl.Secret)!.get('service-cert')!.version, 'each its own certificate');
  });
});

describe('permissive mode in the controller: one shared layer of upstream Clusters and ClusterLoadAssignments', () => {
  const BUYER = '11111111-1111-4111-8111-111111111111.sidecar.bookbuyer.bookbuyer.cluster.local';
  const THIEF = '22222222-2222-4222-8222-222222222222.sidecar.bookthief.bookthief.cluster.local';
  const STORE = '33333333-3333-4333-8333-333333333333.sidecar.bookstore.bookstore.cluster.local';

  it('every proxy holds the same shared map object, with exactly what a flat generation gives, and its own key stays its own', async () => {
    const h = await harness(bookstoreMesh({ permissive: true }));
    try {
      const proxies = [await h.open(BUYER), await h.open(THIEF), await h.open(STORE)];
      assert.deepEqual(await h.check(), [], 'names, resources and type versions: those of a full flat generation');
      const snapshots = proxies.map((p) => h.cache.getSnapshot(p.uuid)!);
      for (const type of [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment]) {
        const layers = snapshots.map((s) => sharedLayerOf(s.resources.get(type)!));
        assert.ok(layers[0], `${type}: a shared layer`);
        assert.ok(layers.every((l) => l === layers[0]), `${type}: one object for every identity`);
        for (const s of snapshots) assert.equal(s.versions.get(type), typeVersion(s.resources.get(type)!.values()), `${type}: the version of its resources`);
      }
      // The upstream Clusters are shared; what names the proxy's own identity is not.
      const clusters = snapshots[2]!.resources.get(TypeUrl.Cluster)!;
      assert.ok([...sharedLayerOf(clusters)!.keys()].every((n) => !n.endsWith('|local')), 'local clusters are the proxy’s own');
      assert.ok([...clusters.keys()].some((n) => n.endsWith('|local')));
      for (const [i, s] of snapshots.entries()) {
        const secrets = s.resources.get(TypeUrl.Secret)!;
        assert.equal(sharedLayerOf(secrets), undefined, 'no Secret is in a shared layer');
        const key = (r: CachedResource) => JSON.stringify(decodeMessage(TypeUrl.Secret, Buffer.from(r.resource.value)));
        const own = key(secrets.get('service-cert')!);
        snapshots.forEach((other, j) => {
          if (j !== i) assert.notEqual(key(other.resources.get(TypeUrl.Secret)!.get('service-cert')!), own, 'each its own key');
        });
      }
    } finally {
      h.stop();
    }
  });

  it('the outbound listener is one shared layer for every proxy of the view, and the outbound route configurations one per client namespace; a new service makes one new layer of each for all', async () => {
    const STORE_V2 = '44444444-4444-4444-8444-444444444444.sidecar.bookstore-v2.bookstore.cluster.local';
    const h = await harness(bookstoreMesh({ permissive: true }));
    try {
      const proxies = [await h.open(BUYER), await h.open(THIEF), await h.open(STORE), await h.open(STORE_V2)];
      const layers = (type: TypeUrl) => proxies.map((p) => sharedLayerOf(h.cache.getSnapshot(p.uuid)!.resources.get(type)!));
      const check = (when: string) => {
        const listeners = layers(TypeUrl.Listener);
        assert.ok(listeners[0], `${when}: a shared Listener layer`);
        assert.ok(listeners.every((l) => l === listeners[0]), `${when}: one Listener layer object for every identity`);
        assert.deepEqual([...listeners[0]!.keys()], ['outbound-listener'], `${when}: the inbound listener is each proxy's own`);
        const routes = layers(TypeUrl.RouteConfiguration);
        assert.ok(routes.every((r) => r !== undefined && [...r.keys()].every((n) => n.startsWith('rds-outbound.'))), `${when}: the outbound route configurations are shared`);
        assert.equal(routes[2], routes[3], `${when}: one RouteConfiguration layer for the clients of one namespace`);
        assert.notEqual(routes[0], routes[2], `${when}: another for another namespace (short host names)`);
        return { listener: listeners[0], routes: routes[2] };
      };
      assert.deepEqual(await h.check(), [], 'names, resources and type versions: those of a full flat generation');
      const before = check('before');
      await h.set([...bookstoreMesh({ permissive: true }), ...INVENTORY]);
      assert.deepEqual(await h.check(), []);
      const after = check('after a new service');
      assert.notEqual(after.listener, before.listener, 'a new Listener layer');
      assert.ok(after.routes!.has('rds-outbound.14001'), 'the new port has its route configuration');
    } finally {
      h.stop();
    }
  });

  it('a change of endpoints replaces the shared layer once: every proxy then holds the same new map', async () => {
    const h = await harness(bookstoreMesh({ permissive: true }));
    try {
      const proxies = [await h.open(BUYER), await h.open(THIEF)];
      const before = sharedLayerOf(h.cache.getSnapshot(proxies[0]!.uuid)!.resources.get(TypeUrl.ClusterLoadAssignment)!);
      await h.set(bookstoreMesh({ permissive: true }).map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v1-1' ? { ...o, status: { ...(o.status as object), podIP: '10.244.9.9' } } : o)));
      assert.deepEqual(await h.check(), []);
      const after = proxies.map((p) => sharedLayerOf(h.cache.getSnapshot(p.uuid)!.resources.get(TypeUrl.ClusterLoadAssignment)!));
      assert.ok(after[0] && after[0] !== before, 'a new layer');
      assert.equal(after[1], after[0], 'the same for both proxies');
    } finally {
      h.stop();
    }
  });
});
