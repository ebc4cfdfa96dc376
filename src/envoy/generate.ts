import { TypeUrl } from '../api/type-urls.js';
import type { MeshSnapshot } from '../catalog/types.js';
import type { Proxy } from '../proxy/types.js';
import { generateClusters } from './cds/cds.js';
import { generateClusterLoadAssignments } from './eds/eds.js';
import { generateListeners } from './lds/lds.js';
import { generateRouteConfigurations } from './rds/rds.js';
import { generateEgressRouteConfigurations } from './rds/egress.js';
import { generateIngressRouteConfigurations } from './rds/ingress.js';
import { generateProxylessResources, generateProxylessRouteConfigurations } from './proxyless.js';
import type { NamedResource } from './resource.js';
import { generateSecrets, type ProxyCertificates } from './sds/sds.js';

/** Every resource of one proxy, by type URL, in the object form the codec encodes. */
export type ProxyResources = ReadonlyMap<TypeUrl, readonly NamedResource[]>;

/**
 * Runs the five generators for one proxy: CDS, EDS, LDS, RDS and SDS. Pure and synchronous.
 * A proxyless gRPC client (`proxy.clientType === 'grpc'`) gets the gRFC A27 form instead
 * ({@link generateProxylessResources}: `api_listener`s named by target, plaintext EDS clusters,
 * no SDS), from the same policies.
 * @param certs the proxy identity's service certificate and the mesh root, for SDS.
 */
export function generateProxyResources(snapshot: MeshSnapshot, proxy: Proxy, certs: ProxyCertificates): ProxyResources {
  if (proxy.clientType === 'grpc') return generateProxylessResources(snapshot, proxy);
  return new Map<TypeUrl, readonly NamedResource[]>([
    [TypeUrl.Cluster, generateClusters(snapshot, proxy)],
    [TypeUrl.ClusterLoadAssignment, generateClusterLoadAssignments(snapshot, proxy)],
    [TypeUrl.Listener, generateListeners(snapshot, proxy)],
    [TypeUrl.RouteConfiguration, generateProxyRouteConfigurations(snapshot, proxy)],
    [TypeUrl.Secret, generateSecrets(snapshot, proxy, certs)],
  ]);
}

/**
 * The RouteConfigurations {@link generateProxyResources} gives `proxy`, alone: for a change that
 * only alters routes (`onlySplitWeightsChanged`). Pure and synchronous.
 */
export function generateProxyRouteConfigurations(snapshot: MeshSnapshot, proxy: Proxy): readonly NamedResource[] {
  if (proxy.clientType === 'grpc') return generateProxylessRouteConfigurations(snapshot, proxy);
  return [...generateRouteConfigurations(snapshot, proxy), ...generateIngressRouteConfigurations(snapshot, proxy), ...generateEgressRouteConfigurations(snapshot, proxy)];
}
