import type { Route } from '../../api/generated/envoy/config/route/v3/Route.js';
import type { RouteConfiguration } from '../../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { egressPlan } from '../egress-plan.js';
import type { NamedResource } from '../resource.js';
import { routeMatch } from './rds.js';

/** Name of the egress route configuration of a port: `rds-egress.<port>` (OSM v1.2). */
export function egressRouteConfigName(port: number): string {
  return `rds-egress.${port}`;
}

/**
 * Egress RDS of a proxy (OSM v1.2 `BuildEgressRouteConfiguration`): per HTTP egress port,
 * `rds-egress.<port>` with a virtual host per host (`egress_virtual-host|<host>`, domains
 * `host` and `host:<port>`), one route per HTTPRouteGroup match ({@link routeMatch}: path
 * regex, methods, headers) and, when a policy for the host has no match, a last route for
 * every request (`prefix: /`); each to the host's cluster `<host>:<port>` (or `<port>` for a
 * wildcard host). Requests for other hosts get no route (404): HTTP egress is by host only.
 */
export function generateEgressRouteConfigurations(context: GenerationContext, profile: ProxyProfile): NamedResource<RouteConfiguration>[] {
  return egressPlan(context, profile).http.map((p) => {
    const name = egressRouteConfigName(p.port);
    const virtualHosts = p.hosts.map((h) => {
      const routes: Route[] = h.matches.map((m) => ({ name: `egress_route|${h.host}|${m.name}`, match: routeMatch(m), route: { cluster: h.cluster } }));
      if (h.anyRequest) routes.push({ name: `egress_route|${h.host}`, match: { prefix: '/' }, route: { cluster: h.cluster } });
      return { name: `egress_virtual-host|${h.host}`, domains: [h.host, `${h.host}:${p.port}`], routes };
    });
    return { name, resource: { name, virtual_hosts: virtualHosts, validate_clusters: { value: false } } };
  });
}
