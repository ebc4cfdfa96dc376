import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import { buildMeshSnapshot, MeshSnapshotBuilder } from '../catalog/build-snapshot.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { parseCommonName, serviceIdentity } from '../proxy/types.js';
import { ObjectStore } from '../store/object-store.js';
import { GenerationContext, MAX_IDLE_GENERATIONS, proxyProfile } from './context.js';
import { generateProxyResources } from './generate.js';

const certs = { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' };
const snapshotOf = (permissive: boolean) => buildMeshSnapshot(memoryStore(bookstoreMesh({ permissive })), { meshName: 'osm', generation: 1 }).snapshot;
const bookbuyer = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.bookbuyer.bookbuyer.cluster.local'));
const bookthief = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000002.sidecar.bookthief.bookthief.cluster.local'));
const resource = (context: GenerationContext, type: TypeUrl, name: string, profile = bookbuyer) =>
  generateProxyResources(context, profile, certs).get(type)!.find((r) => r.name === name)!.resource;

describe('GenerationContext.shared', () => {
  it('builds once per (kind, name) and inputs, from the inputs alone', () => {
    const context = new GenerationContext(snapshotOf(false));
    const a = { x: 1 };
    const calls: unknown[][] = [];
    const build = (input: { x: number }, n: number) => {
      calls.push([input, n]);
      return { sum: input.x + n };
    };
    const first = context.shared('Cluster', 'c', [a, 2], build);
    assert.deepEqual(first, { sum: 3 });
    assert.equal(context.shared('Cluster', 'c', [a, 2], build), first, 'the same inputs: the same object');
    assert.deepEqual(calls, [[a, 2]], 'build got exactly the inputs, once');
    assert.notEqual(context.shared('Cluster', 'c', [{ x: 1 }, 2], build), first, 'inputs are compared by identity');
    assert.notEqual(context.shared('Listener', 'c', [a, 2], build), context.shared('Cluster', 'c', [a, 2], build), 'kinds are apart');
  });

  it('carries entries over from the contexts before, and drops the context before itself', () => {
    const a = {};
    const build = (_input: object) => ({});
    const one = new GenerationContext(snapshotOf(false));
    const kept = one.shared('Cluster', 'c', [a], build);
    const two = new GenerationContext(snapshotOf(false), one);
    assert.equal(two.previous, one);
    assert.equal(two.shared('Cluster', 'c', [a], build), kept, 'same inputs: carried over');
    assert.notEqual(two.shared('Cluster', 'd', [a], build), one.shared('Cluster', 'd', [{}], build), 'other inputs: built again');
    const three = new GenerationContext(snapshotOf(false), two);
    assert.equal(two.previous, undefined, 'a context keeps one generation back, not a chain');
    // Asked of `one` after `two` was made from it: not carried (a context carries what the one
    // before had when it was made, not what an older one builds later).
    const onlyInOne = one.shared('Cluster', 'e', [a], build);
    assert.notEqual(three.shared('Cluster', 'e', [a], build), onlyInOne);
  });

  it('carries an entry through generations that did not ask for it (a push of some types only), for MAX_IDLE_GENERATIONS', () => {
    const a = {};
    const build = (_input: object) => ({});
    let context = new GenerationContext(snapshotOf(false));
    const kept = context.shared('Cluster', 'c', [a], build);
    // Generations that regenerate other types only: nobody asks for the cluster.
    for (let i = 0; i < 3; i++) context = new GenerationContext(snapshotOf(false), context);
    assert.equal(context.shared('Cluster', 'c', [a], build), kept, 'the same inputs three generations later: the same object');
    for (let i = 0; i <= MAX_IDLE_GENERATIONS; i++) context = new GenerationContext(snapshotOf(false), context);
    assert.notEqual(context.shared('Cluster', 'c', [a], build), kept, 'idle for longer than the bound: built again');
  });

  it('of two contexts of one MeshSnapshot shares nothing: each builds its own objects, with the same content', () => {
    const snapshot = snapshotOf(true);
    const [x, y] = [new GenerationContext(snapshot), new GenerationContext(snapshot)];
    const [lx, ly] = [resource(x, TypeUrl.Listener, 'outbound-listener'), resource(y, TypeUrl.Listener, 'outbound-listener')];
    assert.notEqual(lx, ly);
    assert.deepEqual(lx, ly);
  });

  it('keeps what carries over whatever another controller generates meanwhile (no state outside the context)', () => {
    // Two controllers in one process: one's MeshSnapshot generations, with another's generated
    // between them, still carry their unchanged resources over.
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh({ permissive: true }));
    const builder = new MeshSnapshotBuilder();
    const a1 = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 1 }).snapshot);
    const before = resource(a1, TypeUrl.Listener, 'outbound-listener');
    const other = new GenerationContext(snapshotOf(true));
    resource(other, TypeUrl.Listener, 'outbound-listener');
    store.replaceAll('test', bookstoreMesh({ permissive: true }).map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar: { cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] } } } : o)));
    const a2 = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 2, previous: a1.snapshot }).snapshot, a1);
    assert.equal(resource(a2, TypeUrl.Listener, 'outbound-listener'), before, 'the outbound listener reads nothing that changed: the same object');
  });
});

describe('the inbound side carried over', () => {
  const bookstore = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000003.sidecar.bookstore.bookstore.cluster.local'));
  const withCiphers = (objects: ReturnType<typeof bookstoreMesh>) =>
    objects.map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar: { cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] } } } : o));
  /** Successive generations of one store and builder: each call replaces the store's objects and makes the next context. */
  const generations = () => {
    const store = new ObjectStore();
    const builder = new MeshSnapshotBuilder();
    let context: GenerationContext | undefined;
    return (objects: ReturnType<typeof bookstoreMesh>): GenerationContext => {
      store.replaceAll('test', objects);
      const { snapshot } = builder.build(store, { meshName: 'osm', generation: (context?.snapshot.generation ?? 0) + 1, ...(context ? { previous: context.snapshot } : {}) });
      return (context = new GenerationContext(snapshot, context));
    };
  };
  const of = (context: GenerationContext) => ({
    routes: resource(context, TypeUrl.RouteConfiguration, 'rds-inbound.14001', bookstore),
    listener: resource(context, TypeUrl.Listener, 'inbound-listener', bookstore),
  });

  it('keeps the inbound routes through a MeshConfig TLS change and the listener through an unrelated TrafficTarget change (SMI)', () => {
    const next = generations();
    const one = next(bookstoreMesh({ permissive: false }));
    const first = of(one);
    const two = next(withCiphers(bookstoreMesh({ permissive: false })));
    const second = of(two);
    assert.equal(second.routes, first.routes, 'the routes read no TLS setting: the same object');
    assert.notEqual(second.listener, first.listener, 'the listener has the cipher suites');
    assert.match(JSON.stringify(second.listener), /ECDHE-ECDSA-AES256-GCM-SHA384/);
    // Another TrafficTarget, towards another identity: the TrafficTargets are resolved again,
    // and bookstore's keep their policy objects (the same content).
    const extra = k8s.trafficTarget('bookwarehouse', 'thief-access', 'mysql', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'TCPRoute', name: 'mysql' }]);
    const three = next([...withCiphers(bookstoreMesh({ permissive: false })), extra]);
    assert.notEqual(three.snapshot.trafficTargets, two.snapshot.trafficTargets);
    assert.deepEqual(of(three), second);
    assert.equal(of(three).routes, second.routes, 'the same targets towards bookstore: the same routes');
    assert.equal(of(three).listener, second.listener, 'and the same listener');
    // A new source towards bookstore: both change.
    const buyer = k8s.trafficTarget('bookstore', 'thief-access', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes', matches: ['buy-a-book'] }]);
    const four = next([...withCiphers(bookstoreMesh({ permissive: false })), extra, buyer]);
    const fourth = of(four);
    assert.notEqual(fourth.routes, second.routes);
    assert.notEqual(fourth.listener, second.listener);
    assert.match(JSON.stringify(fourth.listener), /bookthief/);
    assert.match(JSON.stringify(fourth.routes), /bookthief/);
  });

  it('makes new inbound chains around the same matches and filters on a MeshConfig TLS change, one transport socket per listener (SMI)', () => {
    const next = generations();
    type Chain = { name: string; filter_chain_match: object; filters: object; transport_socket: object };
    const chainsOf = (context: GenerationContext) => (of(context).listener as { filter_chains: Chain[] }).filter_chains.filter((c) => c.name.startsWith('inbound_'));
    const first = chainsOf(next(bookstoreMesh({ permissive: false })));
    const second = chainsOf(next(withCiphers(bookstoreMesh({ permissive: false }))));
    assert.ok(first.length > 0);
    assert.equal(second.length, first.length);
    for (const [i, chain] of second.entries()) {
      assert.notEqual(chain, first[i], 'the chain has the new TLS context');
      assert.equal(chain.filter_chain_match, first[i]!.filter_chain_match, `${chain.name}: the same match`);
      assert.equal(chain.filters, first[i]!.filters, `${chain.name}: the same filters`);
    }
    assert.equal(new Set(second.map((c) => c.transport_socket)).size, 1, 'one transport socket object for the identity');
    assert.match(JSON.stringify(second[0]!.transport_socket), /ECDHE-ECDSA-AES256-GCM-SHA384/);
  });

  it('makes a new transport socket part only of an upstream cluster on a MeshConfig TLS change: the rest is the same object (SMI)', () => {
    const next = generations();
    const buyer = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.bookbuyer.bookbuyer.cluster.local'));
    const clusterOf = (context: GenerationContext) => generateProxyResources(context, buyer, certs).get(TypeUrl.Cluster)!.find((r) => r.name === 'bookstore/bookstore-v1|14001')!;
    const first = clusterOf(next(bookstoreMesh({ permissive: false })));
    const second = clusterOf(next(withCiphers(bookstoreMesh({ permissive: false }))));
    assert.equal(second.parts?.length, 2);
    assert.equal(second.parts?.[0], first.parts?.[0], 'all but the transport socket: the same object');
    assert.notEqual(second.parts?.[1], first.parts?.[1]);
    assert.deepEqual({ ...second.parts?.[0], ...second.parts?.[1] }, second.resource, 'the parts are the cluster');
    assert.match(JSON.stringify(second.parts?.[1]), /ECDHE-ECDSA-AES256-GCM-SHA384/);
    assert.doesNotMatch(JSON.stringify(second.parts?.[0]), /transport_socket/);
  });

  it('keeps the inbound listener and routes through a MeshConfig change that is not of TLS settings (permissive)', () => {
    const next = generations();
    const one = next(bookstoreMesh({ permissive: true }));
    const first = of(one);
    const two = next(bookstoreMesh({ permissive: true }).map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(true, true) : o)));
    assert.notEqual(two.snapshot.settings, one.snapshot.settings);
    assert.equal(of(two).routes, first.routes);
    assert.equal(of(two).listener, first.listener);
  });
});

describe('GenerationContext.outboundView', () => {
  it('is one object for identities that reach the same destinations the same way, numbered for shared names', () => {
    const context = new GenerationContext(snapshotOf(true));
    const [buyer, thief] = [context.outboundView(bookbuyer.identity), context.outboundView(bookthief.identity)];
    assert.equal(buyer, thief, 'permissive: every identity reaches the same services');
    assert.equal(context.outboundViewId(buyer), context.outboundViewId(thief));
    const smi = new GenerationContext(snapshotOf(false));
    const [b, t] = [smi.outboundView(bookbuyer.identity), smi.outboundView(bookthief.identity)];
    assert.notEqual(b, t);
    assert.notEqual(smi.outboundViewId(b), smi.outboundViewId(t));
    assert.throws(() => smi.outboundViewId(buyer), /not made by this generation context/);
  });

  it('keeps the view, and its number, of the generation before when it reaches the very same services', () => {
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh({ permissive: false }));
    const builder = new MeshSnapshotBuilder();
    const one = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 1 }).snapshot);
    const view = one.outboundView(bookbuyer.identity);
    // A pod of another service moves: nothing bookbuyer reaches.
    store.replaceAll('test', [...bookstoreMesh({ permissive: false }), k8s.serviceAccount('bookbuyer', 'extra')]);
    const two = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 2, previous: one.snapshot }).snapshot, one);
    assert.equal(two.outboundView(bookbuyer.identity), view);
    assert.equal(two.outboundViewId(view), one.outboundViewId(view));
    assert.ok(two.outboundView(serviceIdentity('bookbuyer', 'extra')), 'a new identity gets a view');
  });

  it('keeps every view of the generation before without computing one when what views read is the same (MeshConfig TLS settings, endpoints), and computes those a change names (a TrafficTarget, a service port)', () => {
    const store = new ObjectStore();
    const builder = new MeshSnapshotBuilder();
    let context: GenerationContext | undefined;
    const next = (objects: ReturnType<typeof bookstoreMesh>): GenerationContext => {
      store.replaceAll('test', objects);
      const { snapshot } = builder.build(store, { meshName: 'osm', generation: (context?.snapshot.generation ?? 0) + 1, ...(context ? { previous: context.snapshot } : {}) });
      return (context = new GenerationContext(snapshot, context));
    };
    const identities = [bookbuyer.identity, bookthief.identity, serviceIdentity('bookstore', 'bookstore')];
    const one = next(bookstoreMesh({ permissive: false }));
    const views = identities.map((identity) => one.outboundView(identity));
    assert.equal(one.outboundViewsComputed, identities.length);
    const ciphers = bookstoreMesh({ permissive: false }).map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar: { cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] } } } : o));
    const two = next(ciphers);
    assert.notEqual(two.snapshot.settings, one.snapshot.settings);
    assert.deepEqual(identities.map((identity) => two.outboundView(identity)), views, 'the same view objects');
    assert.deepEqual(views.map((view) => two.outboundViewId(view)), views.map((view) => one.outboundViewId(view)), 'with their numbers');
    assert.equal(two.outboundViewsComputed, 0, 'none computed');
    // A generation that asks for one identity's view only (a scoped push), then one that asks for all.
    const scoped = next(ciphers.map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v2-1' ? { ...o, status: { podIP: '10.244.9.8', phase: 'Running' } } : o)));
    assert.equal(scoped.outboundView(bookbuyer.identity), views[0]);
    const moved = ciphers.map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v2-1' ? { ...o, status: { podIP: '10.244.9.9', phase: 'Running' } } : o));
    const three = next(moved);
    assert.deepEqual(identities.map((identity) => three.outboundView(identity)), views);
    assert.equal(three.outboundViewsComputed, 0, 'an endpoint change: none computed');
    const grant = k8s.trafficTarget('bookstore', 'thief-access', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }]);
    const four = next([...moved, grant]);
    const thief = four.outboundView(bookthief.identity);
    assert.notEqual(thief, views[1], 'bookthief now reaches bookstore');
    assert.ok(thief.destinations.some((d) => d.service.name === 'bookstore'));
    assert.equal(four.outboundView(bookbuyer.identity), views[0], 'bookbuyer reaches the same services: its view of the generation before');
    assert.equal(four.outboundView(serviceIdentity('bookstore', 'bookstore')), views[2]);
    assert.equal(four.outboundViewsComputed, 2, 'only the views of the identities the change names (bookthief, bookstore) are computed, not bookbuyer\'s');
    // A service bookbuyer reaches changes its port: bookbuyer's view is computed again.
    const ported = [...moved, grant].map((o) =>
      o.kind === 'Service' && o.metadata.name === 'bookstore' ? { ...o, spec: { ...(o.spec as object), ports: [{ name: 'http', port: 8080, targetPort: 14001 }] } } : o,
    );
    const five = next(ported);
    const buyer = five.outboundView(bookbuyer.identity);
    assert.notEqual(buyer, views[0]);
    assert.ok(buyer.destinations.some((d) => d.service.name === 'bookstore' && d.service.port === 8080));
  });

  it('permissive: keeps the view of the generation before for an identity it was never asked for', () => {
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh({ permissive: true }));
    const builder = new MeshSnapshotBuilder();
    const one = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 1 }).snapshot);
    const view = one.outboundView(bookbuyer.identity);
    store.replaceAll('test', [...bookstoreMesh({ permissive: true }), k8s.serviceAccount('bookbuyer', 'extra')]);
    const two = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 2, previous: one.snapshot }).snapshot, one);
    assert.equal(two.outboundView(bookthief.identity), view, 'the same services reached the same way: the same view, whoever asks first');
    assert.equal(two.outboundView(serviceIdentity('bookbuyer', 'extra')), view);
    assert.equal(two.outboundViewId(view), one.outboundViewId(view));
  });
});

describe('generateProxyResources with types', () => {
  for (const clientType of ['envoy', 'grpc'] as const) {
    it(`generates only the types asked for, the same as a full generation (${clientType})`, () => {
      const context = new GenerationContext(snapshotOf(false));
      const profile = { ...bookbuyer, clientType };
      const all = generateProxyResources(context, profile, certs);
      assert.deepEqual([...all.keys()].sort(), Object.values(TypeUrl).sort(), 'all five without types');
      const some = generateProxyResources(context, profile, certs, new Set([TypeUrl.RouteConfiguration, TypeUrl.ClusterLoadAssignment]));
      assert.deepEqual([...some.keys()].sort(), [TypeUrl.ClusterLoadAssignment, TypeUrl.RouteConfiguration].sort());
      for (const [type, list] of some) assert.deepEqual(list, all.get(type), type);
    });
  }
});

describe('GenerationContext.layer', () => {
  const cluster = (name: string) => ({ name, resource: { name } });

  it('is one object per kind and key in a generation, and the one of a generation before while its resources are the same objects', () => {
    const [x, y] = [cluster('x'), cluster('y')];
    let builds = 0;
    const one = new GenerationContext(snapshotOf(true));
    const layer = one.layer('Cluster', '1', () => (builds++, [x, y]));
    assert.equal(one.layer('Cluster', '1', () => (builds++, [x, y])), layer);
    assert.equal(builds, 1, 'built once per generation');
    assert.deepEqual([...layer.names], ['x', 'y']);
    // A generation that asks for no layer (endpoints only), then one that builds it again.
    const two = new GenerationContext(snapshotOf(true), one);
    const three = new GenerationContext(snapshotOf(true), two);
    assert.equal(three.layer('Cluster', '1', () => [{ ...x }, { ...y }]), layer, 'new wrappers of the same resource objects: the same layer');
    const four = new GenerationContext(snapshotOf(true), three);
    const changed = four.layer('Cluster', '1', () => [x, cluster('y')]);
    assert.notEqual(changed, layer, 'another resource object: a new layer');
    assert.notEqual(four.layer('ClusterLoadAssignment', '1', () => [x, y]), changed, 'kinds are apart');
  });
});
