import type { EgressPolicy, HttpRouteMatch } from '../catalog/types.js';
import type { GenerationContext, ProxyProfile } from './context.js';
import { byKey as byEntryKey, byName } from '../util/order.js';
import { getOrCreate } from '../util/maps.js';

/**
 * Name of the cluster of an egress host on a port: `<host>:<port>` (OSM v1.2
 * `EgressClusterConfig.Name`). UpstreamTrafficSettings for egress hosts key on it.
 */
export function egressClusterName(host: string, port: number): string {
  return `${host}:${port}`;
}

/**
 * Name of the ORIGINAL_DST cluster of egress TCP traffic on a port (and of HTTPS / HTTP
 * traffic to a wildcard host there): `<port>`, as OSM v1.2 names it.
 */
export function egressOriginalDstClusterName(port: number): string {
  return String(port);
}

/** An egress cluster: DNS-resolved `<host>:<port>`, or ORIGINAL_DST `<port>`. */
export type EgressCluster =
  | { readonly kind: 'dns'; readonly name: string; readonly host: string; readonly port: number }
  | { readonly kind: 'original-dst'; readonly name: string; readonly port: number };

/** One host of an HTTP egress port: its virtual host's routes. */
export interface EgressHttpHost {
  readonly host: string;
  readonly cluster: string;
  /** HTTPRouteGroup matches from the policies naming this host and port, deduplicated by name. */
  readonly matches: readonly HttpRouteMatch[];
  /** True when a policy naming this host and port has no HTTPRouteGroup match: every request passes. */
  readonly anyRequest: boolean;
}

/** An HTTP egress port: one filter chain, HCM with `rds-egress.<port>`. */
export interface EgressHttpPort {
  readonly port: number;
  /** Destination CIDRs; empty = any address (some policy named no `ipAddresses`). */
  readonly ipRanges: readonly string[];
  readonly hosts: readonly EgressHttpHost[];
}

/** An HTTPS egress host on a port (or any TLS on the port when `host` is undefined): one tcp_proxy chain. */
export interface EgressHttpsRoute {
  readonly port: number;
  readonly host: string | undefined;
  readonly ipRanges: readonly string[];
  readonly cluster: string;
}

/** A TCP egress port: one tcp_proxy chain to the ORIGINAL_DST cluster. */
export interface EgressTcpPort {
  readonly port: number;
  readonly ipRanges: readonly string[];
  /** True when a policy names the port `tcp-server-first`: no listener filter may wait for client bytes. */
  readonly serverFirst: boolean;
  readonly cluster: string;
}

/** Everything the Egress policies give one proxy, merged across policies; sorted by port (and host). */
export interface EgressPlan {
  readonly http: readonly EgressHttpPort[];
  readonly https: readonly EgressHttpsRoute[];
  readonly tcp: readonly EgressTcpPort[];
  /** Clusters named by the chains and routes, unique by name, sorted by name. */
  readonly clusters: readonly EgressCluster[];
}

/** Union of range lists where an empty list means "any address" and wins. */
function unionRanges(lists: readonly (readonly string[])[]): string[] {
  if (lists.some((l) => l.length === 0)) return [];
  return [...new Set(lists.flat())].sort();
}


/** The Egress policies whose sources include the proxy's identity. */
export function proxyEgressPolicies(context: GenerationContext, profile: ProxyProfile): EgressPolicy[] {
  return context.snapshot.egressPolicies.filter((p) => p.sources.includes(profile.identity));
}

/**
 * Merges the Egress policies a proxy is a source of into what its outbound listener, RDS
 * and CDS need (OSM v1.2 `GetEgressTrafficPolicy`): per http port the hosts and their route
 * matches; per https port and host a TLS chain (per port without hosts: any SNI); per tcp /
 * tcp-server-first port a chain by IP range. Two policies on one port merge: their ranges
 * unite (no ranges in one = any address), their hosts and matches too.
 *
 * A DNS name gets a `<host>:<port>` cluster resolved by the proxy; a `*.` wildcard host cannot
 * be resolved, so its traffic goes to the port's ORIGINAL_DST cluster `<port>`, as does TCP.
 *
 * Empty when MeshConfig `enableEgress` is on: then every destination outside the mesh passes
 * through, and OSM v1.2 ignores Egress policies.
 */
export function egressPlan(context: GenerationContext, profile: ProxyProfile): EgressPlan {
  if (context.snapshot.settings.enableEgress) return { http: [], https: [], tcp: [], clusters: [] };
  const clusters = new Map<string, EgressCluster>();
  const clusterFor = (host: string | undefined, port: number): string => {
    // A `*.` wildcard host cannot be resolved by DNS, only matched.
    if (host !== undefined && !host.startsWith('*.')) {
      const name = egressClusterName(host, port);
      clusters.set(name, { kind: 'dns', name, host, port });
      return name;
    }
    const name = egressOriginalDstClusterName(port);
    clusters.set(name, { kind: 'original-dst', name, port });
    return name;
  };
  const http = new Map<number, { ranges: string[][]; hosts: Map<string, { matches: Map<string, HttpRouteMatch>; any: boolean }> }>();
  const https = new Map<string, { port: number; host: string | undefined; ranges: string[][] }>();
  const tcp = new Map<number, { ranges: string[][]; serverFirst: boolean }>();
  for (const policy of proxyEgressPolicies(context, profile)) {
    for (const { number: port, protocol } of policy.ports) {
      if (protocol === 'http') {
        const entry = getOrCreate(http, port, () => ({ ranges: [], hosts: new Map() }));
        entry.ranges.push([...policy.ipRanges]);
        for (const host of policy.hosts) {
          const h = getOrCreate(entry.hosts, host, () => ({ matches: new Map<string, HttpRouteMatch>(), any: false }));
          if (policy.httpMatches.length === 0) h.any = true;
          for (const m of policy.httpMatches) if (!h.matches.has(m.name)) h.matches.set(m.name, m);
        }
      } else if (protocol === 'https') {
        for (const host of policy.hosts.length > 0 ? policy.hosts : [undefined]) {
          const key = `${String(port).padStart(5, '0')}|${host ?? ''}`;
          getOrCreate(https, key, () => ({ port, host, ranges: [] })).ranges.push([...policy.ipRanges]);
        }
      } else {
        const entry = getOrCreate(tcp, port, () => ({ ranges: [], serverFirst: false }));
        entry.ranges.push([...policy.ipRanges]);
        if (protocol === 'tcp-server-first') entry.serverFirst = true;
      }
    }
  }
  const httpPorts: EgressHttpPort[] = [...http.entries()]
    .sort(([a], [b]) => a - b)
    .map(([port, e]) => ({
      port,
      ipRanges: unionRanges(e.ranges),
      hosts: [...e.hosts.entries()]
        .sort(byEntryKey)
        .map(([host, h]) => ({ host, cluster: clusterFor(host, port), matches: [...h.matches.values()], anyRequest: h.any })),
    }));
  const httpsRoutes: EgressHttpsRoute[] = [...https.entries()]
    .sort(byEntryKey)
    .map(([, e]) => ({ port: e.port, host: e.host, ipRanges: unionRanges(e.ranges), cluster: clusterFor(e.host, e.port) }));
  const tcpPorts: EgressTcpPort[] = [...tcp.entries()]
    .sort(([a], [b]) => a - b)
    .map(([port, e]) => ({ port, ipRanges: unionRanges(e.ranges), serverFirst: e.serverFirst, cluster: clusterFor(undefined, port) }));
  return {
    http: httpPorts,
    https: httpsRoutes,
    tcp: tcpPorts,
    clusters: [...clusters.values()].sort(byName),
  };
}
