import type { Cluster } from '../../api/generated/envoy/config/cluster/v3/Cluster.js';
import type { UpstreamTrafficSettingPolicy } from '../../catalog/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { egressPlan, type EgressCluster } from '../egress-plan.js';
import { durationMs } from '../typed-config.js';
import { upstreamSettingFields } from '../upstream-settings.js';

/** Connect timeout of egress clusters, in ms (OSM v1.2's cluster default, 1 s). */
export const EGRESS_CONNECT_TIMEOUT_MS = 1000;

/**
 * The Envoy cluster of an egress destination (OSM v1.2 `pkg/envoy/cds` egress clusters), no
 * mesh TLS (the application speaks to the outside world itself):
 * - `<host>:<port>`: LOGICAL_DNS on the host and port (Envoy's choice for a large external
 *   service behind DNS: one resolved address at a time, connections not cut on every DNS
 *   change), IPv4 preferred (pods often have no IPv6 route);
 * - `<port>`: ORIGINAL_DST with CLUSTER_PROVIDED load balancing (to the address the
 *   application dialled).
 */
export function egressCluster(c: EgressCluster, setting?: UpstreamTrafficSettingPolicy): Cluster {
  const common = { name: c.name, alt_stat_name: c.name, connect_timeout: durationMs(EGRESS_CONNECT_TIMEOUT_MS) };
  if (c.kind === 'original-dst') return { ...common, type: 'ORIGINAL_DST', lb_policy: 'CLUSTER_PROVIDED' };
  return {
    ...common,
    // HTTP protocol options only when the setting limits requests per connection (HTTP/1.1 out).
    ...upstreamSettingFields(setting, EGRESS_CONNECT_TIMEOUT_MS, setting?.http?.maxRequestsPerConnection !== undefined ? 'http1' : undefined),
    type: 'LOGICAL_DNS',
    dns_lookup_family: 'V4_PREFERRED',
    lb_policy: 'ROUND_ROBIN',
    load_assignment: {
      cluster_name: c.name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: c.host, port_value: c.port } } } }] }],
    },
  };
}

/**
 * The egress clusters of a proxy: those its Egress chains and routes name ({@link egressPlan}),
 * sorted by name, with the circuit breakers of the UpstreamTrafficSetting of their host.
 */
export function generateEgressClusters(context: GenerationContext, profile: ProxyProfile): Cluster[] {
  // An UpstreamTrafficSetting whose host is not a mesh service applies to the egress host of that name.
  const forHost = (host: string) => context.snapshot.upstreamTrafficSettings.find((u) => u.service === undefined && u.host === host);
  return egressPlan(context, profile).clusters.map((c) => egressCluster(c, c.kind === 'dns' ? forHost(c.host) : undefined));
}
