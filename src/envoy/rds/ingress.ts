import type { Route } from '../../api/generated/envoy/config/route/v3/Route.js';
import type { RouteConfiguration } from '../../api/generated/envoy/config/route/v3/RouteConfiguration.js';
import type { VirtualHost } from '../../api/generated/envoy/config/route/v3/VirtualHost.js';
import { localClusterName, serviceKey } from '../../catalog/names.js';
import type { IngressPathMatch } from '../../catalog/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import { ingressChainPlans } from '../ingress-plan.js';
import type { NamedResource } from '../resource.js';
import { byKey } from '../../util/order.js';

/** Name of the ingress route configuration of a target port: `rds-ingress.<port>` (OSM v1.2 `rds-ingress`, per port here). */
export function ingressRouteConfigName(port: number): string {
  return `rds-ingress.${port}`;
}

/**
 * The Envoy route match of an Ingress path (networking.k8s.io/v1 path types): `exact` →
 * `path`; `prefix` → `path_separated_prefix` (segment-wise: `/foo` matches `/foo`,
 * `/foo/bar` and `/foo?x`, not `/foobar`), or `prefix: /` for `/`; `regex` → RE2
 * `safe_regex`; `string-prefix` → `prefix`.
 */
export function ingressRouteMatch(match: IngressPathMatch): Route['match'] {
  switch (match.kind) {
    case 'exact':
      return { path: match.path };
    case 'prefix':
      return match.path === '/' ? { prefix: '/' } : { path_separated_prefix: match.path };
    case 'regex':
      return { safe_regex: { regex: match.path } };
    case 'string-prefix':
      return { prefix: match.path };
  }
}

/**
 * Order of routes in a virtual host: Envoy takes the first route that matches, Kubernetes
 * the most specific path. Exact paths first, then regexes, then prefixes longest first.
 */
function precedence(match: IngressPathMatch): [number, number] {
  const rank = match.kind === 'exact' ? 0 : match.kind === 'regex' ? 1 : 2;
  return [rank, rank === 1 ? 0 : -match.path.length];
}

/**
 * Ingress RDS of a proxy (OSM v1.2 `BuildIngressConfiguration`): per target port with an
 * ingress chain, `rds-ingress.<port>` with one virtual host per Ingress rule host
 * (`ingress_virtual-host|<host>`, domains `[host]`) and `ingress_virtual-host|*` for rules
 * without a host. Routes come from the Ingress paths naming each backend service port
 * ({@link ingressRouteMatch}); a backend no Ingress names gets one route for every path
 * (`prefix: /`, OSM v1.2's wildcard ingress route). Every route goes to the backend's local
 * cluster `<ns>/<svc>|<port>|local`. Identical matches keep the first; sorted by name.
 */
export function generateIngressRouteConfigurations(context: GenerationContext, profile: ProxyProfile): NamedResource<RouteConfiguration>[] {
  const byPort = new Map<number, Map<string, { match: IngressPathMatch; route: Route }[]>>();
  for (const plan of ingressChainPlans(context, profile)) {
    const hosts = byPort.get(plan.port) ?? new Map<string, { match: IngressPathMatch; route: Route }[]>();
    byPort.set(plan.port, hosts);
    for (const backend of plan.backends) {
      const cluster = localClusterName(backend.service);
      const routes = backend.routes.length > 0
        ? backend.routes
        : [{ ingress: backend.name, host: undefined, match: { kind: 'prefix', path: '/' } as IngressPathMatch }];
      for (const r of routes) {
        const domain = r.host ?? '*';
        const list = hosts.get(domain) ?? [];
        hosts.set(domain, list);
        const match = ingressRouteMatch(r.match);
        if (list.some((x) => JSON.stringify(x.route.match) === JSON.stringify(match))) continue;
        list.push({
          match: r.match,
          route: { name: `ingress_route|${r.ingress}|${serviceKey(backend.service)}|${r.match.kind}:${r.match.path}`, match, route: { cluster } },
        });
      }
    }
  }
  return [...byPort.entries()]
    .sort(([a], [b]) => a - b)
    .map(([port, hosts]) => {
      const name = ingressRouteConfigName(port);
      const virtualHosts: VirtualHost[] = [...hosts.entries()]
        .sort(byKey)
        .map(([domain, list]) => ({
          name: `ingress_virtual-host|${domain}`,
          domains: [domain],
          routes: [...list]
            .sort((a, b) => {
              const [ra, la] = precedence(a.match);
              const [rb, lb] = precedence(b.match);
              return ra - rb || la - lb;
            })
            .map((x) => x.route),
        }));
      return { name, resource: { name, virtual_hosts: virtualHosts, validate_clusters: { value: false } } };
    });
}
