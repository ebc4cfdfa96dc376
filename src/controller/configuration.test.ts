import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import { buildMeshSnapshot } from '../catalog/build-snapshot.js';
import { bookstoreMesh } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { GenerationContext } from '../envoy/context.js';
import { ResourceCheckCache } from '../envoy/validate/index.js';
import { parseCommonName } from '../proxy/types.js';
import { generateConfiguration } from './configuration.js';

describe('generateConfiguration with types', () => {
  const context = new GenerationContext(buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm', generation: 1 }).snapshot);
  const bookbuyer = { ...parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.bookbuyer.bookbuyer.cluster.local'), verified: true };
  const certs = { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' };
  const cache = new ResourceCheckCache();
  const full = generateConfiguration(context, bookbuyer, certs, cache);
  // The proxy's own resources and those of its outbound view's layers.
  const names = (type: TypeUrl) => new Set([...(full.shared.get(type) ?? []), ...(full.encoded.get(type) ?? [])].map((r) => r.name));
  const others = new Map([TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.Secret].map((t) => [t, names(t)]));

  it('generates, validates and encodes only those types, against the names of the proxy’s others', () => {
    assert.deepEqual(full.violations, []);
    const routes = generateConfiguration(context, bookbuyer, certs, cache, new Set([TypeUrl.RouteConfiguration]), others);
    assert.deepEqual(routes.violations, []);
    assert.deepEqual([...routes.encoded.keys()], [TypeUrl.RouteConfiguration]);
    assert.deepEqual(routes.encoded.get(TypeUrl.RouteConfiguration), full.encoded.get(TypeUrl.RouteConfiguration));
    assert.deepEqual([...routes.dependencies], [], 'a partial configuration: the proxy keeps the dependencies of its full one');
    assert.ok(full.dependencies.size > 0);
  });

  it('fails closed without the names of the other types: what the routes refer to is missing', () => {
    const alone = generateConfiguration(context, bookbuyer, certs, cache, new Set([TypeUrl.RouteConfiguration]));
    assert.ok(alone.violations.some((v) => v.typeUrl === TypeUrl.RouteConfiguration), 'a route to a cluster the proxy has no Cluster for');
  });
});
