import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import type { KubeObject } from '../store/objects.js';
import { buildMeshSnapshot } from './build-snapshot.js';
import { diffMeshSnapshots, onlyEndpointsChanged, onlySplitWeightsChanged, type MeshChange } from './snapshot-diff.js';

const build = (objects: KubeObject[]) => buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 }).snapshot;
const withPodIp = (name: string, ip: string) =>
  bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === name ? { ...o, status: { podIP: ip, phase: 'Running' } } : o));

/** A change as plain sorted lists, for deepEqual. */
export const plainChange = (d: 'all' | MeshChange) =>
  d === 'all' ? 'all' : { services: [...d.services].sort(), identities: [...d.identities].sort(), servicesChanged: d.servicesChanged };
const none = { services: [], identities: [], servicesChanged: false };

describe('diffMeshSnapshots', () => {
  it('names only the service whose endpoints changed', () => {
    assert.deepEqual(plainChange(diffMeshSnapshots(build(bookstoreMesh()), build(withPodIp('bookwarehouse-1', '10.9.9.9')))), {
      ...none,
      services: ['bookwarehouse/bookwarehouse'],
    });
  });

  it('names a split apex whose weights changed, and its backends (their proxies serve the apex names)', () => {
    assert.deepEqual(plainChange(diffMeshSnapshots(build(bookstoreMesh()), build(bookstoreMesh({ split: [90, 10] })))), {
      ...none,
      services: ['bookstore/bookstore', 'bookstore/bookstore-v1', 'bookstore/bookstore-v2'],
    });
  });

  it('is empty when nothing a proxy uses changed', () => {
    assert.deepEqual(plainChange(diffMeshSnapshots(build(bookstoreMesh()), build(bookstoreMesh()))), none);
  });

  it('is "all" for mesh-wide changes: settings, a service added in permissive mode', () => {
    const base = build(bookstoreMesh());
    assert.equal(diffMeshSnapshots(base, build(bookstoreMesh({ permissive: true }))), 'all');
    const permissive = build(bookstoreMesh({ permissive: true }));
    assert.equal(diffMeshSnapshots(permissive, build([...bookstoreMesh({ permissive: true }), k8s.service('bookstore', 'new', { app: 'new' }, [{ port: 80 }], '10.96.1.1')])), 'all');
  });

  it('names the destination and sources of a TrafficTarget added', () => {
    const base = build(bookstoreMesh());
    const after = build([...bookstoreMesh(), k8s.trafficTarget('bookstore', 'extra', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }])]);
    assert.deepEqual(plainChange(diffMeshSnapshots(base, after)), { ...none, identities: ['bookstore/bookstore', 'bookthief/bookthief'] });
  });

  it('names a service added, its identities and the sources allowed to reach them', () => {
    const base = build(bookstoreMesh());
    const after = build([...bookstoreMesh(), k8s.service('bookstore', 'new', { app: 'bookstore' }, [{ port: 80 }], '10.96.1.1')]);
    assert.deepEqual(plainChange(diffMeshSnapshots(base, after)), {
      services: ['bookstore/new'],
      identities: ['bookbuyer/bookbuyer', 'bookstore/bookstore', 'bookstore/bookstore-v2'],
      servicesChanged: true,
    });
  });

  it('tells a change of split weights only (only RouteConfigurations differ) from one that changes which clusters are reached', () => {
    const base = build(bookstoreMesh());
    const weightsOnly = (after: ReturnType<typeof build>) => {
      const change = diffMeshSnapshots(base, after);
      return change !== 'all' && onlySplitWeightsChanged(base, after, change);
    };
    assert.equal(weightsOnly(build(bookstoreMesh({ split: [90, 10] }))), true);
    assert.equal(weightsOnly(build(bookstoreMesh({ split: [100, 0] }))), false, 'a backend drops to weight 0: its cluster is no longer reached');
    assert.equal(weightsOnly(build(withPodIp('bookwarehouse-1', '10.9.9.9'))), false, 'endpoints');
    assert.equal(weightsOnly(build(bookstoreMesh())), false, 'nothing');
    const both = bookstoreMesh({ split: [90, 10] }).map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v1-1' ? { ...o, status: { podIP: '10.9.9.9', phase: 'Running' } } : o));
    assert.equal(weightsOnly(build(both as KubeObject[])), false, 'weights and a backend\'s endpoints');
  });

  it('covers every field of the MeshSnapshot (a new field must be added to the diff)', () => {
    // Not compared: generation, meshName, meshConfig and partialPolicies (no generator reads
    // them), index (derived from services, trafficTargets and trafficSplits).
    assert.deepEqual(Object.keys(build(bookstoreMesh())).sort(), [
      'egressPolicies',
      'endpoints',
      'generation',
      'identitiesByService',
      'index',
      'ingressBackends',
      'meshConfig',
      'meshName',
      'namespaces',
      'partialPolicies',
      'retryPolicies',
      'services',
      'servicesByIdentity',
      'settings',
      'trafficSplits',
      'trafficTargets',
      'upstreamTrafficSettings',
    ]);
  });

  it('tells an endpoints-only change (only ClusterLoadAssignments differ) from one that moves listeners or routes', () => {
    const base = build(bookstoreMesh());
    const endpointsOnly = (after: ReturnType<typeof build>) => {
      const change = diffMeshSnapshots(base, after);
      return change !== 'all' && onlyEndpointsChanged(base, after, change);
    };
    assert.equal(endpointsOnly(build(withPodIp('bookwarehouse-1', '10.9.9.9'))), true);
    // mysql is headless: its pod addresses are the outbound listener's filter chain matches.
    assert.equal(endpointsOnly(build(withPodIp('mysql-0', '10.9.9.9'))), false);
    assert.equal(endpointsOnly(build(bookstoreMesh({ split: [90, 10] }))), false);
  });
});
