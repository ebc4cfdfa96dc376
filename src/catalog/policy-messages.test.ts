import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { serviceIdentity } from '../proxy/types.js';
import type { KubeObject } from '../store/objects.js';
import { buildMeshSnapshot } from './build-snapshot.js';
import { formatProblem } from './problems.js';
import { inboundTrafficTargets, outboundServices } from './traffic-policy.js';
import type { MeshSnapshot } from './types.js';

/** The bookstore mesh with TrafficTarget bookstore/bookstore's HTTPRouteGroup rule asking for `matches`. */
function withBookstoreMatches(matches: string[], extra: KubeObject[] = []): KubeObject[] {
  return [
    ...bookstoreMesh().map((o) =>
      o.kind === 'TrafficTarget' && o.metadata.name === 'bookstore'
        ? k8s.trafficTarget('bookstore', 'bookstore', 'bookstore', [{ ns: 'bookbuyer', sa: 'bookbuyer' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes', matches }])
        : o,
    ),
    ...extra,
  ];
}

function build(objects: KubeObject[], previous?: MeshSnapshot, generation = 1) {
  const result = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation, previous });
  return { ...result, texts: result.problems.map(formatProblem) };
}

describe('policy problem messages say what is in force', () => {
  it('a TrafficTarget with a match that does not exist applies without it, and is never called "last valid" later', () => {
    const first = build(withBookstoreMatches(['buy-a-book', 'no-such-match']));
    assert.deepEqual(first.texts, [
      'TrafficTarget bookstore/bookstore: spec.rules[0].matches: HTTPRouteGroup bookstore/bookstore-service-routes has no match "no-such-match"; the TrafficTarget applies without match "no-such-match"',
    ]);
    const tt = first.snapshot.trafficTargets.find((t) => t.name === 'bookstore/bookstore')!;
    assert.deepEqual(tt.httpMatches.map((m) => m.name), ['bookstore/bookstore-service-routes/buy-a-book']);
    // Another TrafficTarget changes: the partly applied one is resolved again; it was never valid.
    const second = build(withBookstoreMatches(['buy-a-book', 'no-such-match'], [
      k8s.trafficTarget('bookstore', 'another', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes', matches: ['books-bought'] }]),
    ]), first.snapshot, 2);
    assert.deepEqual(second.texts, first.texts, 'not "its last valid version stays in force"');
    // An edit of the partly applied TrafficTarget applies (it is not held back at its earlier version).
    const third = build(withBookstoreMatches(['buy-a-book', 'books-bought', 'no-such-match']), second.snapshot, 3);
    assert.deepEqual(third.snapshot.trafficTargets.find((t) => t.name === 'bookstore/bookstore')!.httpMatches.map((m) => m.name), [
      'bookstore/bookstore-service-routes/books-bought',
      'bookstore/bookstore-service-routes/buy-a-book',
    ]);
  });

  it('a TrafficTarget whose only match is a typo grants nothing and is not listed in force', () => {
    const { snapshot, texts } = build(withBookstoreMatches(['buy-a-bok']));
    assert.deepEqual(texts, [
      'TrafficTarget bookstore/bookstore: spec.rules[0].matches: HTTPRouteGroup bookstore/bookstore-service-routes has no match "buy-a-bok"; the TrafficTarget applies without match "buy-a-bok"; it is not in force',
      'TrafficTarget bookstore/bookstore: spec.rules: no valid HTTPRouteGroup match or TCPRoute: the TrafficTarget grants nothing; it is not in force',
    ]);
    assert.equal(snapshot.trafficTargets.find((t) => t.name === 'bookstore/bookstore'), undefined);
    assert.deepEqual(inboundTrafficTargets(snapshot, serviceIdentity('bookstore', 'bookstore')), []);
    assert.deepEqual(
      outboundServices(snapshot, serviceIdentity('bookbuyer', 'bookbuyer')).map((s) => s.name),
      ['bookstore', 'bookstore-v2'],
      'bookbuyer reaches only what bookstore-v2 (backing the bookstore apex too) allows, not bookstore-v1',
    );
  });

  it('a TrafficSplit with a backend that does not exist applies without it on a first load, and keeps its last valid version after an edit', () => {
    const split = (backends: { service: string; weight: number }[]) =>
      bookstoreMesh().map((o) => (o.kind === 'TrafficSplit' && o.metadata.name === 'bookstore-split' ? k8s.trafficSplit('bookstore', 'bookstore-split', 'bookstore', backends) : o));
    const fresh = build(split([{ service: 'bookstore-v1', weight: 50 }, { service: 'bookstore-v3', weight: 50 }]));
    assert.deepEqual(fresh.texts, [
      'TrafficSplit bookstore/bookstore-split: spec.backends[1].service: Service bookstore/bookstore-v3 does not exist; the TrafficSplit applies without this backend',
    ]);
    assert.deepEqual(fresh.snapshot.trafficSplits.find((s) => s.name === 'bookstore/bookstore-split')?.backends, [{ service: 'bookstore-v1', weight: 50 }]);
    const valid = build(split([{ service: 'bookstore-v1', weight: 50 }, { service: 'bookstore-v2', weight: 50 }]));
    const edited = build(split([{ service: 'bookstore-v1', weight: 50 }, { service: 'bookstore-v3', weight: 50 }]), valid.snapshot, 2);
    assert.deepEqual(edited.texts, [
      'TrafficSplit bookstore/bookstore-split: spec.backends[1].service: Service bookstore/bookstore-v3 does not exist; its last valid version stays in force',
    ]);
    assert.deepEqual(edited.snapshot.trafficSplits.find((s) => s.name === 'bookstore/bookstore-split')?.backends, [
      { service: 'bookstore-v1', weight: 50 },
      { service: 'bookstore-v2', weight: 50 },
    ]);
  });

  it('a policy that was never valid is said not to be in force', () => {
    const objects = [...bookstoreMesh(), k8s.trafficSplit('bookstore', 'nowhere', 'no-such-apex', [{ service: 'bookstore-v1', weight: 1 }])];
    const first = build(objects);
    assert.deepEqual(first.texts, ['TrafficSplit bookstore/nowhere: spec.service: Service bookstore/no-such-apex does not exist; it is not in force']);
    assert.deepEqual(build(objects, first.snapshot, 2).texts, first.texts);
  });

  it('warns about a TrafficTarget naming ServiceAccounts that exist nowhere, and keeps it in force', () => {
    const typo = k8s.trafficTarget('bookstore', 'typo', 'bookstor', [{ ns: 'bookbuyer', sa: 'bookbuyr' }, { ns: 'bookbuyer', sa: 'bookbuyer' }], [
      { kind: 'HTTPRouteGroup', name: 'bookstore-service-routes', matches: ['buy-a-book'] },
    ]);
    const { snapshot, texts } = build([...bookstoreMesh(), typo]);
    assert.deepEqual(texts, [
      'TrafficTarget bookstore/typo: spec.destination.name: ServiceAccount bookstore/bookstor exists nowhere (no ServiceAccount object, no workload runs as it); the TrafficTarget applies once it does',
      'TrafficTarget bookstore/typo: spec.sources: ServiceAccount bookbuyer/bookbuyr exists nowhere (no ServiceAccount object, no workload runs as it); the source applies once it does',
    ]);
    assert.ok(snapshot.trafficTargets.some((t) => t.name === 'bookstore/typo'));
  });

  it('warns when --mesh-name matches no namespace', () => {
    const { snapshot, problems } = buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm-typo', generation: 1 });
    assert.deepEqual(snapshot.services, []);
    assert.deepEqual(problems.map(formatProblem), [
      'Mesh osm-typo: --mesh-name: no namespace is labelled openservicemesh.io/monitored-by=osm-typo: the mesh has no services (label one with `trellis namespace add NS --mesh-name osm-typo`)',
    ]);
  });
});
