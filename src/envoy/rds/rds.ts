import type { RouteConfiguration } from '../../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import type { Route } from '../../api/generated/envoy/config/route/v3/Route.js';
import type { RetryPolicy } from '../../api/generated/envoy/config/route/v3/RetryPolicy.js';
import type { HeaderMatcher } from '../../api/generated/envoy/config/route/v3/HeaderMatcher.js';
import type { VirtualHost } from '../../api/generated/envoy/config/route/v3/VirtualHost.js';
import { localClusterName, serviceFqdn } from '../../catalog/names.js';
import { targetCoversPort } from '../../catalog/traffic-policy.js';
import type { HttpRouteMatch, MeshService, MeshSnapshot, TrafficTargetPolicy } from '../../catalog/types.js';
import { identityParts, type ServiceIdentity } from '../../proxy/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { outboundDestinationKey, type OutboundDestination, type OutboundView, type WeightedCluster } from '../outbound.js';
import { identityPrincipals } from '../rbac.js';
import type { NamedResource } from '../resource.js';
import { durationMs, ExtensionType, typedConfig } from '../typed-config.js';
import { HTTP_LOCAL_RATE_LIMIT_FILTER, httpLocalRateLimitConfig } from '../rate-limit.js';
import { serviceHostnames } from './hosts.js';
import { inboundSide, type InboundSide } from './inbound-side.js';
import { byKey } from '../../util/order.js';
import { meshChangeKind, type PushChange } from '../push-change.js';

/**
 * The retry policy of the routes from `source` to `svc`, from the Retry policy naming that
 * source and service (OSM v1.2 Retry; Envoy `config.route.v3.RetryPolicy`: `retry_on`,
 * `num_retries`, `per_try_timeout`, `retry_back_off.base_interval`). Undefined when none applies.
 */
export function retryPolicyFor(snapshot: MeshSnapshot, source: ServiceIdentity, svc: MeshService): RetryPolicy | undefined {
  const policy = snapshot.retryPolicies.find((r) => r.source === source && r.destinations.includes(`${svc.namespace}/${svc.name}`));
  if (!policy) return undefined;
  return {
    retry_on: policy.retryOn,
    num_retries: { value: policy.numRetries },
    per_try_timeout: durationMs(policy.perTryTimeoutMs),
    retry_back_off: { base_interval: durationMs(policy.backoffBaseIntervalMs) },
  };
}

/**
 * Name of an outbound route configuration: `rds-outbound.<port>` (OSM v1.2), or
 * `rds-outbound.<port>.<bucket>` for one bucket of a split port ({@link outboundRouteLayout}).
 */
export function outboundRouteConfigName(port: number, bucket?: number): string {
  return bucket === undefined ? `rds-outbound.${port}` : `rds-outbound.${port}.${bucket}`;
}

/**
 * When a port's outbound HTTP routes are split into buckets, and into how many:
 * - `threshold` (K): a port is split when more than K HTTP destinations of the proxy use it;
 * - `buckets` (B): a split port has up to B route configurations (only non-empty buckets exist).
 */
export interface OutboundRouteSplit {
  readonly threshold: number;
  readonly buckets: number;
}

/**
 * The split every generator uses: K = 128, B = 32, chosen from encoded bytes per proxy in the
 * permissive bench mesh (one HTTP port; docs/architecture.md, "Outbound routes"). Every chain
 * costs the listener ~0.34 KB (its match and HCM), a virtual host ~0.43 KB. A new service
 * resends the listener and one bucket: 20 KB + 0.34·B + 430/B KB at S = 1000, least near
 * B = 36; B = 32 gives 42 KB instead of 450 (and a split change 15 KB instead of 430). The
 * split adds ~10 KB to the listener, so to every proxy's initial sync and to every listener
 * resend: 1 % of a proxy's ~1.1 MB at S = 1000, 6 % at S = 128 (where a new service then costs
 * 14 KB instead of 60), 12 % at S = 64 (13 instead of 31). Below K the saving is not worth it
 * and OSM's shape stays.
 */
export const OUTBOUND_ROUTE_SPLIT: OutboundRouteSplit = Object.freeze({ threshold: 128, buckets: 32 });

/** The bucket of every headless service on a split port ({@link outboundRouteLayout}). */
export const HEADLESS_BUCKET = 0;

/**
 * The bucket of a (not headless) service on a split port: FNV-1a (32 bit) of `<namespace>/<name>` modulo
 * `buckets`. A function of the service's name alone, so a new service never moves another one.
 */
export function outboundRouteBucket(svc: Pick<MeshService, 'namespace' | 'name'>, buckets: number): number {
  return fnv1a(`${svc.namespace}/${svc.name}`) % buckets;
}

/** FNV-1a, 32 bit, of `text`'s UTF-16 code units. */
function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return hash;
}

/**
 * Which outbound route configuration of a proxy serves each of its HTTP destinations
 * ({@link outboundRouteLayout}).
 */
export interface OutboundRouteLayout {
  /** The ports whose routes are split into buckets. */
  readonly splitPorts: ReadonlySet<number>;
  /** The bucket of `svc` when its port is split, else undefined. */
  bucketOf(svc: MeshService): number | undefined;
  /** The name of the route configuration holding `svc`'s virtual host. */
  routeConfigNameOf(svc: MeshService): string;
}

/**
 * How a view's outbound HTTP routes are laid out: a port with more than `split.threshold` HTTP
 * destinations, each of them with a ClusterIP or headless, is split into `split.buckets`
 * route configurations `rds-outbound.<port>.<b>` by {@link outboundRouteBucket}, every headless
 * destination in {@link HEADLESS_BUCKET} (pods' IPs, unlike ClusterIPs, may be shared); any other port
 * keeps one `rds-outbound.<port>` (OSM v1.2), and so does a port with a destination without a
 * ClusterIP (its chain matches the port alone, so RDS must route by Host among all of them).
 */
export function outboundRouteLayout(view: OutboundView, split: OutboundRouteSplit = OUTBOUND_ROUTE_SPLIT): OutboundRouteLayout {
  const counts = new Map<number, number>();
  const unaddressed = new Set<number>();
  for (const { service: svc } of view.destinations) {
    if (!isHttpLike(svc)) continue;
    counts.set(svc.port, (counts.get(svc.port) ?? 0) + 1);
    if (!svc.headless && svc.clusterIPs.length === 0) unaddressed.add(svc.port);
  }
  const splitPorts = new Set([...counts].filter(([port, n]) => n > split.threshold && !unaddressed.has(port)).map(([port]) => port));
  // Headless services are matched by their pods' IPs, which two of them may share (a pod behind
  // two headless Services): a chain matches an address once, so they all go to one bucket, whose
  // route configuration then routes each by Host, as an unsplit port's does.
  const bucketOf = (svc: MeshService): number | undefined => (splitPorts.has(svc.port) ? (svc.headless ? HEADLESS_BUCKET : outboundRouteBucket(svc, split.buckets)) : undefined);
  return { splitPorts, bucketOf, routeConfigNameOf: (svc) => outboundRouteConfigName(svc.port, bucketOf(svc)) };
}

/** Name of the inbound route configuration for a port: `rds-inbound.<port>` (OSM v1.2). */
export function inboundRouteConfigName(port: number): string {
  return `rds-inbound.${port}`;
}

/** Filter name of the HTTP RBAC filter, the key of its per-route configuration. */
export const HTTP_RBAC_FILTER = 'envoy.filters.http.rbac';

/** True for ports served through the HTTP connection manager (HTTP and gRPC). */
export function isHttpLike(svc: MeshService): boolean {
  return svc.protocol === 'http' || svc.protocol === 'grpc';
}

function sortByName<T extends { name?: string }>(list: T[]): T[] {
  return list.sort((a, b) => ((a.name ?? '') < (b.name ?? '') ? -1 : (a.name ?? '') > (b.name ?? '') ? 1 : 0));
}

/** Regex for an HTTP method list, `^(GET|POST)$`. Method names are tokens, so no escaping is needed beyond a check. */
function methodsRegex(methods: readonly string[]): string {
  return `^(${methods.map((m) => m.replace(/[^A-Za-z0-9_-]/g, '')).join('|')})$`;
}

/**
 * The Envoy route match of an SMI HTTPMatch: `pathRegex` as an RE2 safe_regex (no path →
 * `prefix: /`), `methods` as one `:method` regex header matcher (none when any method), and
 * each header as a regex header matcher, `host` as `:authority` (SMI specs v1alpha4 `HTTPMatch`).
 */
export function routeMatch(match: HttpRouteMatch): Route['match'] {
  const headers: HeaderMatcher[] = [];
  if (match.methods.length > 0) headers.push({ name: ':method', string_match: { safe_regex: { regex: methodsRegex(match.methods) } } });
  for (const [name, regex] of Object.entries(match.headers).sort(byKey)) {
    // HTTP/2 and Envoy carry the Host header as the `:authority` pseudo-header.
    const header = name.toLowerCase() === 'host' ? ':authority' : name.toLowerCase();
    headers.push({ name: header, string_match: { safe_regex: { regex } } });
  }
  return {
    ...(match.pathRegex ? { safe_regex: { regex: match.pathRegex } } : { prefix: '/' }),
    ...(headers.length > 0 ? { headers } : {}),
  };
}

/**
 * Outbound RDS of a proxy: per destination port, `rds-outbound.<port>` with a virtual host
 * per HTTP destination on that port (domains: {@link serviceHostnames}), routing every path to
 * the service's cluster, or to weighted clusters when a TrafficSplit applies (no
 * `total_weight`, deprecated in Envoy: the weights' sum is the total). A port with more than
 * {@link OUTBOUND_ROUTE_SPLIT}'s threshold of destinations has instead one
 * `rds-outbound.<port>.<b>` per non-empty bucket ({@link outboundRouteLayout}), holding the
 * virtual hosts of that bucket's services only, so a new or changed service changes one of them.
 */
export function generateOutboundRouteConfigurations(context: GenerationContext, profile: ProxyProfile): NamedResource<RouteConfiguration>[] {
  const { snapshot } = context;
  const clientNamespace = identityParts(profile.identity).namespace;
  const view = context.outboundView(profile.identity);
  // Without Retry policies of its own, the route configurations depend only on the view (its
  // services, clusters and weights) and the client's namespace (short host names): identities
  // sharing both share the objects, and so do snapshots that keep the view. Each route
  // configuration is shared on its own as well, from its destinations alone: a new service
  // changes the view, and the configurations of the buckets it is not in stay the same objects.
  if (outboundRoutesShareable(snapshot, profile.identity)) {
    // The grouping is the view's alone (one per view, whatever the client's namespace).
    const { groups } = context.shared('RouteConfigurationGroups', `outbound ${context.outboundViewId(view)}`, [view], sharedOutboundRouteGroups);
    // Named by content: identities of different views (SMI) that hold the same destinations in
    // a route configuration share it, and one view's does not evict another's.
    return groups.map((group) =>
      context.shared('RouteConfiguration', `outbound ${clientNamespace} ${group.key}`, [clientNamespace, ...group.inputs], sharedOutboundRouteConfiguration),
    );
  }
  return outboundRouteGroups(view).map((group) =>
    outboundRouteConfiguration(group.name, group.destinations, clientNamespace, (svc) => retryPolicyFor(snapshot, profile.identity, svc)),
  );
}

/**
 * Whether the outbound route configurations of proxies of `identity` are their outbound view's
 * and client namespace's alone: no Retry policy names `identity` as its source (its retry
 * policies are in the routes), so every proxy of one view and namespace gets the same objects.
 */
export function outboundRoutesShareable(snapshot: MeshSnapshot, identity: ServiceIdentity): boolean {
  return !snapshot.retryPolicies.some((r) => r.source === identity);
}

/** The HTTP destinations of one outbound route configuration, in view order. */
interface OutboundRouteGroup {
  readonly name: string;
  readonly destinations: readonly OutboundDestination[];
}

/** The view's HTTP destinations grouped by the route configuration holding them ({@link outboundRouteLayout}), sorted by port then bucket. */
function outboundRouteGroups(view: OutboundView): OutboundRouteGroup[] {
  const layout = outboundRouteLayout(view);
  const groups = new Map<string, { port: number; bucket: number; destinations: OutboundDestination[] }>();
  for (const dest of view.destinations) {
    const svc = dest.service;
    if (!isHttpLike(svc)) continue;
    const name = layout.routeConfigNameOf(svc);
    let group = groups.get(name);
    if (!group) {
      group = { port: svc.port, bucket: layout.bucketOf(svc) ?? -1, destinations: [] };
      groups.set(name, group);
    }
    group.destinations.push(dest);
  }
  return [...groups]
    .sort(([, a], [, b]) => a.port - b.port || a.bucket - b.bucket)
    .map(([name, g]) => ({ name, destinations: g.destinations }));
}

/**
 * The inputs of a shared route configuration but the client's namespace (which comes first): the
 * configuration's name, then per destination its service, its number of targets, and each
 * target's cluster and weight.
 */
type RouteConfigurationInputs = [name: string, ...destinations: unknown[]];

/** The {@link RouteConfigurationInputs} of a group of destinations. */
function routeConfigurationInputs(name: string, destinations: readonly OutboundDestination[]): RouteConfigurationInputs {
  const out: RouteConfigurationInputs = [name];
  for (const d of destinations) {
    out.push(d.service, d.targets.length);
    for (const t of d.targets) out.push(t.cluster, t.weight);
  }
  return out;
}

/** The destinations of {@link routeConfigurationInputs}. */
function destinationsOf(inputs: readonly unknown[]): OutboundDestination[] {
  const out: OutboundDestination[] = [];
  for (let i = 0; i < inputs.length; ) {
    const service = inputs[i] as MeshService;
    const count = inputs[i + 1] as number;
    const targets: WeightedCluster[] = [];
    for (let j = 0; j < count; j++) targets.push({ cluster: inputs[i + 2 + 2 * j] as string, weight: inputs[i + 3 + 2 * j] as number });
    out.push({ service, targets });
    i += 2 + 2 * count;
  }
  return out;
}

/**
 * The route configuration groups of a view, each with a key of its content (its name, size and
 * a hash of its {@link outboundDestinationKey}s) and the inputs of its shared route
 * configuration but the client's namespace ({@link routeConfigurationInputs}), boxed.
 */
function sharedOutboundRouteGroups(view: OutboundView): { groups: { key: string; inputs: RouteConfigurationInputs }[] } {
  return {
    // A hash, not the text, keeps the names short; two groups whose hashes collide only take turns
    // in one entry (its inputs are compared), never share an object.
    groups: outboundRouteGroups(view).map((g) => ({
      key: `${g.name} ${g.destinations.length} ${fnv1a(g.destinations.map(outboundDestinationKey).join(';')).toString(36)}`,
      inputs: routeConfigurationInputs(g.name, g.destinations),
    })),
  };
}

/** One outbound route configuration of clients without Retry policies of their own, from {@link routeConfigurationInputs}. */
function sharedOutboundRouteConfiguration(clientNamespace: string, name: string, ...destinations: unknown[]): NamedResource<RouteConfiguration> {
  return outboundRouteConfiguration(name, destinationsOf(destinations), clientNamespace, () => undefined);
}

/** One outbound route configuration: a virtual host per destination, from the client's namespace and its retry policy per service. */
function outboundRouteConfiguration(
  name: string,
  destinations: readonly OutboundDestination[],
  clientNamespace: string,
  retryPolicyTo: (svc: MeshService) => RetryPolicy | undefined,
): NamedResource<RouteConfiguration> {
  const hosts: VirtualHost[] = [];
  const taken = new Set<string>();
  for (const dest of destinations) {
    const svc = dest.service;
    // Two virtual hosts of one route configuration may not share a domain (Envoy rejects it);
    // the first service (in snapshot order) keeps a contested name, e.g. a reused ClusterIP.
    const domains = serviceHostnames(svc, clientNamespace).filter((d) => !taken.has(d));
    domains.forEach((d) => taken.add(d));
    if (domains.length === 0) continue;
    const action: Route['route'] =
      dest.targets.length === 1 && dest.targets[0].weight === 1
        ? { cluster: dest.targets[0].cluster }
        : {
            weighted_clusters: {
              // No total_weight: Envoy deprecates it ("Using deprecated option
              // 'envoy.config.route.v3.WeightedCluster.total_weight' … will be removed from Envoy
              // soon", Envoy 1.40) and takes the sum of the weights. Proxyless clients get it (proxyless.ts).
              clusters: dest.targets.map((t) => ({ name: t.cluster, weight: { value: t.weight } })),
            },
          };
    const retry = retryPolicyTo(svc);
    hosts.push({
      name: `outbound_virtual-host|${serviceFqdn(svc)}`,
      domains,
      routes: [{ name: `outbound_route|${serviceFqdn(svc)}`, match: { prefix: '/' }, route: retry ? { ...action, retry_policy: retry } : action }],
    });
  }
  return { name, resource: { name, virtual_hosts: sortByName(hosts), validate_clusters: { value: false } } };
}

interface InboundRule {
  match: Route['match'];
  name: string;
  /** The route's path as OSM v1.2 writes it (the match's `pathRegex`, `.*` for every path): what UpstreamTrafficSetting `httpRoutes[].path` names. */
  path: string;
  sources: ServiceIdentity[];
}

/**
 * OSM v1.2's path regex of a route that matches every path (`constants.RegexMatchAll`): the
 * path of permissive mode's route and of an HTTPRouteGroup match without `pathRegex`, which an
 * UpstreamTrafficSetting `httpRoutes[].path` of `.*` names (OSM's per-route rate limit demo).
 */
const MATCH_ALL_PATH = '.*';

/** The allowed (match, sources) pairs for requests to `svc` in SMI mode, from the TrafficTargets whose destination is the proxy's identity. */
function inboundRules(targets: readonly TrafficTargetPolicy[], svc: MeshService): InboundRule[] {
  const rules = new Map<string, InboundRule>();
  const add = (name: string, match: Route['match'], path: string, sources: readonly ServiceIdentity[]): void => {
    const key = JSON.stringify(match);
    const rule = rules.get(key) ?? { match, name, path, sources: [] };
    rule.sources.push(...sources);
    rules.set(key, rule);
  };
  for (const tt of targets) {
    if (!targetCoversPort(tt, svc)) continue;
    for (const m of tt.httpMatches) add(m.name, routeMatch(m), m.pathRegex ?? MATCH_ALL_PATH, tt.sources);
    // A TCPRoute that covers an HTTP port allows every request on it.
    if (tt.tcpPorts === 'any' || (tt.tcpPorts && (tt.tcpPorts.includes(svc.port) || tt.tcpPorts.includes(svc.targetPort)))) {
      add(`${tt.name}/tcp`, { prefix: '/' }, MATCH_ALL_PATH, tt.sources);
    }
  }
  return [...rules.values()];
}

/**
 * Inbound RDS of a proxy: per target port it serves over HTTP, `rds-inbound.<port>` with a
 * virtual host per service (all its host names, plus those of TrafficSplit apex services it
 * backs; a contested domain stays with the first host). In permissive mode one route sends
 * every request to the local cluster; in SMI mode there is one route per allowed
 * HTTPRouteGroup match, each with per-route RBAC naming the sources allowed to use it.
 */
export function generateInboundRouteConfigurations(context: GenerationContext, profile: ProxyProfile): readonly NamedResource<RouteConfiguration>[] {
  // From the inbound side alone: one list per identity, the same objects while the side is.
  return context.shared('RouteConfigurations', `inbound ${profile.identity}`, [inboundSide(context, profile.identity)], inboundRouteConfigurations);
}

/** {@link generateInboundRouteConfigurations} from the proxy's {@link InboundSide} alone. */
function inboundRouteConfigurations(side: InboundSide): readonly NamedResource<RouteConfiguration>[] {
  const byPort = new Map<number, VirtualHost[]>();
  const domainsTaken = new Map<number, Set<string>>();
  for (const { service: svc, setting, apexes } of side.services) {
    if (!isHttpLike(svc)) continue;
    const taken = domainsTaken.get(svc.targetPort) ?? new Set<string>();
    domainsTaken.set(svc.targetPort, taken);
    const domains = [...serviceHostnames(svc, svc.namespace), ...apexes.flatMap((a) => serviceHostnames(a, a.namespace))].filter(
      (d) => !taken.has(d) && (taken.add(d), true),
    );
    if (domains.length === 0) continue;
    const cluster = localClusterName(svc);
    // Each route with its OSM path, which UpstreamTrafficSetting httpRoutes are matched against.
    const routes: { route: Route; path: string }[] = !side.smi
      ? [{ route: { name: `inbound_route|${serviceFqdn(svc)}`, match: { prefix: '/' }, route: { cluster } }, path: MATCH_ALL_PATH }]
      : inboundRules(side.targets, svc).map((rule) => ({
          path: rule.path,
          route: {
            name: rule.name,
            match: rule.match,
            route: { cluster },
            typed_per_filter_config: {
              [HTTP_RBAC_FILTER]: typedConfig(ExtensionType.HttpRbacPerRoute, {
                rbac: {
                  rules: {
                    action: 'ALLOW',
                    policies: { [rule.name]: { permissions: [{ any: true }], principals: identityPrincipals(rule.sources) } },
                  },
                },
              }),
            },
          },
        }));
    const statPrefix = `inbound_${localClusterName(svc)}`;
    for (const { route, path } of routes) {
      // A route whose OSM path is exactly an httpRoutes path gets that route's own limit
      // (OSM v1.2 `NewRouteWeightedCluster`): `.*` names the routes for every path.
      const perRoute = setting?.httpRoutes.find((r) => r.path === path);
      if (perRoute) {
        route.typed_per_filter_config = {
          ...route.typed_per_filter_config,
          [HTTP_LOCAL_RATE_LIMIT_FILTER]: httpLocalRateLimitConfig(`${statPrefix}_route`, perRoute.rateLimit),
        };
      }
    }
    const hosts = byPort.get(svc.targetPort) ?? [];
    hosts.push({
      name: `inbound_virtual-host|${serviceFqdn(svc)}`,
      domains,
      routes: routes.map((r) => r.route),
      ...(setting?.httpRateLimit
        ? { typed_per_filter_config: { [HTTP_LOCAL_RATE_LIMIT_FILTER]: httpLocalRateLimitConfig(statPrefix, setting.httpRateLimit) } }
        : {}),
    });
    byPort.set(svc.targetPort, hosts);
  }
  return Object.freeze(
    [...byPort.entries()]
      .sort(([a], [b]) => a - b)
      .map(([port, hosts]) => {
        const name = inboundRouteConfigName(port);
        return { name, resource: { name, virtual_hosts: sortByName(hosts), validate_clusters: { value: false } } };
      }),
  );
}

/** RDS for one proxy: its outbound and inbound route configurations, sorted by name. */
export function generateRouteConfigurations(context: GenerationContext, profile: ProxyProfile): NamedResource<RouteConfiguration>[] {
  return [...generateOutboundRouteConfigurations(context, profile), ...generateInboundRouteConfigurations(context, profile)];
}

/**
 * Whether `change` makes a sidecar's RouteConfigurations regenerate (Istio's `cdsNeedsPush` idea):
 * for a change of TrafficSplit weights and any change but one that only moves endpoints (EDS) or
 * only rotates the certificate (SDS).
 */
export function routeConfigurationsNeedPush(change: PushChange): boolean {
  const kind = meshChangeKind(change);
  return kind === 'split-weights' || kind === 'other';
}
