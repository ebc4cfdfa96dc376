import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import type { KubeObject } from '../store/objects.js';
import { buildMeshSnapshot } from './build-snapshot.js';
import { diffMeshSnapshots, onlyEndpointsChanged } from './snapshot-diff.js';

const build = (objects: KubeObject[]) => buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 }).snapshot;
const withPodIp = (name: string, ip: string) =>
  bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === name ? { ...o, status: { podIP: ip, phase: 'Running' } } : o));

describe('diffMeshSnapshots', () => {
  it('names only the service whose endpoints changed', () => {
    assert.deepEqual([...(diffMeshSnapshots(build(bookstoreMesh()), build(withPodIp('bookwarehouse-1', '10.9.9.9'))) as Set<string>)], ['bookwarehouse/bookwarehouse']);
  });

  it('names a split apex whose weights changed, and its backends (their proxies serve the apex names)', () => {
    assert.deepEqual([...(diffMeshSnapshots(build(bookstoreMesh()), build(bookstoreMesh({ split: [90, 10] }))) as Set<string>)].sort(), [
      'bookstore/bookstore',
      'bookstore/bookstore-v1',
      'bookstore/bookstore-v2',
    ]);
  });

  it('is empty when nothing a proxy uses changed', () => {
    assert.deepEqual([...(diffMeshSnapshots(build(bookstoreMesh()), build(bookstoreMesh())) as Set<string>)], []);
  });

  it('is "all" for mesh-wide changes: settings, policies, services added', () => {
    const base = build(bookstoreMesh());
    assert.equal(diffMeshSnapshots(base, build(bookstoreMesh({ permissive: true }))), 'all');
    assert.equal(
      diffMeshSnapshots(base, build([...bookstoreMesh(), k8s.trafficTarget('bookstore', 'extra', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }])])),
      'all',
    );
    assert.equal(diffMeshSnapshots(base, build([...bookstoreMesh(), k8s.service('bookstore', 'new', { app: 'new' }, [{ port: 80 }], '10.96.1.1')])), 'all');
  });

  it('covers every field of the MeshSnapshot (a new field must be added to the diff)', () => {
    assert.deepEqual(Object.keys(build(bookstoreMesh())).sort(), [
      'egressPolicies',
      'endpoints',
      'generation',
      'identitiesByService',
      'ingressBackends',
      'meshName',
      'namespaces',
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
      const changed = diffMeshSnapshots(base, after);
      return changed !== 'all' && onlyEndpointsChanged(base, after, changed);
    };
    assert.equal(endpointsOnly(build(withPodIp('bookwarehouse-1', '10.9.9.9'))), true);
    // mysql is headless: its pod addresses are the outbound listener's filter chain matches.
    assert.equal(endpointsOnly(build(withPodIp('mysql-0', '10.9.9.9'))), false);
    assert.equal(endpointsOnly(build(bookstoreMesh({ split: [90, 10] }))), false);
  });
});
