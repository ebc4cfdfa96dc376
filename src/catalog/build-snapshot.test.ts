import assert from 'node:assert/strict';
import { beforeEach, describe, it } from 'node:test';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { serviceIdentity } from '../proxy/types.js';
import type { KubeObject, Service } from '../store/objects.js';
import { buildMeshSnapshot, MeshSnapshotBuilder, parseGoDuration, portProtocol } from './build-snapshot.js';
import { formatProblem } from './problems.js';
import { outboundServices } from './traffic-policy.js';
import { diffMeshSnapshots } from './snapshot-diff.js';
import type { MeshSnapshot } from './types.js';
import { ObjectStore } from '../store/object-store.js';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

setFlagsFromString('--expose-gc');
/** A full garbage collection (V8's `gc`, exposed at run time). */
const collectGarbage = runInNewContext('gc') as () => void;

function build(objects: KubeObject[]) {
  return buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 7 });
}

describe('portProtocol', () => {
  const table: [Parameters<typeof portProtocol>[0], string][] = [
    [{ appProtocol: 'tcp', name: 'http-x' }, 'tcp'],
    [{ appProtocol: 'gRPC' }, 'grpc'],
    [{ name: 'http-web' }, 'http'],
    [{ name: 'tcp-db' }, 'tcp'],
    [{ name: 'grpc-api' }, 'grpc'],
    [{ name: 'tcp-server-first-smtp' }, 'tcp-server-first'],
    [{ name: 'bookstore-port' }, 'http'],
    [{}, 'http'],
  ];
  for (const [port, want] of table) it(`${JSON.stringify(port)} → ${want}`, () => assert.equal(portProtocol(port), want));
});

describe('parseGoDuration', () => {
  it('parses hours, minutes, seconds and combinations', () => {
    assert.equal(parseGoDuration('24h'), 86400);
    assert.equal(parseGoDuration('1h30m'), 5400);
    assert.equal(parseGoDuration('90s'), 90);
    assert.equal(parseGoDuration('1500ms'), 1.5);
    assert.equal(parseGoDuration('tomorrow'), undefined);
    assert.equal(parseGoDuration(''), undefined);
  });
});

describe('buildMeshSnapshot', () => {
  it('keeps only services of monitored namespaces, one MeshService per TCP port', () => {
    const { snapshot } = build(bookstoreMesh());
    assert.equal(snapshot.generation, 7);
    assert.deepEqual([...snapshot.namespaces].sort(), ['bookbuyer', 'bookstore', 'bookthief', 'bookwarehouse']);
    assert.deepEqual(
      snapshot.services.map((s) => `${s.namespace}/${s.name}:${s.port}/${s.protocol}`),
      [
        'bookstore/bookstore:14001/http',
        'bookstore/bookstore-v1:14001/http',
        'bookstore/bookstore-v2:14001/http',
        'bookwarehouse/bookwarehouse:14001/http',
        'bookwarehouse/mysql:3306/tcp',
      ],
    );
    const mysql = snapshot.services.find((s) => s.name === 'mysql')!;
    assert.equal(mysql.headless, true);
    assert.deepEqual(mysql.clusterIPs, []);
  });

  it('derives identities from the pods behind each service', () => {
    const { snapshot } = build(bookstoreMesh());
    assert.deepEqual(snapshot.identitiesByService.get('bookstore/bookstore'), [
      serviceIdentity('bookstore', 'bookstore'),
      serviceIdentity('bookstore', 'bookstore-v2'),
    ]);
    assert.deepEqual(snapshot.servicesByIdentity.get(serviceIdentity('bookstore', 'bookstore-v2')), ['bookstore/bookstore', 'bookstore/bookstore-v2']);
  });

  it('prefers Endpoints objects over pods, matching ports by name', () => {
    const objects = bookstoreMesh();
    objects.push({
      apiVersion: 'v1',
      kind: 'Endpoints',
      metadata: { name: 'bookwarehouse', namespace: 'bookwarehouse' },
      subsets: [{ addresses: [{ ip: '10.1.1.1' }, { ip: 'not-an-ip' }], ports: [{ name: 'bookwarehouse-port', port: 8080 }] }],
    });
    const { snapshot } = build(objects);
    assert.deepEqual(snapshot.endpoints.get('bookwarehouse/bookwarehouse|14001'), [{ ip: '10.1.1.1', port: 8080 }]);
  });

  it('reads EndpointSlices by the kubernetes.io/service-name label and skips unready endpoints', () => {
    const objects = bookstoreMesh();
    objects.push({
      apiVersion: 'discovery.k8s.io/v1',
      kind: 'EndpointSlice',
      metadata: { name: 'bookwarehouse-abc', namespace: 'bookwarehouse', labels: { 'kubernetes.io/service-name': 'bookwarehouse' } },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['10.2.2.2'] }, { addresses: ['10.2.2.3'], conditions: { ready: false } }],
      ports: [{ name: 'bookwarehouse-port', port: 14001 }],
    });
    const { snapshot } = build(objects);
    assert.deepEqual(snapshot.endpoints.get('bookwarehouse/bookwarehouse|14001'), [{ ip: '10.2.2.2', port: 14001 }]);
  });

  it('is permissive without a MeshConfig, and SMI with permissive mode off', () => {
    const none = build(bookstoreMesh().filter((o) => o.kind !== 'MeshConfig')).snapshot;
    assert.equal(none.settings.permissiveTrafficPolicyMode, true);
    assert.equal(none.meshConfig, undefined, 'OSM defaults: no MeshConfig seen');
    assert.equal(build(bookstoreMesh()).snapshot.settings.permissiveTrafficPolicyMode, false);
  });

  it('keeps the last MeshConfig settings when the MeshConfig is deleted: a deletion never opens the mesh', () => {
    const first = build(bookstoreMesh()).snapshot;
    assert.deepEqual(first.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: false });
    const without = bookstoreMesh().filter((o) => o.kind !== 'MeshConfig');
    const { snapshot, problems } = buildMeshSnapshot(memoryStore(without), { meshName: 'osm', generation: 8, previous: first });
    assert.equal(snapshot.settings.permissiveTrafficPolicyMode, false);
    assert.equal(snapshot.settings, first.settings);
    assert.deepEqual(snapshot.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: true });
    assert.deepEqual(problems.map((p) => `${p.kind} ${p.namespace}/${p.name} ${p.field}`), ['MeshConfig osm-system/osm-mesh-config metadata']);
    assert.match(problems[0].message, /^was deleted; its last settings stay in force \(permissive mode off\)/);
    assert.deepEqual(outboundServices(snapshot, serviceIdentity('bookthief', 'bookthief')), [], 'bookthief still reaches nothing');
    // Still deleted at the next build (carried snapshot to snapshot), and back once it is created again.
    const later = buildMeshSnapshot(memoryStore(without), { meshName: 'osm', generation: 9, previous: snapshot });
    assert.equal(later.snapshot.settings.permissiveTrafficPolicyMode, false);
    assert.equal(later.problems.length, 1);
    const back = buildMeshSnapshot(memoryStore(bookstoreMesh().map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(true) : o))), { meshName: 'osm', generation: 10, previous: later.snapshot });
    assert.equal(back.snapshot.settings.permissiveTrafficPolicyMode, true);
    assert.deepEqual(back.problems, []);
  });

  it('keeps permissive mode off while the MeshConfig could not be loaded since the start: an unreadable MeshConfig never opens the mesh', () => {
    const without = memoryStore(bookstoreMesh().filter((o) => o.kind !== 'MeshConfig'));
    const unreadable = 'meshconfig.yaml:11: MeshConfig osm-system/osm-mesh-config: spec.certificate.certKeyBitSize: is required';
    const first = buildMeshSnapshot(without, { meshName: 'osm', generation: 1, meshConfigUnreadable: unreadable });
    assert.equal(first.snapshot.settings.permissiveTrafficPolicyMode, false);
    assert.deepEqual(first.snapshot.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: false, unreadable });
    assert.deepEqual(first.problems.map(formatProblem), [
      `MeshConfig osm-system/osm-mesh-config: metadata: could not be loaded (${unreadable}); permissive mode is off (an unreadable MeshConfig never opens the mesh) and the other settings are the defaults until a valid version is loaded`,
    ]);
    assert.deepEqual(outboundServices(first.snapshot, serviceIdentity('bookthief', 'bookthief')), [], 'bookthief reaches nothing');
    // Still unreadable at the next build; once it loads, its settings; gone instead, OSM's defaults.
    const later = buildMeshSnapshot(without, { meshName: 'osm', generation: 2, previous: first.snapshot, meshConfigUnreadable: unreadable });
    assert.equal(later.snapshot.settings.permissiveTrafficPolicyMode, false);
    const loaded = buildMeshSnapshot(memoryStore(bookstoreMesh().map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(true) : o))), { meshName: 'osm', generation: 3, previous: later.snapshot });
    assert.equal(loaded.snapshot.settings.permissiveTrafficPolicyMode, true);
    assert.deepEqual(loaded.snapshot.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: false });
    const removed = buildMeshSnapshot(without, { meshName: 'osm', generation: 3, previous: later.snapshot });
    assert.equal(removed.snapshot.settings.permissiveTrafficPolicyMode, true);
    assert.equal(removed.snapshot.meshConfig, undefined);
    // A valid version loaded once and then broken: the store keeps it (its last valid version); the
    // source's error does not matter then.
    const valid = buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm', generation: 4, previous: later.snapshot, meshConfigUnreadable: unreadable });
    assert.equal(valid.snapshot.settings.permissiveTrafficPolicyMode, false);
    assert.deepEqual(valid.problems, []);
    // A mesh that started without any MeshConfig (OSM's defaults) keeps them when a broken one appears later.
    const none = build(bookstoreMesh().filter((o) => o.kind !== 'MeshConfig')).snapshot;
    const broken = buildMeshSnapshot(without, { meshName: 'osm', generation: 8, previous: none, meshConfigUnreadable: unreadable });
    assert.equal(broken.snapshot.settings.permissiveTrafficPolicyMode, true);
  });

  it('reads only the MeshConfig of its name and namespace, and reports another one', () => {
    const objects = bookstoreMesh().filter((o) => o.kind !== 'MeshConfig');
    const elsewhere = { ...k8s.meshConfig(true), metadata: { name: 'osm-mesh-config', namespace: 'default' } };
    const renamed = { ...k8s.meshConfig(true), metadata: { name: 'my-mesh-config', namespace: 'osm-system' } };
    const { snapshot, problems } = build([...objects, elsewhere, renamed, k8s.meshConfig(false)]);
    assert.equal(snapshot.settings.permissiveTrafficPolicyMode, false, 'the others are ignored');
    assert.deepEqual(
      problems.map((p) => `${p.kind} ${p.namespace}/${p.name}: ${p.message}`),
      [
        'MeshConfig default/osm-mesh-config: is not the MeshConfig this controller reads (osm-system/osm-mesh-config); ignored',
        'MeshConfig osm-system/my-mesh-config: is not the MeshConfig this controller reads (osm-system/osm-mesh-config); ignored',
      ],
    );
    const own = buildMeshSnapshot(memoryStore([...objects, elsewhere]), { meshName: 'osm', generation: 1, meshConfig: { namespace: 'default', name: 'osm-mesh-config' } });
    assert.equal(own.snapshot.settings.permissiveTrafficPolicyMode, true, 'a controller in namespace default reads that one');
    assert.deepEqual(own.problems, []);
  });

  it('keeps permissive mode off while only a misnamed MeshConfig exists, and after it is deleted, until the one it reads exists', () => {
    const objects = bookstoreMesh().filter((o) => o.kind !== 'MeshConfig');
    const typo = { ...k8s.meshConfig(true), metadata: { name: 'osm-mesh-confg', namespace: 'osm-system' } };
    const first = build([...objects, typo]);
    assert.equal(first.snapshot.settings.permissiveTrafficPolicyMode, false);
    assert.deepEqual(first.snapshot.meshConfig, { name: 'osm-system/osm-mesh-config', deleted: false, misnamed: true });
    assert.deepEqual(
      first.problems.map((p) => `${p.kind} ${p.namespace}/${p.name}: ${p.message}`),
      [
        'MeshConfig osm-system/osm-mesh-confg: is not the MeshConfig this controller reads (osm-system/osm-mesh-config); ignored',
        'MeshConfig osm-system/osm-mesh-config: does not exist (MeshConfig osm-system/osm-mesh-confg is not it); permissive mode is off (a misnamed MeshConfig never opens the mesh) and the other settings are the defaults until osm-system/osm-mesh-config exists',
      ],
    );
    assert.deepEqual(outboundServices(first.snapshot, serviceIdentity('bookthief', 'bookthief')), [], 'bookthief reaches nothing');
    const deleted = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 2, previous: first.snapshot });
    assert.equal(deleted.snapshot.settings.permissiveTrafficPolicyMode, false, 'deleting the typo does not open the mesh');
    assert.match(deleted.problems[0]?.message ?? '', /^does not exist, and a MeshConfig of another name did; permissive mode is off/);
    const fixed = buildMeshSnapshot(memoryStore([...objects, k8s.meshConfig(true)]), { meshName: 'osm', generation: 3, previous: deleted.snapshot });
    assert.equal(fixed.snapshot.settings.permissiveTrafficPolicyMode, true, 'the MeshConfig it reads says permissive');
    assert.deepEqual(fixed.problems, []);
  });

  it('lets a source reach only what TrafficTargets allow', () => {
    const { snapshot } = build(bookstoreMesh());
    const reach = (ns: string, sa: string) => outboundServices(snapshot, serviceIdentity(ns, sa)).map((s) => `${s.namespace}/${s.name}`);
    assert.deepEqual(reach('bookbuyer', 'bookbuyer'), ['bookstore/bookstore', 'bookstore/bookstore-v1', 'bookstore/bookstore-v2']);
    assert.deepEqual(reach('bookthief', 'bookthief'), []);
    assert.deepEqual(reach('bookwarehouse', 'bookwarehouse'), ['bookwarehouse/mysql']);
    assert.deepEqual(reach('bookstore', 'bookstore'), ['bookwarehouse/bookwarehouse']);
  });

  it('reports policies that reference missing objects and skips them', () => {
    const objects = bookstoreMesh();
    objects.push(
      k8s.trafficTarget('bookstore', 'broken', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [
        { kind: 'HTTPRouteGroup', name: 'no-such-routes' },
      ]),
      k8s.trafficSplit('bookstore', 'bad-split', 'nosuch.bookstore', [{ service: 'bookstore-v1', weight: 1 }]),
      k8s.trafficSplit('bookwarehouse', 'partial', 'bookwarehouse', [
        { service: 'ghost', weight: 10 },
        { service: 'bookwarehouse', weight: 5 },
      ]),
    );
    const { snapshot, problems } = build(objects);
    assert.deepEqual(
      problems.map((p) => `${p.kind} ${p.namespace}/${p.name} ${p.field}`),
      [
        'TrafficTarget bookstore/broken spec.rules[0].name',
        'TrafficSplit bookstore/bad-split spec.service',
        'TrafficSplit bookwarehouse/partial spec.backends[0].service',
      ],
    );
    assert.deepEqual(outboundServices(snapshot, serviceIdentity('bookthief', 'bookthief')), [], 'the broken target grants nothing');
    assert.deepEqual(snapshot.trafficSplits.find((s) => s.name === 'bookwarehouse/partial')?.backends, [{ service: 'bookwarehouse', weight: 5 }]);
  });

  it('skips HTTPRouteGroup matches Envoy would reject, keeping the valid ones', () => {
    const objects = bookstoreMesh().filter((o) => !(o.kind === 'HTTPRouteGroup' && o.metadata.name === 'bookstore-service-routes'));
    objects.push(
      k8s.httpRouteGroup('bookstore', 'bookstore-service-routes', [
        { name: 'books-bought', pathRegex: '/books(?=-bought)', methods: ['GET'] },
        { name: 'buy-a-book', pathRegex: '.*a-book.*new', methods: ['GET'], headers: [{ 'client app': 'x' }] },
        { name: 'empty-header', headers: [{ 'x-user': '' }] },
        { name: 'open-paren', pathRegex: '/books([' },
        { name: 'fine', pathRegex: '/fine' },
        { name: 'too-many', pathRegex: '/x{1001}' },
        { name: 'end-of-text', pathRegex: '/books\\Z' },
        { name: 'named-backreference', pathRegex: '(?P<n>a)\\k<n>' },
      ]),
    );
    objects.push(
      k8s.trafficTarget('bookstore', 'all-routes', 'bookstore', [{ ns: 'bookbuyer', sa: 'bookbuyer' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }]),
    );
    const { snapshot, problems } = build(objects);
    assert.deepEqual(
      [...new Set(problems.map((p) => `${p.kind} ${p.name} ${p.field}`))],
      [
        'HTTPRouteGroup bookstore-service-routes spec.matches[0].pathRegex',
        'HTTPRouteGroup bookstore-service-routes spec.matches[1].headers.client app',
        'HTTPRouteGroup bookstore-service-routes spec.matches[2].headers.x-user',
        'HTTPRouteGroup bookstore-service-routes spec.matches[3].pathRegex',
        'HTTPRouteGroup bookstore-service-routes spec.matches[5].pathRegex',
        'HTTPRouteGroup bookstore-service-routes spec.matches[6].pathRegex',
        'HTTPRouteGroup bookstore-service-routes spec.matches[7].pathRegex',
        // Their only matches (buy-a-book, books-bought) are the invalid ones: they grant nothing.
        'TrafficTarget bookstore spec.rules',
        'TrafficTarget bookstore-v2 spec.rules',
      ],
    );
    assert.equal(new Set(problems.map(formatProblem)).size, problems.length, 'each problem once, though three TrafficTargets name the group');
    const allRoutes = snapshot.trafficTargets.find((t) => t.name === 'bookstore/all-routes')!;
    assert.deepEqual(allRoutes.httpMatches.map((m) => m.name), ['bookstore/bookstore-service-routes/fine']);
  });

  it('rejects TrafficSplit weights that overflow Envoy\'s uint32 total_weight', () => {
    const { snapshot, problems } = build(bookstoreMesh({ split: [3_000_000_000, 3_000_000_000] }));
    assert.deepEqual(problems.map((p) => `${p.kind} ${p.field}`), ['TrafficSplit spec.backends']);
    assert.deepEqual(snapshot.trafficSplits, []);
  });

  it('keeps the last valid version of a policy whose reference breaks, and says so', () => {
    const first = build(bookstoreMesh()).snapshot;
    const broken = bookstoreMesh().map((o) =>
      o.kind === 'TrafficTarget' && o.metadata.name === 'bookstore'
        ? { ...o, spec: { ...(o.spec as object), rules: [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routs' }] } }
        : o,
    );
    const { snapshot, problems } = buildMeshSnapshot(memoryStore(broken), { meshName: 'osm', generation: 2, previous: first });
    assert.equal(problems.length, 1);
    assert.match(problems[0].message, /does not exist; its last valid version stays in force$/);
    const kept = snapshot.trafficTargets.find((t) => t.name === 'bookstore/bookstore');
    assert.deepEqual(kept, first.trafficTargets.find((t) => t.name === 'bookstore/bookstore'));
    assert.deepEqual(
      outboundServices(snapshot, serviceIdentity('bookbuyer', 'bookbuyer')).map((s) => s.name),
      ['bookstore', 'bookstore-v1', 'bookstore-v2'],
    );
    const deleted = bookstoreMesh().filter((o) => !(o.kind === 'TrafficTarget' && o.metadata.name === 'bookstore'));
    const after = buildMeshSnapshot(memoryStore(deleted), { meshName: 'osm', generation: 3, previous: snapshot }).snapshot;
    assert.equal(after.trafficTargets.find((t) => t.name === 'bookstore/bookstore'), undefined, 'a deleted policy is gone');
  });

  it('reports a ClusterIP used by two services and keeps it for the first', () => {
    const objects = bookstoreMesh();
    objects.push(k8s.service('bookwarehouse', 'copycat', { app: 'bookwarehouse' }, [{ port: 80 }], '10.96.0.20'));
    const { snapshot, problems } = build(objects);
    assert.deepEqual(problems.map((p) => `${p.kind} ${p.namespace}/${p.name} ${p.field}`), ['Service bookwarehouse/copycat spec.clusterIP']);
    assert.deepEqual(snapshot.services.find((s) => s.name === 'copycat')?.clusterIPs, []);
    assert.deepEqual(snapshot.services.find((s) => s.name === 'bookwarehouse')?.clusterIPs, ['10.96.0.20']);
  });
});


describe('MeshSnapshotBuilder on a changing ObjectStore (what a rebuild reuses)', () => {
  const SOURCE = 'test';
  function storeWith(objects: KubeObject[]): ObjectStore {
    const store = new ObjectStore();
    store.replaceAll(SOURCE, objects);
    return store;
  }
  let builder = new MeshSnapshotBuilder();
  beforeEach(() => {
    builder = new MeshSnapshotBuilder();
  });
  const rebuild = (store: ObjectStore, previous: MeshSnapshot, generation: number) =>
    builder.build(store, { meshName: 'osm', generation, previous });
  const movePod = (name: string, ip: string) =>
    bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === name ? { ...o, status: { podIP: ip, phase: 'Running' as const } } : o));

  it('keeps the MeshService and endpoint objects of services whose inputs did not change', () => {
    const store = storeWith(bookstoreMesh());
    const first = builder.build(store, { meshName: 'osm', generation: 1 }).snapshot;
    store.replaceAll(SOURCE, movePod('bookwarehouse-1', '10.9.9.9'));
    const second = rebuild(store, first, 2).snapshot;
    const warehouse = '10.9.9.9';
    assert.deepEqual(second.endpoints.get('bookwarehouse/bookwarehouse|14001')?.map((e) => e.ip), [warehouse]);
    for (const [i, svc] of second.services.entries()) {
      // The rebuilt snapshot shares every unchanged service with the previous one, by identity.
      assert.equal(svc, first.services[i], `${svc.namespace}/${svc.name} is the same object`);
      const cluster = `${svc.namespace}/${svc.name}|${svc.targetPort}`;
      if (svc.name === 'bookwarehouse') assert.notEqual(second.endpoints.get(cluster), first.endpoints.get(cluster));
      else assert.equal(second.endpoints.get(cluster), first.endpoints.get(cluster), `${cluster} endpoints are the same array`);
    }
    assert.equal(second.trafficTargets[0], first.trafficTargets[0], 'TrafficTargets are not resolved again when no policy changed');
    const change = diffMeshSnapshots(first, second);
    assert.deepEqual(change !== 'all' && [...change.services], ['bookwarehouse/bookwarehouse']);
  });

  it('resolves again what a changed policy or service touches, and reports its problems on every build', () => {
    const store = storeWith([...bookstoreMesh(), k8s.trafficTarget('bookstore', 'broken', 'bookstore', [{ ns: 'bookbuyer', sa: 'bookbuyer' }], [{ kind: 'HTTPRouteGroup', name: 'missing' }])]);
    const first = builder.build(store, { meshName: 'osm', generation: 1 });
    const problem = (r: { problems: readonly { kind: string; name: string; field?: string }[] }) =>
      r.problems.filter((p) => p.kind === 'TrafficTarget' && p.name === 'broken').map((p) => p.field);
    assert.deepEqual(problem(first), ['spec.rules[0].name']);
    // An unrelated change: the TrafficTargets are reused, and their problem is still reported.
    store.replaceAll(SOURCE, [...movePod('bookwarehouse-1', '10.9.9.9'), k8s.trafficTarget('bookstore', 'broken', 'bookstore', [{ ns: 'bookbuyer', sa: 'bookbuyer' }], [{ kind: 'HTTPRouteGroup', name: 'missing' }])]);
    const second = rebuild(store, first.snapshot, 2);
    assert.deepEqual(problem(second), ['spec.rules[0].name']);
    // The policy is fixed: resolved again, problem gone, bookbuyer's access unchanged.
    store.replaceAll(SOURCE, movePod('bookwarehouse-1', '10.9.9.9'));
    const third = rebuild(store, second.snapshot, 3);
    assert.deepEqual(problem(third), []);
    assert.deepEqual(
      outboundServices(third.snapshot, serviceIdentity('bookbuyer', 'bookbuyer')).map((s) => s.name).sort(),
      outboundServices(first.snapshot, serviceIdentity('bookbuyer', 'bookbuyer')).map((s) => s.name).sort(),
    );
    // A Service whose ports change gets new MeshService objects.
    store.replaceAll(SOURCE, movePod('bookwarehouse-1', '10.9.9.9').map((o) =>
      o.kind === 'Service' && o.metadata.name === 'bookwarehouse' ? ({ ...o, spec: { ...(o as Service).spec, ports: [{ port: 14002, name: 'http' }] } } as KubeObject) : o,
    ));
    const fourth = rebuild(store, third.snapshot, 4).snapshot;
    assert.deepEqual(fourth.services.filter((s) => s.name === 'bookwarehouse').map((s) => s.port), [14002]);
    const change = diffMeshSnapshots(third.snapshot, fourth);
    assert.deepEqual(change !== 'all' && [...change.services], ['bookwarehouse/bookwarehouse'], 'the re-ported service');
  });

  it('keeps the policy objects of TrafficTargets whose content did not change when another TrafficTarget changes', () => {
    const extra = (sources: { ns: string; sa: string }[]) => k8s.trafficTarget('bookwarehouse', 'extra', 'bookwarehouse', sources, [{ kind: 'TCPRoute', name: 'mysql' }]);
    const store = storeWith([...bookstoreMesh(), extra([{ ns: 'bookstore', sa: 'bookstore' }])]);
    const first = builder.build(store, { meshName: 'osm', generation: 1 }).snapshot;
    store.replaceAll(SOURCE, [...bookstoreMesh(), extra([{ ns: 'bookthief', sa: 'bookthief' }])]);
    const second = rebuild(store, first, 2).snapshot;
    assert.notEqual(second.trafficTargets, first.trafficTargets);
    for (const tt of second.trafficTargets) {
      const before = first.trafficTargets.find((t) => t.name === tt.name)!;
      if (tt.name === 'bookwarehouse/extra') assert.notEqual(tt, before, 'the changed one is new');
      else assert.equal(tt, before, `${tt.name}: the same object`);
    }
  });

  it('keeps nothing outside a builder: one-off builds of one store, and two builders, share no object', () => {
    const store = storeWith(bookstoreMesh());
    const options = { meshName: 'osm', generation: 1 };
    const pairs = [
      [buildMeshSnapshot(store, options).snapshot, buildMeshSnapshot(store, options).snapshot],
      [new MeshSnapshotBuilder().build(store, options).snapshot, new MeshSnapshotBuilder().build(store, options).snapshot],
    ];
    for (const [a, b] of pairs) {
      assert.deepEqual(b.services, a.services);
      for (const [i, svc] of b.services.entries()) assert.notEqual(svc, a.services[i], `${svc.namespace}/${svc.name}: a MeshService of another build`);
      for (const [cluster, list] of b.endpoints) assert.notEqual(list, a.endpoints.get(cluster), `${cluster}: endpoints of another build`);
    }
  });

  it('forgets a namespace that left the mesh: what it keeps is bounded by its last build', async () => {
    const store = storeWith(bookstoreMesh());
    let first: MeshSnapshot | undefined = builder.build(store, { meshName: 'osm', generation: 1 }).snapshot;
    let warehouse: Service | undefined = store.list<Service>('Service', 'bookwarehouse')[0];
    assert.ok(warehouse);
    const resolved = new WeakRef(warehouse);
    warehouse = undefined;
    store.replaceAll(SOURCE, bookstoreMesh().filter((o) => o.metadata.namespace !== 'bookwarehouse' && !(o.kind === 'Namespace' && o.metadata.name === 'bookwarehouse')));
    const second = rebuild(store, first, 2).snapshot;
    first = undefined;
    assert.deepEqual([...second.namespaces].sort(), ['bookbuyer', 'bookstore', 'bookthief']);
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    assert.equal(resolved.deref(), undefined, 'the Service of the namespace that went away is not kept');
  });

  it('builds with a previous snapshot it did not build (another builder\'s) what a one-off build gives', () => {
    const store = storeWith(bookstoreMesh());
    const elsewhere = buildMeshSnapshot(store, { meshName: 'osm', generation: 1 }).snapshot;
    builder.build(store, { meshName: 'osm', generation: 1 });
    store.replaceAll(SOURCE, movePod('bookwarehouse-1', '10.9.9.9'));
    const got = rebuild(store, elsewhere, 2);
    const want = buildMeshSnapshot(store, { meshName: 'osm', generation: 2, previous: elsewhere });
    assert.deepEqual(got.snapshot, want.snapshot);
    assert.deepEqual(got.problems, want.problems);
  });
});

describe('buildMeshSnapshot sidecar ports', () => {
  it('warns of a Service port, targetPort or meshed container port that is one of the sidecar\'s, naming object and field', () => {
    const { snapshot, problems } = build([
      k8s.namespace('app'),
      k8s.namespace('outside', 'other-mesh'),
      k8s.service('app', 'admin', { app: 'a' }, [{ name: 'http', port: 15000, targetPort: 8080 }], '10.96.0.1'),
      k8s.service('app', 'web', { app: 'a' }, [{ name: 'http', port: 80, targetPort: 15010 }], '10.96.0.2'),
      k8s.pod('app', 'a-1', 'a', { app: 'a' }, '10.244.0.1', [8080, 15001]),
      k8s.pod('outside', 'o-1', 'o', { app: 'o' }, '10.244.0.2', [15001]),
    ]);
    assert.deepEqual(problems.map(formatProblem).filter((p) => p.includes('port of the sidecar')).map((p) => p.split(' is a port')[0]), [
      'Service app/admin: spec.ports[0].port: 15000',
      'Service app/web: spec.ports[0].targetPort: 15010',
      'Pod app/a-1: spec.containers[0].ports[1].containerPort: 15001',
    ]);
    // A warning: the service is still in the mesh.
    assert.ok(snapshot.services.some((s) => s.name === 'admin' && s.port === 15000));
  });
});

describe('buildMeshSnapshot special addresses', () => {
  it('never makes a loopback pod IP, or an unspecified, link-local or multicast address an endpoint', () => {
    const endpoints = (slice: string[]): KubeObject => ({
      apiVersion: 'discovery.k8s.io/v1', kind: 'EndpointSlice', metadata: { name: 'b-1', namespace: 'app', labels: { 'kubernetes.io/service-name': 'b' } },
      addressType: 'IPv4', endpoints: [{ addresses: slice }], ports: [{ port: 8080 }],
    } as unknown as KubeObject);
    const { snapshot } = build([
      k8s.namespace('app'),
      k8s.service('app', 'a', { app: 'a' }, [{ name: 'http', port: 80, targetPort: 8080 }], '10.96.0.1'),
      k8s.pod('app', 'a-1', 'a', { app: 'a' }, '127.0.0.1', [8080]),
      k8s.pod('app', 'a-2', 'a', { app: 'a' }, '10.244.0.2', [8080]),
      k8s.service('app', 'b', { app: 'b' }, [{ name: 'http', port: 80, targetPort: 8080 }], '10.96.0.2'),
      endpoints(['0.0.0.0', '169.254.0.1', '224.0.0.1', '10.244.0.3']),
    ]);
    assert.deepEqual([...snapshot.endpoints.entries()].map(([c, list]) => `${c}=${list.map((e) => e.ip).join(',')}`).sort(), [
      'app/a|8080=10.244.0.2', 'app/b|8080=10.244.0.3',
    ]);
  });
});
