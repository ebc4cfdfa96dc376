import { TypeUrl } from '../api/type-urls.js';
import { clustersNeedPush, generateClusters } from './cds/cds.js';
import type { GenerationContext, ProxyProfile } from './context.js';
import { clusterLoadAssignmentsChangedBy, clusterLoadAssignmentsNeedPush, generateClusterLoadAssignments } from './eds/eds.js';
import { generateListeners, listenersNeedPush } from './lds/lds.js';
import { generateRouteConfigurations, routeConfigurationsNeedPush } from './rds/rds.js';
import { generateEgressRouteConfigurations } from './rds/egress.js';
import { generateIngressRouteConfigurations } from './rds/ingress.js';
import { generateProxylessResources, generateProxylessRouteConfigurations, proxylessResourcesNeedPush } from './proxyless.js';
import type { PushChange } from './push-change.js';
import type { NamedResource } from './resource.js';
import { generateSecrets, secretsNeedPush, type ProxyCertificates } from './sds/sds.js';

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

/** A proxy's RouteConfigurations: the proxyless form, or a sidecar's outbound, ingress and egress ones. */
function generateProxyRouteConfigurations(context: GenerationContext, profile: ProxyProfile): readonly NamedResource[] {
  if (profile.clientType === 'grpc') return generateProxylessRouteConfigurations(context, profile);
  return [...generateRouteConfigurations(context, profile), ...generateIngressRouteConfigurations(context, profile), ...generateEgressRouteConfigurations(context, profile)];
}

/** The types a sidecar gets, each with the predicate saying which changes make it regenerate. */
const SIDECAR_NEEDS_PUSH: readonly (readonly [TypeUrl, (change: PushChange) => boolean])[] = [
  [TypeUrl.Cluster, clustersNeedPush],
  [TypeUrl.ClusterLoadAssignment, clusterLoadAssignmentsNeedPush],
  [TypeUrl.Listener, listenersNeedPush],
  [TypeUrl.RouteConfiguration, routeConfigurationsNeedPush],
  [TypeUrl.Secret, secretsNeedPush],
];

/**
 * The types of a proxy's resources that `change` makes regenerate, from each type's predicate
 * (`clustersNeedPush`, …; a proxyless client's `proxylessResourcesNeedPush`): only EDS when
 * only endpoints changed, only RDS when only TrafficSplit weights did, only SDS when only the
 * certificate rotated, every type for anything else; none when nothing of the proxy changed.
 */
export function typesToRegenerate(change: PushChange): ReadonlySet<TypeUrl> {
  const out = new Set<TypeUrl>();
  for (const [type, needsPush] of SIDECAR_NEEDS_PUSH) {
    if (change.clientType === 'grpc' ? proxylessResourcesNeedPush(type, change) : needsPush(change)) out.add(type);
  }
  return out;
}

/**
 * Of the `types` a push regenerates (`typesToRegenerate`), those whose module can tell which of
 * their resources `change` alters, with those resources, as every proxy (sidecar or proxyless)
 * that has them gets them: a proxy's other resources of such a type stay as they are, and only
 * these are validated and encoded again (once per push). Today: the changed services'
 * ClusterLoadAssignments when only endpoints changed (`clusterLoadAssignmentsChangedBy`). A type
 * not in the result is generated again in full.
 * @param context the generation context of `change.after`.
 */
export function resourcesChangedBy(change: PushChange, types: ReadonlySet<TypeUrl>, context: GenerationContext): ReadonlyMap<TypeUrl, readonly NamedResource[]> {
  const out = new Map<TypeUrl, readonly NamedResource[]>();
  const assignments = types.has(TypeUrl.ClusterLoadAssignment) ? clusterLoadAssignmentsChangedBy(change, context) : undefined;
  if (assignments) out.set(TypeUrl.ClusterLoadAssignment, assignments);
  return out;
}
