import type { Listener } from '../../api/generated/envoy/config/listener/v3/Listener.js';
import type { ListenerFilter } from '../../api/generated/envoy/config/listener/v3/ListenerFilter.js';
import type { FilterChain } from '../../api/generated/envoy/config/listener/v3/FilterChain.js';
import type { Filter } from '../../api/generated/envoy/config/listener/v3/Filter.js';
import type { HttpFilter } from '../../api/generated/envoy/extensions/filters/network/http_connection_manager/v3/HttpFilter.js';
import { clusterName, localClusterName, serviceFqdn } from '../../catalog/names.js';
import { targetCoversPort } from '../../catalog/traffic-policy.js';
import type { MeshEndpoint, MeshService, TlsVersion, TracingSettings } from '../../catalog/types.js';
import type { ServiceIdentity } from '../../proxy/types.js';
import { inboundSide, type InboundSide } from '../rds/inbound-side.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { PASSTHROUGH_OUTBOUND_CLUSTER } from '../cds/cds.js';
import { HTTP_LOCAL_RATE_LIMIT_FILTER, networkLocalRateLimitFilter } from '../rate-limit.js';
import type { OutboundDestination, OutboundView } from '../outbound.js';
import { identityPrincipals } from '../rbac.js';
import { HTTP_RBAC_FILTER, inboundRouteConfigName, isHttpLike, outboundRouteConfigName, outboundRouteLayout } from '../rds/rds.js';
import type { NamedResource } from '../resource.js';
import { downstreamTlsContext, tlsTransportSocket } from '../tls.js';
import { ADS_CONFIG_SOURCE, ExtensionType, typedConfig } from '../typed-config.js';
import { egressFilterChains, egressListenerFilters } from './egress.js';
import { proxyEgressPolicies } from '../egress-plan.js';
import { ingressFilterChains } from './ingress.js';
import { meshChangeKind, type PushChange } from '../push-change.js';
import { accessLogFields, tracingFields, type ListenerTelemetry } from '../telemetry.js';

/** Name and port of the listener that captures outbound traffic (OSM v1.2). */
export const OUTBOUND_LISTENER = { name: 'outbound-listener', port: 15001 } as const;
/** Name and port of the listener that receives inbound mTLS traffic (OSM v1.2). */
export const INBOUND_LISTENER = { name: 'inbound-listener', port: 15003 } as const;
/** Name of the network RBAC filter on inbound chains in SMI mode (OSM `l4_rbac`). */
export const L4_RBAC_STAT_PREFIX = 'l4_rbac';

function cidr(ip: string): { address_prefix: string; prefix_len: { value: number } } {
  return { address_prefix: ip, prefix_len: { value: ip.includes(':') ? 128 : 32 } };
}

function httpConnectionManager(statPrefix: string, routeConfigName: string, rbac: boolean, localRateLimit: boolean, telemetry: ListenerTelemetry): Filter {
  const httpFilters: HttpFilter[] = [];
  // An RBAC filter with no rules allows everything; each route's RBACPerRoute then decides.
  if (rbac) httpFilters.push({ name: HTTP_RBAC_FILTER, typed_config: typedConfig(ExtensionType.HttpRbac, {}) });
  // Without a token bucket of its own the filter limits nothing; the virtual host's and the
  // routes' per-filter configuration carry the limits (UpstreamTrafficSetting).
  if (localRateLimit) {
    httpFilters.push({ name: HTTP_LOCAL_RATE_LIMIT_FILTER, typed_config: typedConfig(ExtensionType.HttpLocalRateLimit, { stat_prefix: statPrefix }) });
  }
  httpFilters.push({ name: 'envoy.filters.http.router', typed_config: typedConfig(ExtensionType.Router, {}) });
  return {
    name: 'envoy.filters.network.http_connection_manager',
    typed_config: typedConfig(ExtensionType.HttpConnectionManager, {
      stat_prefix: statPrefix,
      rds: { config_source: ADS_CONFIG_SOURCE, route_config_name: routeConfigName },
      http_filters: httpFilters,
      ...accessLogFields(telemetry),
      ...tracingFields(telemetry),
    }),
  };
}

function tcpProxy(statPrefix: string, dest: Pick<OutboundDestination, 'targets'>, telemetry: ListenerTelemetry): Filter {
  const single = dest.targets.length === 1;
  return {
    name: 'envoy.filters.network.tcp_proxy',
    typed_config: typedConfig(ExtensionType.TcpProxy, {
      stat_prefix: statPrefix,
      ...(single
        ? { cluster: dest.targets[0].cluster }
        : { weighted_clusters: { clusters: dest.targets.map((t) => ({ name: t.cluster, weight: t.weight })) } }),
      ...accessLogFields(telemetry),
    }),
  };
}

/** The endpoints of services by cluster name (the snapshot's, or those of a listener's headless destinations). */
type EndpointsByCluster = ReadonlyMap<string, readonly MeshEndpoint[] | undefined>;

/** The IPs a client dials for a service: its ClusterIPs, or for a headless service its endpoints' IPs. */
function destinationIps(endpoints: EndpointsByCluster, svc: MeshService): string[] {
  if (!svc.headless) return [...svc.clusterIPs];
  return [...new Set((endpoints.get(clusterName(svc)) ?? []).map((e) => e.ip))];
}

/** What the Egress policies add to a proxy's outbound listener: its chains, and the listener filters those need. */
interface OutboundEgress {
  chains(existing: readonly FilterChain[]): FilterChain[];
  listenerFilters(chains: readonly FilterChain[]): ListenerFilter[];
}

/** The outbound listener of a proxy without Egress policies of its own: no egress chains, no listener filters for them. */
const NO_EGRESS: OutboundEgress = { chains: () => [], listenerFilters: () => [] };

/**
 * The outbound listener of a proxy, `outbound-listener` on 0.0.0.0:15001 with `original_dst`:
 * one HTTP filter chain `outbound_http_<port>` per destination port (matching that port and the
 * ClusterIPs of the HTTP destinations on it, or the port alone when one of them has no address;
 * HCM with RDS `rds-outbound.<port>`), or on a port split into buckets ({@link outboundRouteLayout})
 * one chain `outbound_http_<port>_<b>` per bucket (that port and the IPs of the bucket's
 * services; RDS `rds-outbound.<port>.<b>`; the port's `stat_prefix` `outbound_http_<port>`),
 * and one `tcp_proxy` chain per TCP destination (its IPs and port). An (IP, port) pair is
 * claimed by one chain only, so no two chains have the same match. Then the Egress policies' chains ({@link egressFilterChains},
 * with `tls_inspector` when one matches TLS). With egress on, unmatched traffic passes through to
 * `passthrough-outbound`. Undefined when the proxy may reach nothing (Envoy rejects a
 * listener without filter chains).
 */
export function outboundListener(context: GenerationContext, profile: ProxyProfile): Listener | undefined {
  const { settings } = context.snapshot;
  const telemetry = { accessLog: settings.accessLog, tracing: settings.tracing };
  return buildOutboundListener(context.outboundView(profile.identity), settings.enableEgress, telemetry, context.snapshot.endpoints, {
    chains: (existing) => egressFilterChains(context, profile, existing),
    listenerFilters: (chains) => egressListenerFilters(context, profile, chains),
  });
}

/** {@link outboundListener} from what it reads: the view, `enableEgress`, the telemetry settings, the endpoints of headless destinations, and the egress chains. */
function buildOutboundListener(
  view: OutboundView,
  egress: boolean,
  telemetry: ListenerTelemetry,
  endpoints: EndpointsByCluster,
  egressOf: OutboundEgress,
): Listener | undefined {
  const claimed = new Set<string>();
  const claim = (svc: MeshService): string[] =>
    destinationIps(endpoints, svc).filter((ip) => {
      const key = `${ip}|${svc.port}`;
      if (claimed.has(key)) return false;
      claimed.add(key);
      return true;
    });
  const layout = outboundRouteLayout(view);
  const httpIps = new Map<number, string[]>();
  /** A split port's chains by bucket: the IPs they match. */
  const bucketIps = new Map<number, Map<number, string[]>>();
  const portOnly = new Set<number>();
  const chains: FilterChain[] = [];
  for (const dest of view.destinations) {
    const svc = dest.service;
    const ips = claim(svc);
    if (isHttpLike(svc)) {
      const bucket = layout.bucketOf(svc);
      if (bucket !== undefined) {
        // A split port: each bucket's chain matches its services' IPs (a headless service without
        // endpoints adds none; the layout never splits a port with a service without a ClusterIP).
        const buckets = bucketIps.get(svc.port) ?? new Map<number, string[]>();
        bucketIps.set(svc.port, buckets);
        buckets.set(bucket, [...(buckets.get(bucket) ?? []), ...ips]);
        continue;
      }
      // A service without a ClusterIP (manifests written without one, no API server to assign
      // it) can't be matched by address: its port's HTTP chain then matches the port alone and
      // RDS routes by Host. Addressed chains on the same port stay more specific.
      if (destinationIps(endpoints, svc).length === 0) portOnly.add(svc.port);
      httpIps.set(svc.port, [...(httpIps.get(svc.port) ?? []), ...ips]);
      continue;
    }
    if (ips.length === 0) continue;
    const name = `outbound_${clusterName(svc)}_tcp`;
    chains.push({
      name,
      filter_chain_match: { destination_port: { value: svc.port }, prefix_ranges: ips.sort().map(cidr) },
      filters: [tcpProxy(name, dest, telemetry)],
    });
  }
  for (const [port, ips] of [...httpIps.entries()].sort(([a], [b]) => a - b)) {
    const name = `outbound_http_${port}`;
    chains.push({
      name,
      filter_chain_match: { destination_port: { value: port }, ...(portOnly.has(port) ? {} : { prefix_ranges: ips.sort().map(cidr) }) },
      filters: [httpConnectionManager(name, outboundRouteConfigName(port), false, false, telemetry)],
    });
  }
  for (const [port, buckets] of bucketIps) {
    for (const [bucket, ips] of buckets) {
      // No IP (all claimed by other chains, or headless without endpoints): no chain; one without
      // prefix_ranges would match every address on the port.
      if (ips.length === 0) continue;
      // The port's statistics prefix, as without buckets: one set of HCM statistics per port
      // (Envoy adds up chains that share a prefix), not one per bucket.
      chains.push({
        name: `outbound_http_${port}_${bucket}`,
        filter_chain_match: { destination_port: { value: port }, prefix_ranges: ips.sort().map(cidr) },
        filters: [httpConnectionManager(`outbound_http_${port}`, outboundRouteConfigName(port, bucket), false, false, telemetry)],
      });
    }
  }
  const egressChains = egressOf.chains(chains);
  chains.push(...egressChains);
  if (chains.length === 0 && !egress) return undefined;
  return {
    name: OUTBOUND_LISTENER.name,
    address: { socket_address: { address: '0.0.0.0', port_value: OUTBOUND_LISTENER.port } },
    traffic_direction: 'OUTBOUND',
    listener_filters: [
      { name: 'envoy.filters.listener.original_dst', typed_config: typedConfig(ExtensionType.OriginalDst, {}) },
      ...egressOf.listenerFilters(egressChains),
    ],
    filter_chains: chains.sort((a, b) => ((a.name ?? '') < (b.name ?? '') ? -1 : 1)),
    ...(egress
      ? {
          default_filter_chain: {
            name: 'outbound-egress-passthrough',
            filters: [tcpProxy('outbound-egress-passthrough', { targets: [{ cluster: PASSTHROUGH_OUTBOUND_CLUSTER, weight: 1 }] }, telemetry)],
          },
        }
      : {}),
  };
}

/**
 * The inbound listener of a proxy, `inbound-listener` on 0.0.0.0:15003 with `tls_inspector`
 * and `original_dst`: one chain per service port it serves, matching the target port, TLS,
 * and `server_names` = the service FQDN, with a DownstreamTlsContext that requires a client
 * certificate; HTTP through the HCM with RDS `rds-inbound.<port>` (and the HTTP RBAC filter
 * in SMI mode), TCP through `tcp_proxy` to the local cluster. In SMI mode every chain starts
 * with network RBAC (`l4_rbac`) allowing only the sources of TrafficTargets covering the
 * port. Then the IngressBackends' chains ({@link ingressFilterChains}). Undefined when the
 * proxy serves no service.
 */
export function inboundListener(context: GenerationContext, profile: ProxyProfile): Listener | undefined {
  const { identity } = profile;
  const { settings } = context.snapshot;
  // The chains' matches and filters from the inbound side alone; the mesh chains from those,
  // the identity and the TLS settings; the listener from those chains and the ingress chains:
  // the same objects while these are. A MeshConfig TLS change makes new chains around the same
  // matches and filters, whose checks and encodings (their typed configs) then carry over.
  const tls = [settings.tlsMinProtocolVersion, settings.tlsMaxProtocolVersion, JSON.stringify(settings.cipherSuites), JSON.stringify(settings.ecdhCurves)] as const;
  const side = inboundSide(context, identity);
  const bodies = context.shared('InboundChainBodies', `inbound ${identity}`, [side, settings.accessLog, settings.tracing], inboundChainBodies);
  const mesh = context.shared('FilterChains', `inbound ${identity}`, [bodies, identity, ...tls], inboundMeshChains);
  return context.shared('Listener', `inbound ${identity}`, [mesh, ...ingressFilterChains(context, profile, mesh)], sharedInboundListener).listener;
}

/** A mesh chain of the inbound listener but its transport socket: what the inbound side alone decides. */
type InboundChainBody = Readonly<Required<Pick<FilterChain, 'name' | 'filter_chain_match' | 'filters'>>>;

/**
 * The inbound listener's mesh chains ({@link inboundListener}) but their transport sockets,
 * from the proxy's inbound side: per service port served, the chain's name, its match and its
 * filters (network RBAC in SMI mode, the TCP rate limit, then the HCM or `tcp_proxy`, with the
 * access log and tracing the MeshConfig turns on).
 */
function inboundChainBodies(side: InboundSide, accessLog: boolean, tracing: TracingSettings | undefined): readonly InboundChainBody[] {
  const { smi, targets } = side;
  const telemetry: ListenerTelemetry = { accessLog, tracing };
  const bodies: InboundChainBody[] = [];
  for (const { service: svc, setting } of side.services) {
    const http = isHttpLike(svc);
    const name = `inbound_${clusterName(svc)}_${http ? 'http' : 'tcp'}`;
    const filters: Filter[] = [];
    if (smi) {
      const sources = targets.filter((tt) => targetCoversPort(tt, svc)).flatMap((tt) => tt.sources);
      filters.push({
        name: 'envoy.filters.network.rbac',
        typed_config: typedConfig(ExtensionType.NetworkRbac, {
          stat_prefix: L4_RBAC_STAT_PREFIX,
          rules: {
            action: 'ALLOW',
            policies:
              sources.length > 0 ? { [`${clusterName(svc)}|inbound`]: { permissions: [{ any: true }], principals: identityPrincipals(sources) } } : {},
          },
        }),
      });
    }
    if (setting?.tcpRateLimit) filters.push(networkLocalRateLimitFilter(`${name}_rate_limit`, setting.tcpRateLimit));
    const httpLimits = setting !== undefined && (setting.httpRateLimit !== undefined || setting.httpRoutes.length > 0);
    filters.push(
      http
        ? httpConnectionManager(name, inboundRouteConfigName(svc.targetPort), smi, httpLimits, telemetry)
        : tcpProxy(name, { targets: [{ cluster: localClusterName(svc), weight: 1 }] }, telemetry),
    );
    bodies.push({ name, filter_chain_match: { destination_port: { value: svc.targetPort }, server_names: [serviceFqdn(svc)], transport_protocol: 'tls' }, filters });
  }
  return Object.freeze(bodies);
}

/**
 * The inbound listener's mesh chains ({@link inboundListener}): `bodies` ({@link inboundChainBodies})
 * each with the transport socket of the proxy's identity and the sidecar TLS settings
 * (`tlsMinProtocolVersion`, `tlsMaxProtocolVersion`, and `cipherSuites`, `ecdhCurves` as JSON):
 * one DownstreamTlsContext, the same object in every chain.
 */
function inboundMeshChains(bodies: readonly InboundChainBody[], identity: ServiceIdentity, tlsMin: TlsVersion, tlsMax: TlsVersion, cipherSuites: string, ecdhCurves: string): readonly FilterChain[] {
  if (bodies.length === 0) return Object.freeze([]);
  const tls = { tlsMinProtocolVersion: tlsMin, tlsMaxProtocolVersion: tlsMax, cipherSuites: JSON.parse(cipherSuites) as string[], ecdhCurves: JSON.parse(ecdhCurves) as string[] };
  const transportSocket = tlsTransportSocket(downstreamTlsContext(identity, tls), false);
  return Object.freeze(bodies.map((b): FilterChain => ({ name: b.name, filter_chain_match: b.filter_chain_match, transport_socket: transportSocket, filters: b.filters })));
}

/** The inbound listener's listener filters (the same objects in every listener: their typed configs are encoded once). */
const INBOUND_LISTENER_FILTERS: readonly ListenerFilter[] = Object.freeze([
  Object.freeze({ name: 'envoy.filters.listener.tls_inspector', typed_config: Object.freeze(typedConfig(ExtensionType.TlsInspector, {})) }),
  Object.freeze({ name: 'envoy.filters.listener.original_dst', typed_config: Object.freeze(typedConfig(ExtensionType.OriginalDst, {})) }),
]);

/** The inbound listener from its mesh chains and its ingress chains (none: no listener), boxed. */
function sharedInboundListener(mesh: readonly FilterChain[], ...ingress: FilterChain[]): { listener: Listener | undefined } {
  const chains = [...mesh, ...ingress];
  if (chains.length === 0) return { listener: undefined };
  return {
    listener: {
      name: INBOUND_LISTENER.name,
      address: { socket_address: { address: '0.0.0.0', port_value: INBOUND_LISTENER.port } },
      traffic_direction: 'INBOUND',
      listener_filters: INBOUND_LISTENER_FILTERS as ListenerFilter[],
      filter_chains: chains,
    },
  };
}

/** LDS for one proxy: its outbound and inbound listeners (each only when it has filter chains). */
export function generateListeners(context: GenerationContext, profile: ProxyProfile): NamedResource<Listener>[] {
  return [...generateInboundListeners(context, profile), ...generateOutboundListeners(context, profile)];
}

/** The proxy's inbound listener ({@link inboundListener}), when it serves something: a list of zero or one. */
export function generateInboundListeners(context: GenerationContext, profile: ProxyProfile): NamedResource<Listener>[] {
  const inbound = inboundListener(context, profile);
  return inbound ? [{ name: INBOUND_LISTENER.name, resource: inbound }] : [];
}

/**
 * Whether the proxy's outbound listener is its outbound view's alone: it has no Egress policies of
 * its own (the listener then depends only on the view, `enableEgress` and the endpoints of the
 * view's headless destinations), so every proxy of the view in one generation gets the same object.
 */
export function outboundListenerShareable(context: GenerationContext, profile: ProxyProfile): boolean {
  return proxyEgressPolicies(context, profile).length === 0;
}

/** The proxy's outbound listener ({@link outboundListener}), when it may reach something: a list of zero or one. */
export function generateOutboundListeners(context: GenerationContext, profile: ProxyProfile): NamedResource<Listener>[] {
  const { snapshot } = context;
  // Without Egress policies of its own, a proxy's outbound listener depends only on its view,
  // whether egress is on, and the endpoints of its headless destinations (their chains match
  // pod IPs): identities with the same view (all of them in permissive mode) share one object,
  // and so do snapshots that change none of these (a MeshConfig change of TLS settings).
  const view = context.outboundView(profile.identity);
  const outbound = outboundListenerShareable(context, profile)
    ? context.shared(
        'Listener',
        `${OUTBOUND_LISTENER.name} ${context.outboundViewId(view)}`,
        [view, snapshot.settings.enableEgress, snapshot.settings.accessLog, snapshot.settings.tracing, ...view.destinations.filter((d) => d.service.headless).map((d) => snapshot.endpoints.get(clusterName(d.service)))],
        sharedOutboundListener,
      ).listener
    : outboundListener(context, profile);
  return outbound ? [{ name: OUTBOUND_LISTENER.name, resource: outbound }] : [];
}

/**
 * The outbound listener of proxies without Egress policies of their own, from `view`,
 * `enableEgress`, the access log switch, the tracing settings and the endpoints of the view's headless destinations (in the order of
 * `view.destinations`), boxed (there may be no listener).
 */
function sharedOutboundListener(
  view: OutboundView,
  enableEgress: boolean,
  accessLog: boolean,
  tracing: TracingSettings | undefined,
  ...headlessEndpoints: (readonly MeshEndpoint[] | undefined)[]
): { listener: Listener | undefined } {
  const headless = view.destinations.filter((d) => d.service.headless);
  const endpoints = new Map(headless.map((d, i) => [clusterName(d.service), headlessEndpoints[i]]));
  return { listener: buildOutboundListener(view, enableEgress, { accessLog, tracing }, endpoints, NO_EGRESS) };
}

/**
 * Whether `change` makes a sidecar's Listeners regenerate (Istio's `cdsNeedsPush` idea):
 * for any change but one that only moves endpoints (EDS; `onlyEndpointsChanged` excludes headless
 * services, whose addresses are in filter chain matches), only re-weights HTTP TrafficSplits (RDS;
 * a TCP apex's weights are in listeners, `onlySplitWeightsChanged` excludes it) or only rotates the certificate (SDS);
 * a change of MeshConfig's TLS settings alone is one (the inbound and ingress chains' TLS contexts).
 */
export function listenersNeedPush(change: PushChange): boolean {
  const kind = meshChangeKind(change);
  return kind === 'tls-settings' || kind === 'other';
}
