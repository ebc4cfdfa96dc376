import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import type { ClusterLoadAssignment } from '../api/generated/envoy/config/endpoint/v3/ClusterLoadAssignment.js';
import type { Listener } from '../api/generated/envoy/config/listener/v3/Listener.js';
import type { Route } from '../api/generated/envoy/config/route/v3/Route.js';
import type { RouteConfiguration } from '../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import { TypeUrl } from '../api/type-urls.js';
import { clusterName } from '../catalog/names.js';
import type { MeshService } from '../catalog/types.js';
import { identityParts } from '../proxy/types.js';
import { clustersNeedPush, CONNECT_TIMEOUT_MS } from './cds/cds.js';
import { clusterLoadAssignmentsNeedPush, generateClusterLoadAssignments } from './eds/eds.js';
import type { GenerationContext, ProxyProfile } from './context.js';
import { listenersNeedPush } from './lds/lds.js';
import { serviceHostnames } from './rds/hosts.js';
import { meshChangeKind, type PushChange } from './push-change.js';
import { generateOutboundRouteConfigurations, isHttpLike, outboundRouteLayout, routeConfigurationsNeedPush } from './rds/rds.js';
import type { NamedResource } from './resource.js';
import { ADS_CONFIG_SOURCE, durationMs, ExtensionType, typedConfig } from './typed-config.js';
import { byKey, byName } from '../util/order.js';

/** `stat_prefix` of the HttpConnectionManager in a proxyless listener (gRPC ignores it; Envoy's proto requires it). */
export const PROXYLESS_STAT_PREFIX = 'proxyless';

/**
 * Name of the route configuration the listeners of mesh services a proxyless client may NOT
 * reach use: one virtual host (`*`) whose one route sends every RPC to
 * {@link NO_ROUTE_CLUSTER}, which has no endpoints, so RPCs fail at once with UNAVAILABLE.
 * Why not simpler forms, as measured with the clients of the tests:
 * - no listener: grpc-js reports a listener it never received as missing only when its 15 s
 *   does-not-exist timer fires, whatever the LDS responses say; RPCs wait until then;
 * - no matching virtual host: grpc-js (1.14) then leaves RPCs waiting for name resolution;
 * - a virtual host without routes: gRPC C-core (1.51) NACKs it ("No route found in the
 *   virtual host").
 */
export const NO_ROUTE_CONFIG = 'rds-outbound-no-route';

/** Name of the EDS cluster, without endpoints, that {@link NO_ROUTE_CONFIG} routes to. */
export const NO_ROUTE_CLUSTER = 'outbound-no-route';

/**
 * The names a gRPC client may dial for a service port, `xds:///<name>`, each of which is the
 * name of the Listener it asks for (gRFC A27: the LDS resource name is the target's path) and
 * a domain of the service's virtual host (gRPC matches the target against `domains`):
 * `<svc>.<ns>:<port>`, `<svc>.<ns>.svc:<port>`, `<svc>.<ns>.svc.cluster:<port>`,
 * `<svc>.<ns>.svc.cluster.local:<port>`, `<ClusterIP>:<port>` (IPv6 bracketed), and
 * `<svc>:<port>` when the client is in the service's namespace. Always with the port: a
 * service may have several HTTP ports, and a port-less listener name would be ambiguous.
 */
export function proxylessTargetNames(svc: MeshService, clientNamespace: string): string[] {
  const suffix = `:${svc.port}`;
  return serviceHostnames(svc, clientNamespace).filter((n) => n.endsWith(suffix) && !/^[^[]*:.*:/.test(n));
}

/**
 * A proxyless client's Listener for one target name: only an `api_listener` holding an
 * HttpConnectionManager (gRFC A27 "Listener Proto"): RDS over ADS with `route_config_name`
 * `routeConfigName`, the sidecars' route configuration holding the target's virtual host
 * (`rds-outbound.<port>`, or `rds-outbound.<port>.<b>` on a split port; so both kinds of
 * client follow the same policy), and `http_filters` ending with the router filter (gRFC
 * A39: gRPC NACKs an HCM whose last filter is not `envoy.extensions.filters.http.router.v3.Router`).
 * No address, no filter chains.
 */
export function proxylessListener(name: string, routeConfigName: string): Listener {
  return {
    name,
    api_listener: {
      api_listener: typedConfig(ExtensionType.HttpConnectionManager, {
        stat_prefix: PROXYLESS_STAT_PREFIX,
        rds: { config_source: ADS_CONFIG_SOURCE, route_config_name: routeConfigName },
        http_filters: [{ name: 'envoy.filters.http.router', typed_config: typedConfig(ExtensionType.Router, {}) }],
      }),
    },
  };
}

/**
 * A proxyless client's upstream Cluster of a service: `<ns>/<svc>|<targetPort>` like the
 * sidecar's, EDS over ADS, ROUND_ROBIN (gRFC A27 "CDS": gRPC accepts only EDS or aggregate
 * clusters and ROUND_ROBIN/RING_HASH), and no `transport_socket`: the sidecar's
 * UpstreamTlsContext names SDS secrets, which gRPC rejects (gRFC A29 takes certificates from
 * `certificate_provider_instance`s of the bootstrap instead), so proxyless traffic is
 * plaintext for now.
 */
export function proxylessCluster(svc: MeshService): Cluster {
  return edsCluster(clusterName(svc));
}

function edsCluster(name: string): Cluster {
  return {
    name,
    alt_stat_name: name,
    type: 'EDS',
    eds_cluster_config: { eds_config: ADS_CONFIG_SOURCE, service_name: name },
    connect_timeout: durationMs(CONNECT_TIMEOUT_MS),
    lb_policy: 'ROUND_ROBIN',
  };
}

/**
 * What each target name a proxyless client may dial resolves to: the sidecars' route
 * configuration holding the destination's virtual host (`rds-outbound.<port>`, or
 * `rds-outbound.<port>.<b>` on a split port) for the target names of each HTTP/gRPC destination it may reach, {@link NO_ROUTE_CONFIG} for those of
 * every other HTTP/gRPC mesh service (so dialing a service the client may not reach fails at
 * once with UNAVAILABLE). Listener name → route configuration name, sorted by listener name.
 */
export function proxylessTargets(context: GenerationContext, profile: ProxyProfile): Map<string, string> {
  const clientNamespace = identityParts(profile.identity).namespace;
  const targets = new Map<string, string>();
  const reachable = new Set<MeshService>();
  const view = context.outboundView(profile.identity);
  const layout = outboundRouteLayout(view);
  for (const dest of view.destinations) {
    if (!isHttpLike(dest.service)) continue;
    reachable.add(dest.service);
    for (const name of proxylessTargetNames(dest.service, clientNamespace)) {
      // A name two services share (a reused ClusterIP) stays with the first, as its domain does in RDS.
      if (!targets.has(name)) targets.set(name, layout.routeConfigNameOf(dest.service));
    }
  }
  for (const svc of context.snapshot.services) {
    if (!isHttpLike(svc) || reachable.has(svc)) continue;
    for (const name of proxylessTargetNames(svc, clientNamespace)) if (!targets.has(name)) targets.set(name, NO_ROUTE_CONFIG);
  }
  return new Map([...targets.entries()].sort(byKey));
}

/** The Listeners of a proxyless client: one {@link proxylessListener} per entry of {@link proxylessTargets}, sorted by name. */
export function generateProxylessListeners(context: GenerationContext, profile: ProxyProfile): NamedResource<Listener>[] {
  return [...proxylessTargets(context, profile)].map(([name, routeConfigName]) => ({ name, resource: proxylessListener(name, routeConfigName) }));
}

/**
 * The RouteConfigurations of a proxyless client: the sidecars' outbound ones
 * (`rds-outbound.<port>`, or `.<port>.<b>` buckets) unchanged but for `total_weight`, and {@link NO_ROUTE_CONFIG} when some target uses it.
 */
export function generateProxylessRouteConfigurations(context: GenerationContext, profile: ProxyProfile): NamedResource<RouteConfiguration>[] {
  const out: NamedResource<RouteConfiguration>[] = generateOutboundRouteConfigurations(context, profile).map(withTotalWeight);
  if (usesNoRoute(context, profile)) {
    out.push({
      name: NO_ROUTE_CONFIG,
      resource: {
        name: NO_ROUTE_CONFIG,
        virtual_hosts: [{ name: NO_ROUTE_CONFIG, domains: ['*'], routes: [{ name: NO_ROUTE_CONFIG, match: { prefix: '/' }, route: { cluster: NO_ROUTE_CLUSTER } }] }],
      },
    });
  }
  return out;
}

/**
 * A sidecar route configuration with `weighted_clusters.total_weight` set to the weights' sum on
 * every weighted route (gRPC C-core takes 100 when it is unset and NACKs another sum; Envoy
 * deprecates the field, so sidecars go without). A copy: the sidecars' objects are shared.
 */
function withTotalWeight(rc: NamedResource<RouteConfiguration>): NamedResource<RouteConfiguration> {
  const weighted = (route: Route) => route.route?.weighted_clusters !== undefined && route.route.weighted_clusters !== null;
  if (!(rc.resource.virtual_hosts ?? []).some((vh) => (vh.routes ?? []).some(weighted))) return rc;
  const virtual_hosts = (rc.resource.virtual_hosts ?? []).map((vh) => ({
    ...vh,
    routes: (vh.routes ?? []).map((route) => {
      if (!weighted(route)) return route;
      const wc = route.route!.weighted_clusters!;
      const total = (wc.clusters ?? []).reduce((sum, c) => sum + Number(c.weight?.value ?? 0), 0);
      return { ...route, route: { ...route.route, weighted_clusters: { ...wc, total_weight: { value: total } } } };
    }),
  }));
  return { ...rc, resource: { ...rc.resource, virtual_hosts } };
}

function usesNoRoute(context: GenerationContext, profile: ProxyProfile): boolean {
  return [...proxylessTargets(context, profile).values()].includes(NO_ROUTE_CONFIG);
}

/**
 * The Clusters of a proxyless client: one per upstream service it may reach (TrafficSplit
 * backends included), and {@link NO_ROUTE_CLUSTER} when {@link NO_ROUTE_CONFIG} is used; sorted by name.
 */
export function generateProxylessClusters(context: GenerationContext, profile: ProxyProfile): NamedResource<Cluster>[] {
  const out = context.outboundView(profile.identity).upstreams.map((svc) => ({ name: clusterName(svc), resource: proxylessCluster(svc) }));
  if (usesNoRoute(context, profile)) out.push({ name: NO_ROUTE_CLUSTER, resource: edsCluster(NO_ROUTE_CLUSTER) });
  return out.sort(byName);
}

/**
 * The ClusterLoadAssignments of a proxyless client: the sidecars' (IP literals, one locality
 * with a `load_balancing_weight`, weight 1 per endpoint, which gRPC accepts as they are), and an
 * empty one for {@link NO_ROUTE_CLUSTER} when it is used; sorted by name.
 */
export function generateProxylessClusterLoadAssignments(context: GenerationContext, profile: ProxyProfile): NamedResource<ClusterLoadAssignment>[] {
  const out: NamedResource<ClusterLoadAssignment>[] = generateClusterLoadAssignments(context, profile);
  if (usesNoRoute(context, profile)) out.push({ name: NO_ROUTE_CLUSTER, resource: { cluster_name: NO_ROUTE_CLUSTER, endpoints: [] } });
  return out.sort(byName);
}

/**
 * Every resource of a proxyless gRPC client (gRFC A27/A28), by type URL. Pure and synchronous.
 * - LDS: {@link generateProxylessListeners} (no inbound listener: a gRPC client serves nothing here).
 * - RDS: the sidecars' outbound route configurations (`rds-outbound.<port>`, or its buckets), unchanged: virtual
 *   hosts whose `domains` hold every target name, TrafficSplits as `weighted_clusters` with
 *   `total_weight` = the sum of the weights (gRPC C-core NACKs any other total); plus
 *   {@link NO_ROUTE_CONFIG} for the services the client may not reach.
 * - CDS: {@link generateProxylessClusters}.
 * - EDS: {@link generateProxylessClusterLoadAssignments}.
 * - SDS: none (gRPC does not use SDS).
 * With `types`, only the resources of those types (the others are left out of the map).
 */
export function generateProxylessResources(context: GenerationContext, profile: ProxyProfile, types?: ReadonlySet<TypeUrl>): ReadonlyMap<TypeUrl, readonly NamedResource[]> {
  const generators: [TypeUrl, () => readonly NamedResource[]][] = [
    [TypeUrl.Cluster, () => generateProxylessClusters(context, profile)],
    [TypeUrl.ClusterLoadAssignment, () => generateProxylessClusterLoadAssignments(context, profile)],
    [TypeUrl.Listener, () => generateProxylessListeners(context, profile)],
    [TypeUrl.RouteConfiguration, () => generateProxylessRouteConfigurations(context, profile)],
    [TypeUrl.Secret, () => []],
  ];
  return new Map(generators.filter(([type]) => !types || types.has(type)).map(([type, generate]) => [type, generate()]));
}

/**
 * Whether `change` makes a proxyless client's resources of `type` regenerate. Its Secrets (none:
 * it has no SDS) never for a certificate rotation, which changes nothing it gets; only with the
 * rest for any other change. Its other types follow the sidecar's predicate of that type
 * (`clustersNeedPush`, …): each proxyless generator reads, of what a push can change, what the
 * sidecar's of its type reads (endpoints only in EDS, TrafficSplit weights only in RDS; a change
 * of the set of services, which its listeners follow, is never "only endpoints" or "only weights").
 */
export function proxylessResourcesNeedPush(type: TypeUrl, change: PushChange): boolean {
  switch (type) {
    case TypeUrl.Cluster:
      return clustersNeedPush(change);
    case TypeUrl.ClusterLoadAssignment:
      return clusterLoadAssignmentsNeedPush(change);
    case TypeUrl.Listener:
      return listenersNeedPush(change);
    case TypeUrl.RouteConfiguration:
      return routeConfigurationsNeedPush(change);
    default:
      return meshChangeKind(change) === 'other';
  }
}
