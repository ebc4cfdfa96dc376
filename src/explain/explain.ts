/**
 * `trellis explain`: whether one request from a source identity (or pod) to a service port is
 * allowed, and why. Pure: `(MeshSnapshot, store, query) → Explanation`. It generates, with the
 * project's own generators, the source identity's outbound listener, route configurations and
 * clusters and each destination identity's inbound listener and route configurations, and runs
 * the request through them as Envoy would (`envoy-match.ts`): the answer is what Envoy does with
 * what it is sent. The catalog is read only to name the policies behind what matched (which
 * TrafficTarget, HTTPRouteGroup match, TrafficSplit, IngressBackend).
 */
import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import type { FilterChain } from '../api/generated/envoy/config/listener/v3/FilterChain.js';
import type { Listener } from '../api/generated/envoy/config/listener/v3/Listener.js';
import type { Route } from '../api/generated/envoy/config/route/v3/Route.js';
import type { RouteConfiguration } from '../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import { clusterName, identitySpiffeId, serviceFqdn, serviceKey } from '../catalog/names.js';
import { inboundTrafficTargets, meshServicePorts, targetCoversPort, trafficSplitFor } from '../catalog/traffic-policy.js';
import type { MeshService, MeshSnapshot, TrafficTargetPolicy } from '../catalog/types.js';
import { generateClusters } from '../envoy/cds/cds.js';
import { GenerationContext, type ProxyProfile } from '../envoy/context.js';
import { generateInboundListeners, generateOutboundListeners } from '../envoy/lds/lds.js';
import { generateIngressRouteConfigurations } from '../envoy/rds/ingress.js';
import { generateInboundRouteConfigurations, generateOutboundRouteConfigurations, HTTP_RBAC_FILTER, routeMatch } from '../envoy/rds/rds.js';
import type { NamedResource } from '../envoy/resource.js';
import { identityParts, serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import type { Pod } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import {
  filterConfig,
  rbacAdmitting,
  rbacPolicies,
  routeMatches,
  selectFilterChain,
  selectVirtualHost,
  type ConnectionFacts,
  type RbacPolicyView,
  type RequestFacts,
} from './envoy-match.js';

/** The request to explain, as `trellis explain` and `/debug/explain` take it. */
export interface ExplainQuery {
  /** The source identity `NS/SA` (exclusive with {@link fromPod}). */
  readonly from?: string;
  /** The source pod `NS/POD`: its service account and IPs (exclusive with {@link from}). */
  readonly fromPod?: string;
  /** The destination `SVC.NS:PORT` (the Service's port, what the client dials). */
  readonly to: string;
  /** The request path (default `/`), with a query string if any. */
  readonly path?: string;
  /** The HTTP method (default `GET`). */
  readonly method?: string;
  /** Request headers by name (any case); `host` sets `:authority` (default `SVC.NS:PORT`). */
  readonly headers?: Readonly<Record<string, string>>;
}

/** A query that names something the mesh does not have, or is malformed (`trellis explain` exits 2). */
export class ExplainError extends Error {
  /** `invalid`: the query itself is wrong; `unknown`: it names an identity, pod, service or port that does not exist. */
  readonly kind: 'invalid' | 'unknown';
  constructor(kind: 'invalid' | 'unknown', message: string) {
    super(message);
    this.name = 'ExplainError';
    this.kind = kind;
  }
}

/** An RBAC filter's verdict on the source: its policies and the one admitting the source (none: denied). */
export interface RbacVerdict {
  /** `l4_rbac` (network, on the chain) or `http` (per route). */
  readonly filter: string;
  readonly policies: readonly RbacPolicyView[];
  /** The principal the source presents (its SPIFFE ID), or null without a certificate. */
  readonly principal: string | null;
  /** The policy admitting the principal; null when none does (denied). */
  readonly admittedBy: string | null;
}

/** A route of a route configuration that was tried before the one taken (or all, when none matched), and why it did not match. */
export interface RouteMiss {
  readonly route: string;
  readonly reason: string;
}

/** What one route configuration did with the request. */
export interface RouteHop {
  readonly routeConfiguration: string;
  readonly virtualHost: string | null;
  readonly route: string | null;
  /** The routes tried and not taken (Envoy takes the first that matches). */
  readonly misses: readonly RouteMiss[];
  /** The route's clusters with weights (one, weight 1, without a split). */
  readonly clusters: readonly { readonly name: string; readonly weight: number }[];
}

/** The source proxy's outbound side. */
export interface OutboundExplanation {
  readonly listener: string | null;
  readonly filterChain: string | null;
  /** The address dialled: ClusterIP (or an endpoint of a headless service) and port. */
  readonly address: string;
  /** The HTTP route taken (HTTP chains). */
  readonly route: RouteHop | null;
  /** The clusters traffic goes to, with weights (from the route or `tcp_proxy`). */
  readonly clusters: readonly { readonly name: string; readonly weight: number }[];
  /** The TrafficSplit whose apex is the service, as the catalog resolved it. */
  readonly trafficSplit: { readonly name: string; readonly backends: readonly { readonly service: string; readonly weight: number }[] } | null;
  /** The TrafficTargets that let the source reach the service (SMI mode). */
  readonly trafficTargets: readonly string[];
  /** Why nothing is sent (no chain, no virtual host, no route), or null. */
  readonly denied: string | null;
  /** `passthrough`: egress sends it out unencrypted to the original destination (no mesh route). */
  readonly passthrough: boolean;
}

/** The destination proxy's inbound side for one backend identity. */
export interface InboundExplanation {
  /** The backend service (`NS/SVC`), its upstream cluster and the share of requests it gets. */
  readonly service: string;
  readonly cluster: string;
  readonly weight: number;
  readonly identity: ServiceIdentity;
  /** `mesh`: mTLS from the source's sidecar; `plaintext`: from outside the mesh (ingress, passthrough). */
  readonly via: 'mesh' | 'plaintext';
  /** False when the source proxy sends nothing there (shown for what the destination's RBAC holds). */
  readonly reached: boolean;
  readonly allowed: boolean;
  readonly filterChain: string | null;
  readonly networkRbac: RbacVerdict | null;
  readonly route: RouteHop | null;
  readonly httpRbac: RbacVerdict | null;
  /** The local cluster the request lands on, when allowed. */
  readonly localCluster: string | null;
  /** The policies behind the route taken: TrafficTargets (with their HTTPRouteGroup match or TCPRoute), an IngressBackend, permissive mode. */
  readonly policies: readonly string[];
  /** Why it is denied (the first step that refused), or null. */
  readonly denied: string | null;
}

/** The answer of {@link explainRequest}. */
export interface Explanation {
  /** `allowed`: every backend takes it; `denied`: none does; `partial`: some of a split's backends do. */
  readonly decision: 'allowed' | 'denied' | 'partial';
  readonly mode: 'smi' | 'permissive';
  readonly meshConfig: string | null;
  readonly generation: number;
  readonly request: {
    readonly source: ServiceIdentity;
    readonly sourcePod: string | null;
    readonly sourceIps: readonly string[];
    /** Whether the source runs in a monitored namespace (has a sidecar); a source outside arrives in plaintext (ingress). */
    readonly sourceInMesh: boolean;
    readonly destination: string;
    readonly service: string;
    readonly port: number;
    /** The port's protocol (`http`, `grpc`, `tcp`, `tcp-server-first`): the path, method and headers apply to HTTP and gRPC only. */
    readonly protocol: string;
    readonly authority: string;
    readonly path: string;
    readonly method: string;
    readonly headers: Readonly<Record<string, string>>;
  };
  /** The source proxy's outbound side (null for a source outside the mesh). */
  readonly outbound: OutboundExplanation | null;
  /** Per backend identity, the destination proxy's inbound side. */
  readonly inbound: readonly InboundExplanation[];
  /** The explanation in a few sentences. */
  readonly reasons: readonly string[];
}

/** Most source IPs listed (a service account may run many pods). */
const MAX_SOURCE_IPS = 16;

const NAME = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;

function splitNamespaced(flag: string, value: string, what: string): [string, string] {
  const parts = value.split('/');
  if (parts.length !== 2 || !NAME.test(parts[0]) || !NAME.test(parts[1])) throw new ExplainError('invalid', `${flag} "${value}" is not NAMESPACE/${what}`);
  return [parts[0], parts[1]];
}

/** `SVC.NS:PORT` → its parts. */
function parseDestination(to: string): { name: string; namespace: string; port: number } {
  const m = /^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?):(\d{1,5})$/.exec(to);
  const port = m ? Number(m[5]) : 0;
  if (!m || port < 1 || port > 65535) throw new ExplainError('invalid', `--to "${to}" is not SERVICE.NAMESPACE:PORT (e.g. bookstore.bookstore:14001)`);
  return { name: m[1], namespace: m[3], port };
}

function podIps(pod: Pod): string[] {
  const ips = [...(pod.status?.podIPs ?? []).map((p) => p.ip), ...(pod.status?.podIP ? [pod.status.podIP] : [])];
  return [...new Set(ips)];
}

/** The source of the query: identity, pod, IPs; throws for an unknown one. */
function resolveSource(snapshot: MeshSnapshot, store: StoreReader, query: ExplainQuery): { identity: ServiceIdentity; pod: string | null; ips: string[] } {
  if ((query.from === undefined) === (query.fromPod === undefined)) throw new ExplainError('invalid', 'give exactly one of --from NAMESPACE/SERVICEACCOUNT and --from-pod NAMESPACE/POD');
  if (query.fromPod !== undefined) {
    const [namespace, name] = splitNamespaced('--from-pod', query.fromPod, 'POD');
    const pod = store.get<Pod>('Pod', namespace, name);
    if (!pod) throw new ExplainError('unknown', `pod ${namespace}/${name} not found`);
    return { identity: serviceIdentity(namespace, pod.spec?.serviceAccountName || 'default'), pod: `${namespace}/${name}`, ips: podIps(pod).slice(0, MAX_SOURCE_IPS) };
  }
  const [namespace, account] = splitNamespaced('--from', query.from ?? '', 'SERVICEACCOUNT');
  const identity = serviceIdentity(namespace, account);
  const pods = store.list<Pod>('Pod', namespace).filter((p) => (p.spec?.serviceAccountName || 'default') === account);
  const known = pods.length > 0 || store.get('ServiceAccount', namespace, account) !== undefined || snapshot.servicesByIdentity.has(identity);
  if (!known) throw new ExplainError('unknown', `identity ${identity} unknown: no ServiceAccount ${namespace}/${account} and no pod runs as it`);
  return { identity, pod: null, ips: [...new Set(pods.flatMap(podIps))].slice(0, MAX_SOURCE_IPS) };
}

/** The MeshService `SVC.NS:PORT`; throws naming what is missing. */
function resolveDestination(snapshot: MeshSnapshot, to: string): MeshService {
  const { name, namespace, port } = parseDestination(to);
  const ports = meshServicePorts(snapshot, namespace, name);
  if (ports.length === 0) {
    const why = snapshot.namespaces.has(namespace) ? 'no such Service' : `namespace ${namespace} is not in mesh ${snapshot.meshName}`;
    throw new ExplainError('unknown', `service ${namespace}/${name} is not a service of the mesh (${why})`);
  }
  const svc = ports.find((p) => p.port === port);
  if (!svc) throw new ExplainError('unknown', `service ${namespace}/${name} has no port ${port} (its ports: ${ports.map((p) => p.port).join(', ')})`);
  return svc;
}

function byName<T extends object>(resources: readonly NamedResource<T>[], name: string | undefined): T | undefined {
  return name === undefined ? undefined : resources.find((r) => r.name === name)?.resource;
}

type Weighted = { name: string; weight: number };

/** The clusters of a route action or `tcp_proxy` config: `cluster`, or `weighted_clusters.clusters` with their weights. */
function actionClusters(action: { cluster?: string; weighted_clusters?: { clusters?: { name?: string; weight?: { value?: number } | number }[] } } | undefined): Weighted[] {
  if (!action) return [];
  if (action.cluster) return [{ name: action.cluster, weight: 1 }];
  return (action.weighted_clusters?.clusters ?? []).map((c) => ({ name: c.name ?? '', weight: typeof c.weight === 'number' ? c.weight : (c.weight?.value ?? 0) }));
}

const HCM = 'envoy.filters.network.http_connection_manager';
const TCP_PROXY = 'envoy.filters.network.tcp_proxy';
const NETWORK_RBAC = 'envoy.filters.network.rbac';

/** The request through one route configuration: virtual host by authority, then the first route that matches. */
function routeThrough(configs: readonly NamedResource<RouteConfiguration>[], name: string, request: RequestFacts): { hop: RouteHop; route: Route | undefined; denied: string | null } {
  const config = byName(configs, name);
  const empty = { routeConfiguration: name, virtualHost: null, route: null, misses: [], clusters: [] };
  if (!config) return { hop: empty, route: undefined, denied: `route configuration ${name} is not generated (404)` };
  const host = selectVirtualHost(config, request.authority);
  if (!host) return { hop: empty, route: undefined, denied: `no virtual host of ${name} serves host ${request.authority} (404)` };
  const misses: RouteMiss[] = [];
  for (const route of host.routes ?? []) {
    const result = routeMatches(route, request);
    if (!result.matched) {
      misses.push({ route: route.name ?? '(unnamed)', reason: result.reason });
      continue;
    }
    const hop = { routeConfiguration: name, virtualHost: host.name ?? null, route: route.name ?? null, misses, clusters: actionClusters(route.route as Parameters<typeof actionClusters>[0]) };
    return { hop, route, denied: null };
  }
  const hop = { routeConfiguration: name, virtualHost: host.name ?? null, route: null, misses, clusters: [] };
  return { hop, route: undefined, denied: `no route of virtual host ${host.name ?? ''} in ${name} matches ${request.method} ${request.path} (404)${missSummary(misses)}` };
}

/** The routes that did not match and why, for a denial's one line: at most {@link MAX_MISSES_SAID}, then how many more. */
function missSummary(misses: readonly RouteMiss[]): string {
  if (misses.length === 0) return '';
  const said = misses.slice(0, MAX_MISSES_SAID).map((m) => `${m.route}: ${m.reason}`);
  const more = misses.length > MAX_MISSES_SAID ? `; ${misses.length - MAX_MISSES_SAID} more` : '';
  return `; not matched: ${said.join('; ')}${more}`;
}

const MAX_MISSES_SAID = 3;

/** An RBAC filter's verdict for `principal`. */
function rbacVerdict(filter: string, config: Parameters<typeof rbacPolicies>[0], principal: string | undefined): RbacVerdict {
  const policies = rbacPolicies(config);
  return { filter, policies, principal: principal ?? null, admittedBy: rbacAdmitting(policies, principal)?.name ?? null };
}

/** What one generated proxy configuration holds for `identity` (only the parts explain reads). */
interface ProxyView {
  readonly outboundListener: Listener | undefined;
  readonly outboundRoutes: readonly NamedResource<RouteConfiguration>[];
  readonly clusters: readonly NamedResource<Cluster>[];
  readonly inboundListener: Listener | undefined;
  readonly inboundRoutes: readonly NamedResource<RouteConfiguration>[];
}

/** The generators' output for a sidecar of `identity`, each part generated on first use. */
function proxyView(context: GenerationContext, identity: ServiceIdentity): ProxyView {
  const profile: ProxyProfile = { identity, clientType: 'envoy' };
  const once = <T>(make: () => T): (() => T) => {
    let value: { v: T } | undefined;
    return () => (value ??= { v: make() }).v;
  };
  const outbound = once(() => generateOutboundListeners(context, profile)[0]?.resource);
  const outboundRoutes = once(() => generateOutboundRouteConfigurations(context, profile));
  const clusters = once(() => generateClusters(context, profile));
  const inbound = once(() => generateInboundListeners(context, profile)[0]?.resource);
  const inboundRoutes = once(() => [...generateInboundRouteConfigurations(context, profile), ...generateIngressRouteConfigurations(context, profile)]);
  return {
    get outboundListener() { return outbound(); },
    get outboundRoutes() { return outboundRoutes(); },
    get clusters() { return clusters(); },
    get inboundListener() { return inbound(); },
    get inboundRoutes() { return inboundRoutes(); },
  };
}

/** The SNI and subject alternative names an upstream cluster's TLS context holds. */
function clusterTls(cluster: Cluster | undefined): { sni: string | undefined; sans: string[] | undefined } {
  const tls = cluster?.transport_socket?.typed_config as { sni?: string; common_tls_context?: { combined_validation_context?: { default_validation_context?: { match_typed_subject_alt_names?: { matcher?: { exact?: string } }[] } } } } | undefined;
  const sans = tls?.common_tls_context?.combined_validation_context?.default_validation_context?.match_typed_subject_alt_names?.map((m) => m.matcher?.exact ?? '');
  return { sni: tls?.sni, sans };
}

/** The TrafficTargets behind an inbound route (by its match) or chain, for `source`. */
function targetsBehind(snapshot: MeshSnapshot, identity: ServiceIdentity, svc: MeshService, source: ServiceIdentity, route: Route | undefined): string[] {
  const targets = inboundTrafficTargets(snapshot, identity).filter((tt) => tt.sources.includes(source) && targetCoversPort(tt, svc));
  if (!route) return targets.map((tt) => `TrafficTarget ${tt.name}`);
  const wanted = JSON.stringify(route.match);
  const out: string[] = [];
  for (const tt of targets) {
    for (const m of tt.httpMatches) {
      if (JSON.stringify(routeMatch(m)) !== wanted) continue;
      const [ns, group, match] = m.name.split('/');
      out.push(`TrafficTarget ${tt.name}: HTTPRouteGroup ${ns}/${group} match ${match} (${describeMatch(m)})`);
    }
    if (route.name === `${tt.name}/tcp`) out.push(`TrafficTarget ${tt.name}: TCPRoute (every request on the port)`);
  }
  return out;
}

function describeMatch(m: TrafficTargetPolicy['httpMatches'][number]): string {
  const parts = [`path ${m.pathRegex ?? 'any'}`, `methods ${m.methods.length > 0 ? m.methods.join(',') : 'any'}`];
  const headers = Object.entries(m.headers);
  if (headers.length > 0) parts.push(`headers ${headers.map(([k, v]) => `${k}=${v}`).join(', ')}`);
  return parts.join('; ');
}

/** The destination side for one backend identity, as the request arrives (mesh mTLS with `sni`, or plaintext from `sourceIp`). */
function inboundFor(
  snapshot: MeshSnapshot,
  view: ProxyView,
  args: { backend: MeshService; cluster: string; weight: number; identity: ServiceIdentity; source: ServiceIdentity; via: 'mesh' | 'plaintext'; reached: boolean; sni: string | undefined; sourceIp: string | undefined; request: RequestFacts },
): InboundExplanation {
  const { backend, identity, source, via, request } = args;
  const base = { service: serviceKey(backend), cluster: args.cluster, weight: args.weight, identity, via, reached: args.reached };
  const deny = (denied: string, parts: Partial<InboundExplanation> = {}): InboundExplanation => ({
    ...base, allowed: false, filterChain: null, networkRbac: null, route: null, httpRbac: null, localCluster: null, policies: [], denied, ...parts,
  });
  const listener = view.inboundListener;
  if (!listener) return deny(`the proxies of ${identity} have no inbound listener (they serve no service)`);
  const facts: ConnectionFacts = {
    destinationPort: backend.targetPort,
    destinationIp: undefined,
    serverName: via === 'mesh' ? args.sni : undefined,
    transportProtocol: via === 'mesh' ? 'tls' : 'raw_buffer',
    sourceIp: args.sourceIp,
  };
  const selected = selectFilterChain(listener, facts);
  if (!selected.chain) {
    const hint = via === 'plaintext' ? ' (its mesh chains take only mTLS from a sidecar, and no IngressBackend chain matches)' : '';
    return deny(`${selected.reason}${hint}: the connection is closed`);
  }
  const chain: FilterChain = selected.chain;
  const filterChain = chain.name ?? null;
  const principal = via === 'mesh' ? identitySpiffeId(source) : undefined;
  const rbacConfig = filterConfig(chain, NETWORK_RBAC);
  const networkRbac = rbacConfig ? rbacVerdict(String(rbacConfig.stat_prefix ?? 'rbac'), rbacConfig as Parameters<typeof rbacPolicies>[0], principal) : null;
  if (networkRbac && !networkRbac.admittedBy) {
    return deny(`${networkRbac.filter} on chain ${filterChain} admits none of the source's principal ${principal ?? '(no client certificate)'}: the connection is closed`, { filterChain, networkRbac });
  }
  const ingress = snapshot.ingressBackends.filter((b) => serviceKey(b.service) === serviceKey(backend) && b.service.targetPort === backend.targetPort).map((b) => `IngressBackend ${b.name}`);
  const chainPolicies = (route: Route | undefined): string[] => {
    if (filterChain?.startsWith('ingress_')) return ingress;
    if (snapshot.settings.permissiveTrafficPolicyMode) return ['permissive mode: every identity may reach every service'];
    return targetsBehind(snapshot, identity, backend, source, route);
  };
  const tcp = filterConfig(chain, TCP_PROXY);
  if (tcp) {
    const clusters = actionClusters(tcp as Parameters<typeof actionClusters>[0]);
    return { ...base, allowed: true, filterChain, networkRbac, route: null, httpRbac: null, localCluster: clusters[0]?.name ?? null, policies: chainPolicies(undefined), denied: null };
  }
  const hcm = filterConfig(chain, HCM) as { rds?: { route_config_name?: string } } | undefined;
  const rdsName = hcm?.rds?.route_config_name;
  if (!rdsName) return deny(`chain ${filterChain} has neither an HTTP connection manager with RDS nor tcp_proxy`, { filterChain, networkRbac });
  const { hop, route, denied } = routeThrough(view.inboundRoutes, rdsName, request);
  if (!route) return deny(denied ?? 'no route', { filterChain, networkRbac, route: hop });
  const perRoute = (route.typed_per_filter_config?.[HTTP_RBAC_FILTER] as { rbac?: Parameters<typeof rbacPolicies>[0] } | undefined)?.rbac;
  const httpRbac = perRoute ? rbacVerdict('http', perRoute, principal) : null;
  if (httpRbac && !httpRbac.admittedBy) {
    return deny(`the RBAC of route ${hop.route ?? ''} admits none of the source's principal ${principal ?? '(no client certificate)'} (403)`, { filterChain, networkRbac, route: hop, httpRbac });
  }
  return { ...base, allowed: true, filterChain, networkRbac, route: hop, httpRbac, localCluster: hop.clusters[0]?.name ?? null, policies: chainPolicies(route), denied: null };
}

/** The MeshService of an upstream cluster name reached on `port` (the service port the client dialled). */
function serviceOfCluster(snapshot: MeshSnapshot, name: string, port: number): MeshService | undefined {
  const candidates = snapshot.services.filter((s) => clusterName(s) === name);
  return candidates.find((s) => s.port === port) ?? candidates[0];
}

/** The address a client dials for `svc`: its first ClusterIP, else (headless) its first endpoint's IP. */
function dialledIp(snapshot: MeshSnapshot, svc: MeshService): string | undefined {
  if (svc.clusterIPs.length > 0) return svc.clusterIPs[0];
  return snapshot.endpoints.get(clusterName(svc))?.[0]?.ip;
}

/** Why the catalog gives the source no route to `svc` (SMI mode): the TrafficTargets towards its identities and what they lack. */
function noTargetReason(snapshot: MeshSnapshot, source: ServiceIdentity, svc: MeshService): string {
  const identities = snapshot.identitiesByService.get(serviceKey(svc)) ?? [];
  if (identities.length === 0) return `no workload backs ${serviceKey(svc)} (no identity runs behind it), so no TrafficTarget can name it`;
  const towards = identities.flatMap((id) => inboundTrafficTargets(snapshot, id));
  const naming = towards.filter((tt) => tt.sources.includes(source));
  const listed = towards.map((tt) => `${tt.name} (sources ${[...new Set(tt.sources)].join(', ')})`).join('; ');
  if (naming.length === 0) {
    return `no TrafficTarget names ${source} as a source for ${serviceKey(svc)}'s identities (${identities.join(', ')})${towards.length > 0 ? `; the TrafficTargets towards them: ${listed}` : '; no TrafficTarget has them as destination'}`;
  }
  return `TrafficTarget${naming.length > 1 ? 's' : ''} ${naming.map((tt) => tt.name).join(', ')} name${naming.length > 1 ? '' : 's'} ${source} but cover${naming.length > 1 ? '' : 's'} no rule for port ${svc.port} (${svc.protocol}): an HTTPRouteGroup rule for an HTTP port, a TCPRoute listing the port`;
}

/**
 * Explains one request: from the source identity's (or pod's) sidecar through its outbound
 * listener, route and clusters (the TrafficSplit's backends with weights), to each backend
 * identity's inbound listener, network RBAC, route and per-route RBAC; a source outside the
 * mesh arrives in plaintext and can only be taken by an IngressBackend's chain. Every step is
 * read from the configuration the generators make for those identities from `snapshot`.
 * @param store the objects the snapshot was built from (pods and service accounts: the source's identity and IPs).
 * @throws ExplainError for a malformed query (`invalid`) or an identity, pod, service or port the mesh does not have (`unknown`).
 */
export function explainRequest(snapshot: MeshSnapshot, store: StoreReader, query: ExplainQuery): Explanation {
  const source = resolveSource(snapshot, store, query);
  const svc = resolveDestination(snapshot, query.to);
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(query.headers ?? {})) headers[k.toLowerCase()] = v;
  const authority = headers.host ?? `${svc.name}.${svc.namespace}:${svc.port}`;
  delete headers.host;
  const path = query.path ?? '/';
  if (!path.startsWith('/')) throw new ExplainError('invalid', `--path "${path}" does not start with /`);
  const method = (query.method ?? 'GET').toUpperCase();
  if (!/^[A-Z]+$/.test(method)) throw new ExplainError('invalid', `--method "${query.method ?? ''}" is not an HTTP method`);
  const request: RequestFacts = { authority, path, method, headers };
  const context = new GenerationContext(snapshot);
  const views = new Map<ServiceIdentity, ProxyView>();
  const viewOf = (id: ServiceIdentity) => views.get(id) ?? views.set(id, proxyView(context, id)).get(id)!;
  const { namespace } = identityParts(source.identity);
  const sourceInMesh = snapshot.namespaces.has(namespace);
  const permissive = snapshot.settings.permissiveTrafficPolicyMode;
  const reasons: string[] = [];
  const inbound: InboundExplanation[] = [];
  const ownBackends = (via: 'mesh' | 'plaintext', reached: boolean) => {
    for (const identity of snapshot.identitiesByService.get(serviceKey(svc)) ?? []) {
      inbound.push(inboundFor(snapshot, viewOf(identity), { backend: svc, cluster: clusterName(svc), weight: 1, identity, source: source.identity, via, reached, sni: undefined, sourceIp: source.ips[0], request }));
    }
  };
  let outbound: OutboundExplanation | null = null;
  if (!sourceInMesh) {
    reasons.push(`${source.identity} is outside the mesh (namespace ${namespace} is not monitored by ${snapshot.meshName}): its request reaches ${serviceKey(svc)}'s pods in plaintext, which only an IngressBackend's chain takes`);
    if (!snapshot.ingressBackends.some((b) => serviceKey(b.service) === serviceKey(svc) && b.service.port === svc.port)) reasons.push(`no IngressBackend names ${serviceKey(svc)} port ${svc.port}`);
    ownBackends('plaintext', true);
  } else {
    const split = trafficSplitFor(snapshot, svc);
    const view = viewOf(source.identity);
    const ip = dialledIp(snapshot, svc);
    const address = `${ip ?? `${svc.name}.${svc.namespace}`}:${svc.port}`;
    const trafficTargets = permissive ? [] : (snapshot.identitiesByService.get(serviceKey(svc)) ?? []).flatMap((id) => inboundTrafficTargets(snapshot, id)).filter((tt) => tt.sources.includes(source.identity) && targetCoversPort(tt, svc)).map((tt) => tt.name);
    const base = { address, trafficSplit: split ? { name: split.name, backends: split.backends } : null, trafficTargets, passthrough: false };
    const listener = view.outboundListener;
    const selected = listener ? selectFilterChain(listener, { destinationPort: svc.port, destinationIp: ip, serverName: undefined, transportProtocol: 'raw_buffer', sourceIp: undefined }) : undefined;
    const noRoute = (denied: string, parts: Partial<OutboundExplanation> = {}): OutboundExplanation => ({ ...base, listener: listener?.name ?? null, filterChain: null, route: null, clusters: [], denied, ...parts });
    if (!listener || !selected?.chain) {
      const why = !listener ? `${source.identity}'s proxies have no outbound listener (they may reach nothing)` : (selected as { reason: string }).reason;
      outbound = noRoute(`${why}: the connection is closed`);
      if (!permissive) reasons.push(noTargetReason(snapshot, source.identity, svc));
    } else if (selected.chain === listener.default_filter_chain) {
      outbound = noRoute(`no mesh filter chain matches ${address}: egress passthrough sends it unencrypted to the original destination`, { filterChain: selected.chain.name ?? null, passthrough: true });
      if (!permissive) reasons.push(noTargetReason(snapshot, source.identity, svc));
    } else {
      const chain = selected.chain;
      const tcp = filterConfig(chain, TCP_PROXY);
      const rds = (filterConfig(chain, HCM) as { rds?: { route_config_name?: string } } | undefined)?.rds?.route_config_name;
      if (tcp) {
        outbound = { ...base, listener: listener.name ?? null, filterChain: chain.name ?? null, route: null, clusters: actionClusters(tcp as Parameters<typeof actionClusters>[0]), denied: null };
      } else if (rds) {
        const { hop, denied } = routeThrough(view.outboundRoutes, rds, request);
        outbound = { ...base, listener: listener.name ?? null, filterChain: chain.name ?? null, route: hop, clusters: hop.clusters, denied };
      } else {
        outbound = noRoute(`chain ${chain.name ?? ''} has neither an HTTP connection manager with RDS nor tcp_proxy`, { filterChain: chain.name ?? null });
      }
    }
    if (outbound.denied === null) {
      for (const target of outbound.clusters) {
        const backend = serviceOfCluster(snapshot, target.name, svc.port);
        if (!backend) continue;
        const tls = clusterTls(byName(view.clusters, target.name));
        const identities = snapshot.identitiesByService.get(serviceKey(backend)) ?? [];
        if (identities.length === 0) reasons.push(`cluster ${target.name} has no endpoint: no workload backs ${serviceKey(backend)} (503)`);
        for (const identity of identities) {
          const entry = inboundFor(snapshot, viewOf(identity), { backend, cluster: target.name, weight: target.weight, identity, source: source.identity, via: 'mesh', reached: true, sni: tls.sni, sourceIp: source.ips[0], request });
          // The source's sidecar verifies the server's certificate against the cluster's SANs.
          const sanOk = tls.sans === undefined || tls.sans.includes(identitySpiffeId(identity));
          inbound.push(sanOk ? entry : { ...entry, allowed: false, denied: `cluster ${target.name} does not accept ${identitySpiffeId(identity)} as the server's certificate (503)` });
        }
      }
    } else if (outbound.passthrough) {
      ownBackends('plaintext', true);
    } else {
      // Nothing is sent: show what the destination's inbound side would do, for its RBAC.
      for (const identity of snapshot.identitiesByService.get(serviceKey(svc)) ?? []) {
        inbound.push(inboundFor(snapshot, viewOf(identity), { backend: svc, cluster: clusterName(svc), weight: 1, identity, source: source.identity, via: 'mesh', reached: false, sni: serviceFqdn(svc), sourceIp: source.ips[0], request }));
      }
    }
  }
  const reached = inbound.filter((i) => i.reached);
  const allowed = reached.filter((i) => i.allowed);
  const decision = outbound?.denied && !outbound.passthrough ? 'denied' : reached.length > 0 && allowed.length === reached.length ? 'allowed' : allowed.length > 0 ? 'partial' : 'denied';
  if (permissive && decision === 'allowed') reasons.unshift('permissive mode (MeshConfig spec.traffic.enablePermissiveTrafficPolicyMode: true): every identity may reach every service');
  if (outbound?.denied) reasons.unshift(outbound.passthrough ? `the source proxy has no mesh route: ${outbound.denied}` : `the source proxy sends nothing: ${outbound.denied}`);
  const split = (outbound?.clusters.length ?? 0) > 1;
  for (const i of reached) {
    const who = `${i.service} as ${i.identity}${split ? ` (weight ${i.weight})` : ''}`;
    reasons.push(i.allowed ? `${who}: allowed by ${i.policies.join('; ') || 'its inbound listener'}` : `${who}: denied: ${i.denied ?? ''}`);
  }
  return {
    decision,
    mode: permissive ? 'permissive' : 'smi',
    meshConfig: snapshot.meshConfig?.name ?? null,
    generation: snapshot.generation,
    request: {
      source: source.identity,
      sourcePod: source.pod,
      sourceIps: source.ips,
      sourceInMesh,
      destination: query.to,
      service: serviceKey(svc),
      port: svc.port,
      protocol: svc.protocol,
      authority,
      path,
      method,
      headers,
    },
    outbound,
    inbound,
    reasons,
  };
}
