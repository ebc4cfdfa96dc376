import { TypeUrl } from '../api/type-urls.js';
import { generateClusters } from './cds/cds.js';
import type { GenerationContext, ProxyProfile } from './context.js';
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
 * Runs the five generators for one proxy profile: CDS, EDS, LDS, RDS and SDS, from `context`'s
 * MeshSnapshot. Pure and synchronous (what it shares goes through `context`). A proxyless
 * gRPC client (`profile.clientType === 'grpc'`) gets the gRFC A27 form instead
 * ({@link generateProxylessResources}: `api_listener`s named by target, plaintext EDS clusters,
 * no SDS), from the same policies.
 * @param certs the proxy identity's service certificate and the mesh root, for SDS.
 * @param types when given, only the resources of these types are generated (the map holds
 *   those types only); all five otherwise.
 */
export function generateProxyResources(context: GenerationContext, profile: ProxyProfile, certs: ProxyCertificates, types?: ReadonlySet<TypeUrl>): ProxyResources {
  if (profile.clientType === 'grpc') return generateProxylessResources(context, profile, types);
  const generators: [TypeUrl, () => readonly NamedResource[]][] = [
    [TypeUrl.Cluster, () => generateClusters(context, profile)],
    [TypeUrl.ClusterLoadAssignment, () => generateClusterLoadAssignments(context, profile)],
    [TypeUrl.Listener, () => generateListeners(context, profile)],
    [TypeUrl.RouteConfiguration, () => generateProxyRouteConfigurations(context, profile)],
    [TypeUrl.Secret, () => generateSecrets(context, profile, certs)],
  ];
  return new Map(generators.filter(([type]) => !types || types.has(type)).map(([type, generate]) => [type, generate()]));
}

/**
 * The RouteConfigurations {@link generateProxyResources} gives `profile`, alone: for a change that
 * only alters routes (`onlySplitWeightsChanged`). Pure and synchronous.
 */
export function generateProxyRouteConfigurations(context: GenerationContext, profile: ProxyProfile): readonly NamedResource[] {
  if (profile.clientType === 'grpc') return generateProxylessRouteConfigurations(context, profile);
  return [...generateRouteConfigurations(context, profile), ...generateIngressRouteConfigurations(context, profile), ...generateEgressRouteConfigurations(context, profile)];
}
