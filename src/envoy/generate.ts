import { TypeUrl } from '../api/type-urls.js';
import { clustersNeedPush, generateClusters, generateOwnClusters, generateUpstreamClusters } from './cds/cds.js';
import type { GenerationContext, ProxyProfile, ResourceLayer } from './context.js';
import { clusterLoadAssignmentsChangedBy, clusterLoadAssignmentsNeedPush, generateClusterLoadAssignments } from './eds/eds.js';
import { generateInboundListeners, generateListeners, generateOutboundListeners, listenersNeedPush, outboundListenerShareable } from './lds/lds.js';
import { generateInboundRouteConfigurations, generateOutboundRouteConfigurations, generateRouteConfigurations, outboundRoutesShareable, routeConfigurationsNeedPush } from './rds/rds.js';
import { identityParts } from '../proxy/types.js';
import { generateEgressRouteConfigurations } from './rds/egress.js';
import { generateIngressRouteConfigurations } from './rds/ingress.js';
import { generateProxylessResources, generateProxylessRouteConfigurations, proxylessResourcesNeedPush } from './proxyless.js';
import { withMeshChangeKind, type PushChange } from './push-change.js';
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

/**
 * A proxy's resources as {@link generateProxyResources} gives them, in layers: per type, the
 * part every proxy with the same outbound view gets alike (`shared`, a {@link ResourceLayer}:
 * one object per generation, carried over while unchanged) and the proxy's own (`own`, with an
 * entry for every type generated, possibly empty). `shared` and `own` of a type have no name in
 * common, and together are the type's resources of {@link generateProxyResources}.
 */
export interface LayeredResources {
  readonly shared: ReadonlyMap<TypeUrl, ResourceLayer>;
  readonly own: ProxyResources;
}

/**
 * {@link generateProxyResources} in layers ({@link LayeredResources}): a sidecar's upstream
 * Clusters, its ClusterLoadAssignments and, in permissive mode (where every identity has the one
 * view), its outbound listener (without Egress policies of its own) and its outbound route
 * configurations (without Retry policies of its own; one layer per client namespace) are its
 * outbound view's layers (built once per view and
 * generation, whatever number of proxies has the view); the rest is its own. A proxyless
 * client's resources, and a type whose own part would take a name of the layer, are all own.
 */
export function generateLayeredResources(context: GenerationContext, profile: ProxyProfile, certs: ProxyCertificates, types?: ReadonlySet<TypeUrl>): LayeredResources {
  if (profile.clientType === 'grpc') return { shared: new Map(), own: generateProxylessResources(context, profile, types) };
  const wanted = (type: TypeUrl): boolean => !types || types.has(type);
  const shared = new Map<TypeUrl, ResourceLayer>();
  const own = new Map<TypeUrl, readonly NamedResource[]>();
  const view = `${context.outboundViewId(context.outboundView(profile.identity))}`;
  if (wanted(TypeUrl.Cluster)) {
    const layer = context.layer('Cluster', view, () => generateUpstreamClusters(context, profile));
    const mine = generateOwnClusters(context, profile);
    if (mine.some((c) => layer.names.has(c.name))) own.set(TypeUrl.Cluster, generateClusters(context, profile));
    else {
      shared.set(TypeUrl.Cluster, layer);
      own.set(TypeUrl.Cluster, mine);
    }
  }
  if (wanted(TypeUrl.ClusterLoadAssignment)) {
    shared.set(TypeUrl.ClusterLoadAssignment, context.layer('ClusterLoadAssignment', view, () => generateClusterLoadAssignments(context, profile)));
    own.set(TypeUrl.ClusterLoadAssignment, []);
  }
  // In permissive mode every identity has the one view, so its listener and route layers are
  // everyone's; in SMI mode a view is mostly one identity's, whose proxies share one
  // configuration already: a layer there is work without sharing.
  const viewWide = context.snapshot.settings.permissiveTrafficPolicyMode;
  if (wanted(TypeUrl.Listener)) {
    // The outbound listener of a proxy without Egress policies of its own is its view's.
    if (viewWide && outboundListenerShareable(context, profile)) {
      shared.set(TypeUrl.Listener, context.layer('Listener', `outbound ${view}`, () => generateOutboundListeners(context, profile)));
      own.set(TypeUrl.Listener, generateInboundListeners(context, profile));
    } else own.set(TypeUrl.Listener, generateListeners(context, profile));
  }
  if (wanted(TypeUrl.RouteConfiguration)) {
    // The outbound route configurations of a proxy without Retry policies of its own are its
    // view's and its namespace's (short host names): one layer per view and namespace.
    if (viewWide && outboundRoutesShareable(context.snapshot, profile.identity)) {
      const namespace = identityParts(profile.identity).namespace;
      const layer = context.layer('RouteConfiguration', `outbound ${namespace} ${view}`, () => generateOutboundRouteConfigurations(context, profile));
      const mine = [...generateInboundRouteConfigurations(context, profile), ...generateIngressRouteConfigurations(context, profile), ...generateEgressRouteConfigurations(context, profile)];
      if (mine.some((r) => layer.names.has(r.name))) own.set(TypeUrl.RouteConfiguration, generateProxyRouteConfigurations(context, profile));
      else {
        shared.set(TypeUrl.RouteConfiguration, layer);
        own.set(TypeUrl.RouteConfiguration, mine);
      }
    } else own.set(TypeUrl.RouteConfiguration, generateProxyRouteConfigurations(context, profile));
  }
  if (wanted(TypeUrl.Secret)) own.set(TypeUrl.Secret, generateSecrets(context, profile, certs));
  return { shared, own };
}

/** The resources of `layered` by type, each type's shared ones first: what {@link generateProxyResources} holds (in another order). */
export function flattenLayers({ shared, own }: LayeredResources): ProxyResources {
  const out = new Map<TypeUrl, readonly NamedResource[]>();
  for (const [type, list] of own) {
    const layer = shared.get(type);
    out.set(type, layer ? [...layer.resources, ...list] : list);
  }
  return out;
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
 * certificate rotated, Clusters and Listeners only when only MeshConfig's TLS settings did (their
 * TLS contexts), every type for anything else; none when nothing of the proxy changed.
 */
export function typesToRegenerate(pushChange: PushChange): ReadonlySet<TypeUrl> {
  const change = withMeshChangeKind(pushChange);
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
