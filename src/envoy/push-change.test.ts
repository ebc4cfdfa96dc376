import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { buildMeshSnapshot } from '../catalog/build-snapshot.js';
import { diffMeshSnapshots, type MeshChange } from '../catalog/snapshot-diff.js';
import type { KubeObject } from '../store/objects.js';
import { typesToRegenerate } from './generate.js';
import type { PushChange } from './push-change.js';

const ALL = [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration, TypeUrl.Secret];
const NOTHING: MeshChange = { services: new Set(), identities: new Set(), servicesChanged: false };

/** The PushChange from the bookstore mesh to `after`'s objects. */
function pushChange(after: KubeObject[], extra: Partial<PushChange> = {}): PushChange {
  const before = buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm', generation: 1 }).snapshot;
  const next = buildMeshSnapshot(memoryStore(after), { meshName: 'osm', generation: 2, previous: before }).snapshot;
  return { before, after: next, change: diffMeshSnapshots(before, next), certificateRotated: false, ...extra };
}

const movePod = (): KubeObject[] =>
  bookstoreMesh().map((o) => (o.kind === 'Pod' && o.metadata.name === 'bookstore-v2-1' ? { ...o, status: { podIP: '10.244.9.9', phase: 'Running' } } : o));

/** The bookstore mesh with its MeshConfig's `spec.sidecar` (and `spec.observability`) set. */
const withMeshConfig = (sidecar: Record<string, unknown>, observability?: Record<string, unknown>): KubeObject[] =>
  bookstoreMesh().map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar, ...(observability ? { observability } : {}) } } : o));

const sorted = (types: ReadonlySet<TypeUrl>) => [...types].sort();

describe('typesToRegenerate (the per-type needs-push predicates)', () => {
  it('an endpoint change regenerates EDS only', () => {
    assert.deepEqual(sorted(typesToRegenerate(pushChange(movePod()))), [TypeUrl.ClusterLoadAssignment]);
  });

  it('a TrafficSplit weight change regenerates RDS only', () => {
    assert.deepEqual(sorted(typesToRegenerate(pushChange(bookstoreMesh({ split: [90, 10] })))), [TypeUrl.RouteConfiguration]);
  });

  it('a certificate rotation alone regenerates SDS only, and nothing of a proxyless client', () => {
    const rotation = pushChange(bookstoreMesh(), { change: NOTHING, certificateRotated: true });
    assert.deepEqual(sorted(typesToRegenerate(rotation)), [TypeUrl.Secret]);
    assert.deepEqual(sorted(typesToRegenerate({ ...rotation, clientType: 'grpc' })), []);
  });

  it('a rotation with an endpoint change regenerates EDS and SDS', () => {
    assert.deepEqual(sorted(typesToRegenerate(pushChange(movePod(), { certificateRotated: true }))), [TypeUrl.ClusterLoadAssignment, TypeUrl.Secret].sort());
  });

  it('nothing that concerns the proxy regenerates nothing', () => {
    assert.deepEqual(sorted(typesToRegenerate(pushChange(movePod(), { change: NOTHING }))), []);
  });

  it("a change of MeshConfig's TLS settings alone regenerates Clusters and Listeners only (their TLS contexts), for sidecars and proxyless clients", () => {
    const ciphers = pushChange(withMeshConfig({ cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] }));
    assert.equal(ciphers.change, 'all');
    assert.deepEqual(sorted(typesToRegenerate(ciphers)), [TypeUrl.Cluster, TypeUrl.Listener].sort());
    assert.deepEqual(sorted(typesToRegenerate({ ...ciphers, clientType: 'grpc' })), [TypeUrl.Cluster, TypeUrl.Listener].sort());
    const versions = pushChange(withMeshConfig({ tlsMinProtocolVersion: 'TLSv1_3', ecdhCurves: ['X25519'] }));
    assert.deepEqual(sorted(typesToRegenerate(versions)), [TypeUrl.Cluster, TypeUrl.Listener].sort());
    assert.deepEqual(sorted(typesToRegenerate({ ...versions, certificateRotated: true })), [TypeUrl.Cluster, TypeUrl.Listener, TypeUrl.Secret].sort());
  });

  it('a TLS settings change with any other change regenerates every type', () => {
    const logs = pushChange(withMeshConfig({ cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] }, { enableAccessLog: true }));
    assert.deepEqual(sorted(typesToRegenerate(logs)), [...ALL].sort(), 'another MeshConfig setting');
    const grant = k8s.trafficTarget('bookstore', 'thief-access', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }]);
    const access = pushChange([...withMeshConfig({ cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] }), grant]);
    assert.deepEqual(sorted(typesToRegenerate(access)), [...ALL].sort(), 'a TrafficTarget too');
  });

  it('any other change regenerates every type, for sidecars and proxyless clients', () => {
    const grant = k8s.trafficTarget('bookstore', 'thief-access', 'bookstore', [{ ns: 'bookthief', sa: 'bookthief' }], [{ kind: 'HTTPRouteGroup', name: 'bookstore-service-routes' }]);
    const access = pushChange([...bookstoreMesh(), grant]);
    assert.notEqual(access.change, 'all');
    assert.deepEqual(sorted(typesToRegenerate(access)), [...ALL].sort());
    assert.deepEqual(sorted(typesToRegenerate({ ...access, clientType: 'grpc' })), [...ALL].sort());
    assert.deepEqual(sorted(typesToRegenerate(pushChange(bookstoreMesh({ permissive: true })))), [...ALL].sort(), 'a mesh-wide change');
  });
});
