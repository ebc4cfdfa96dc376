import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bookstoreMesh } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { serviceIdentity } from '../proxy/types.js';
import type { KubeObject } from '../store/objects.js';
import { ObjectStore } from '../store/object-store.js';
import { buildMeshSnapshot, MeshSnapshotBuilder } from './build-snapshot.js';
import { findMeshService, inboundTrafficTargets, meshServicePorts, outboundServices, trafficSplitFor } from './traffic-policy.js';

const BOOKBUYER = serviceIdentity('bookbuyer', 'bookbuyer');
const names = (services: readonly { namespace: string; name: string; port: number }[]) => services.map((s) => `${s.namespace}/${s.name}:${s.port}`);

describe('the MeshSnapshot index (traffic-policy queries)', () => {
  it('is built with the snapshot, and a rebuild that changed no service or policy keeps its tables', () => {
    const store = new ObjectStore();
    store.replaceAll('test', bookstoreMesh());
    const builder = new MeshSnapshotBuilder();
    const first = builder.build(store, { meshName: 'osm', generation: 1 }).snapshot;
    assert.equal(first.index.services, first.services);
    assert.equal(first.index.trafficTargets, first.trafficTargets);
    // Only a pod's address changes: the same services and policies, the same tables.
    store.replaceAll('test', bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookwarehouse-1' ? ({ ...o, status: { podIP: '10.9.9.9', phase: 'Running' } } as KubeObject) : o)));
    const second = builder.build(store, { meshName: 'osm', generation: 2, previous: first }).snapshot;
    assert.notEqual(second.index, first.index);
    assert.equal(second.index.services, second.services, 'it names the new snapshot\'s list');
    for (const table of ['servicesByKey', 'order', 'targetsBySource', 'targetsByDestination', 'splitsByApex'] as const) {
      assert.equal(second.index[table], first.index[table], `${table} is the previous snapshot's`);
    }
    // The TrafficTarget to bookstore goes: indexed again, and answered from the new tables.
    store.replaceAll('test', bookstoreMesh().filter((o) => !(o.kind === 'TrafficTarget' && o.metadata.name === 'bookstore')));
    const third = builder.build(store, { meshName: 'osm', generation: 3, previous: second }).snapshot;
    assert.notEqual(third.index.targetsBySource, second.index.targetsBySource);
    assert.deepEqual(names(outboundServices(third, BOOKBUYER)), names(outboundServices(buildMeshSnapshot(store, { meshName: 'osm', generation: 3 }).snapshot, BOOKBUYER)));
  });

  it('answers a copy of a snapshot that has other lists from those lists, never from the index it copied', () => {
    const { snapshot } = buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm', generation: 1 });
    assert.ok(outboundServices(snapshot, BOOKBUYER).some((s) => s.name === 'bookstore-v2'));
    const services = snapshot.services.filter((s) => s.name !== 'bookstore-v2');
    const copy = { ...snapshot, services, trafficTargets: [], trafficSplits: [] };
    assert.deepEqual(outboundServices(copy, BOOKBUYER), [], 'no TrafficTarget: nothing is reached');
    assert.deepEqual(inboundTrafficTargets(copy, serviceIdentity('bookstore', 'bookstore')), []);
    assert.deepEqual(meshServicePorts(copy, 'bookstore', 'bookstore-v2'), []);
    assert.equal(findMeshService(copy, 'bookstore', 'bookstore-v2', 14001), undefined);
    assert.equal(trafficSplitFor(copy, { namespace: 'bookstore', name: 'bookstore' }), undefined);
    assert.ok(trafficSplitFor(snapshot, { namespace: 'bookstore', name: 'bookstore' }), 'the original is unchanged');
  });
});
