import type { FilterChain } from '../../api/generated/envoy/config/listener/v3/FilterChain.js';
import type { ListenerFilter } from '../../api/generated/envoy/config/listener/v3/ListenerFilter.js';
import type { ListenerFilterChainMatchPredicate } from '../../api/generated/envoy/config/listener/v3/ListenerFilterChainMatchPredicate.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { egressPlan, type EgressPlan } from '../egress-plan.js';
import { egressRouteConfigName } from '../rds/egress.js';
import { ADS_CONFIG_SOURCE, ExtensionType, typedConfig } from '../typed-config.js';
import { cidrRange, uniqueChains } from './filter-chain-match.js';
import { accessLogFields, tracingFields, type ListenerTelemetry } from '../telemetry.js';

function ranges(list: readonly string[]): { prefix_ranges?: ReturnType<typeof cidrRange>[] } {
  return list.length > 0 ? { prefix_ranges: list.map(cidrRange) } : {};
}

function tcpProxyChain(name: string, match: FilterChain['filter_chain_match'], cluster: string, telemetry: ListenerTelemetry): FilterChain {
  return {
    name,
    filter_chain_match: match,
    filters: [
      { name: 'envoy.filters.network.tcp_proxy', typed_config: typedConfig(ExtensionType.TcpProxy, { stat_prefix: name, cluster, ...accessLogFields(telemetry) }) },
    ],
  };
}

/** The egress chains of a plan, in the order they claim match leaves: HTTP, then HTTPS, then TCP; with the MeshConfig's access log and tracing. */
function planChains(plan: EgressPlan, telemetry: ListenerTelemetry): FilterChain[] {
  const chains: FilterChain[] = [];
  for (const p of plan.http) {
    const name = `egress-http.${p.port}`;
    chains.push({
      name,
      filter_chain_match: { destination_port: { value: p.port }, ...ranges(p.ipRanges) },
      filters: [
        {
          name: 'envoy.filters.network.http_connection_manager',
          typed_config: typedConfig(ExtensionType.HttpConnectionManager, {
            stat_prefix: name,
            rds: { config_source: ADS_CONFIG_SOURCE, route_config_name: egressRouteConfigName(p.port) },
            http_filters: [{ name: 'envoy.filters.http.router', typed_config: typedConfig(ExtensionType.Router, {}) }],
            ...accessLogFields(telemetry),
            ...tracingFields(telemetry),
          }),
        },
      ],
    });
  }
  for (const r of plan.https) {
    const name = r.host === undefined ? `egress-https.${r.port}` : `egress-https.${r.port}|${r.host}`;
    chains.push(
      tcpProxyChain(
        name,
        {
          destination_port: { value: r.port },
          ...ranges(r.ipRanges),
          ...(r.host !== undefined ? { server_names: [r.host] } : {}),
          transport_protocol: 'tls',
        },
        r.cluster,
        telemetry,
      ),
    );
  }
  for (const t of plan.tcp) {
    chains.push(tcpProxyChain(`egress-tcp.${t.port}`, { destination_port: { value: t.port }, ...ranges(t.ipRanges) }, t.cluster, telemetry));
  }
  return chains;
}

/**
 * The egress filter chains of a proxy's outbound listener (OSM v1.2 `pkg/envoy/lds/egress.go`),
 * from the Egress policies naming its identity ({@link egressPlan}):
 * - `egress-http.<port>`: the port (and `ipAddresses` as `prefix_ranges` when every policy on
 *   the port gives some) → HCM with RDS `rds-egress.<port>`, routed by Host;
 * - `egress-https.<port>|<host>`: the port, `server_names: [host]`, `transport_protocol: tls`
 *   (hence the `tls_inspector` of {@link egressListenerFilters}) → tcp_proxy to `<host>:<port>`
 *   (`*.` wildcard hosts and host-less https ports: to the ORIGINAL_DST cluster `<port>`);
 * - `egress-tcp.<port>` (tcp and tcp-server-first): the port and `prefix_ranges` →
 *   tcp_proxy to the ORIGINAL_DST cluster `<port>`.
 * The mesh chains on the same port match ClusterIPs, so an egress chain without ranges is a
 * different match; whatever would still repeat a match leaf of `existing` (or of an earlier
 * egress chain) is pruned or left out ({@link uniqueChains}).
 */
export function egressFilterChains(context: GenerationContext, profile: ProxyProfile, existing: readonly FilterChain[]): FilterChain[] {
  return uniqueChains(existing, planChains(egressPlan(context, profile), context.snapshot.settings));
}

/**
 * The listener filters the egress chains need on the outbound listener, after `original_dst`:
 * `tls_inspector` (it sets `transport_protocol` and the SNI that `egress-https` chains match)
 * when there is such a chain. A listener filter waits for the client's first bytes, which a
 * server-first protocol never sends, so the inspector is disabled (`filter_disabled`,
 * destination port ranges) on the ports of the proxy's `tcp-server-first` destinations, mesh
 * services and Egress ports alike. Empty when no chain needs it.
 */
export function egressListenerFilters(context: GenerationContext, profile: ProxyProfile, chains: readonly FilterChain[]): ListenerFilter[] {
  const needsTls = chains.some((c) => c.filter_chain_match?.transport_protocol === 'tls');
  if (!needsTls) return [];
  const serverFirst = new Set<number>();
  for (const d of context.outboundView(profile.identity).destinations) if (d.service.protocol === 'tcp-server-first') serverFirst.add(d.service.port);
  for (const t of egressPlan(context, profile).tcp) if (t.serverFirst) serverFirst.add(t.port);
  const rules: ListenerFilterChainMatchPredicate[] = [...serverFirst]
    .sort((a, b) => a - b)
    .map((port) => ({ destination_port_range: { start: port, end: port + 1 } }));
  const disabled = rules.length === 0 ? undefined : rules.length === 1 ? rules[0] : { or_match: { rules } };
  return [
    {
      name: 'envoy.filters.listener.tls_inspector',
      typed_config: typedConfig(ExtensionType.TlsInspector, {}),
      ...(disabled ? { filter_disabled: disabled } : {}),
    },
  ];
}
