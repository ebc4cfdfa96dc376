import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeAny, encodeAny } from '../api/codec.js';
import { TypeUrl } from '../api/type-urls.js';
import { buildMeshSnapshot } from '../catalog/build-snapshot.js';
import { parseCommonName, type Proxy } from '../proxy/types.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import type { KubeObject } from '../store/objects.js';
import { GenerationContext, proxyProfile } from './context.js';
import { generateProxyResources } from './generate.js';
import { filterChainLeaves } from './lds/filter-chain-match.js';
import { validateProxyResources, formatViolation } from './validate/index.js';
import { compileRe2, type Re2 } from '../util/re2.js';

const CERTS = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
type Config = Map<TypeUrl, Map<string, Decoded>>;

function proxyOf(sa: string, ns: string): Proxy {
  return parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
}

/**
 * Generates a proxy's resources, checks names are unique per type, every resource encodes
 * with the real Envoy protos, the validator finds nothing, and every listener's filter chain
 * match leaves are unique; returns the decoded resources.
 */
function configFor(objects: KubeObject[], sa: string, ns: string): Config {
  const { snapshot, problems } = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
  assert.deepEqual(problems, []);
  const resources = generateProxyResources(new GenerationContext(snapshot), proxyProfile(proxyOf(sa, ns)), CERTS);
  const { violations } = validateProxyResources(resources);
  assert.deepEqual(violations.map(formatViolation), []);
  const out: Config = new Map();
  for (const [type, list] of resources) {
    const names = list.map((r) => r.name);
    assert.equal(new Set(names).size, names.length, `duplicate ${type} names: ${names.join(', ')}`);
    out.set(type, new Map(list.map((r) => [r.name, decodeAny(encodeAny(type, r.resource))])));
  }
  for (const listener of out.get(TypeUrl.Listener)?.values() ?? []) {
    const leaves = (listener.filter_chains as Decoded[]).flatMap((c) => filterChainLeaves(c.filter_chain_match));
    assert.equal(new Set(leaves).size, leaves.length, `${String(listener.name)}: filter chain match leaves repeat`);
  }
  return out;
}

function listener(cfg: Config, name: string): Decoded {
  const l = cfg.get(TypeUrl.Listener)?.get(name);
  assert.ok(l, `listener ${name}`);
  return l;
}

function chain(l: Decoded, name: string): Decoded {
  const c = (l.filter_chains as Decoded[]).find((x) => x.name === name);
  assert.ok(c, `chain ${name} in ${(l.filter_chains as Decoded[]).map((x) => String(x.name)).join(', ')}`);
  return c;
}

function chainNames(l: Decoded | undefined): string[] {
  return ((l?.filter_chains ?? []) as Decoded[]).map((c) => String(c.name));
}

function ranges(list: Decoded[] | undefined): string[] {
  return (list ?? []).map((r) => `${String(r.address_prefix)}/${String(r.prefix_len.value)}`);
}

function names(cfg: Config, type: TypeUrl): string[] {
  return [...(cfg.get(type)?.keys() ?? [])].sort();
}

/**
 * Envoy's path matching for the specifiers ingress routes use (route.proto `RouteMatch`):
 * `path` exact, `prefix` string prefix, `path_separated_prefix` the prefix followed by the end
 * of the path or `/`, `safe_regex` a full match; the query string is not part of the path.
 */
function envoyMatches(match: Decoded, requestPath: string): boolean {
  const path = requestPath.split('?')[0];
  if (match.path !== undefined) return path === match.path;
  if (match.prefix !== undefined) return path.startsWith(match.prefix);
  if (match.path_separated_prefix !== undefined) return path === match.path_separated_prefix || path.startsWith(`${match.path_separated_prefix}/`);
  if (match.safe_regex !== undefined) return (compileRe2(match.safe_regex.regex) as Re2).fullMatch(path);
  throw new Error(`unknown path specifier ${JSON.stringify(match)}`);
}

/** The first route of the virtual hosts matching `host` that matches `path` (Envoy: first match wins), or undefined. */
function routeFor(rds: Decoded, host: string, path: string): Decoded | undefined {
  const vhs = rds.virtual_hosts as Decoded[];
  const vh = vhs.find((v) => (v.domains as string[]).includes(host)) ?? vhs.find((v) => (v.domains as string[]).includes('*'));
  return (vh?.routes as Decoded[] | undefined)?.find((r) => envoyMatches(r.match, path));
}

/** The bookstore mesh plus httpbin (port 14001) in a monitored namespace and an ingress controller outside the mesh. */
function ingressMesh(...extra: KubeObject[]): KubeObject[] {
  return [
    ...bookstoreMesh(),
    k8s.namespace('httpbin'),
    k8s.serviceAccount('httpbin', 'httpbin'),
    k8s.service('httpbin', 'httpbin', { app: 'httpbin' }, [{ port: 14001, name: 'http', targetPort: 14001 }], '10.96.1.10'),
    k8s.pod('httpbin', 'httpbin-1', 'httpbin', { app: 'httpbin' }, '10.244.5.10', [14001]),
    k8s.namespace('ingress-nginx', 'not-this-mesh'),
    k8s.service('ingress-nginx', 'ingress-nginx-controller', { app: 'nginx' }, [{ port: 80 }], '10.96.9.9'),
    k8s.endpoints('ingress-nginx', 'ingress-nginx-controller', ['10.244.9.2', '10.244.9.1'], 80),
    ...extra,
  ];
}

const NGINX_SOURCE = { kind: 'Service', name: 'ingress-nginx-controller', namespace: 'ingress-nginx' };
const HTTP_CHAIN = 'ingress_httpbin/httpbin_14001_http';
const HTTPS_CHAIN = 'ingress_httpbin/httpbin_14001_https';

describe('ingress (Kubernetes Ingress + OSM IngressBackend)', () => {
  it('has no ingress chain and no rds-ingress without an IngressBackend, even with an Ingress', () => {
    const cfg = configFor(
      ingressMesh(k8s.ingress('httpbin', 'httpbin', [{ paths: [{ path: '/', pathType: 'Prefix', service: 'httpbin', port: 14001 }] }])),
      'httpbin',
      'httpbin',
    );
    const inbound = listener(cfg, 'inbound-listener');
    assert.deepEqual(chainNames(inbound).filter((n) => n.startsWith('ingress_')), []);
    assert.deepEqual(names(cfg, TypeUrl.RouteConfiguration).filter((n) => n.startsWith('rds-ingress')), []);
  });

  it('accepts plain HTTP from the ingress controller pods on the target port and routes to the local cluster', () => {
    const cfg = configFor(ingressMesh(k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 14001, protocol: 'http' }], [NGINX_SOURCE])), 'httpbin', 'httpbin');
    const c = chain(listener(cfg, 'inbound-listener'), HTTP_CHAIN);
    assert.equal(c.filter_chain_match.destination_port.value, 14001);
    assert.equal(c.filter_chain_match.transport_protocol, 'raw_buffer');
    assert.deepEqual(ranges(c.filter_chain_match.source_prefix_ranges), ['10.244.9.1/32', '10.244.9.2/32']);
    assert.equal(c.filter_chain_match.server_names, undefined);
    assert.equal(c.transport_socket, undefined, 'plain HTTP: no TLS');
    assert.deepEqual(c.filters.map((f: Decoded) => f.name), ['envoy.filters.network.http_connection_manager']);
    assert.equal(c.filters[0].typed_config.rds.route_config_name, 'rds-ingress.14001');
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-ingress.14001')!;
    assert.deepEqual(rds.virtual_hosts.map((v: Decoded) => [v.name, v.domains]), [['ingress_virtual-host|*', ['*']]]);
    const only = rds.virtual_hosts[0].routes;
    assert.equal(only.length, 1, 'no Ingress names the backend: one route for every path');
    assert.equal(only[0].match.prefix, '/');
    assert.equal(only[0].route.cluster, 'httpbin/httpbin|14001|local');
    assert.ok(names(cfg, TypeUrl.Cluster).includes('httpbin/httpbin|14001|local'));
  });

  const sourceCases: { name: string; sources: { kind: string; name: string; namespace?: string }[]; expected: string[] }[] = [
    { name: 'Service → its endpoint IPs', sources: [NGINX_SOURCE], expected: ['10.244.9.1/32', '10.244.9.2/32'] },
    { name: 'IPRange → the CIDR', sources: [{ kind: 'IPRange', name: '10.0.0.0/8' }], expected: ['10.0.0.0/8'] },
    { name: 'Service and IPRange → both', sources: [NGINX_SOURCE, { kind: 'IPRange', name: '192.168.0.0/16' }], expected: ['10.244.9.1/32', '10.244.9.2/32', '192.168.0.0/16'] },
    { name: 'AuthenticatedPrincipal only (http) → any source address', sources: [{ kind: 'AuthenticatedPrincipal', name: 'nginx.ingress.cluster.local' }], expected: [] },
  ];
  for (const tc of sourceCases) {
    it(`matches sources by address: ${tc.name}`, () => {
      const cfg = configFor(ingressMesh(k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 14001, protocol: 'http' }], tc.sources)), 'httpbin', 'httpbin');
      assert.deepEqual(ranges(chain(listener(cfg, 'inbound-listener'), HTTP_CHAIN).filter_chain_match.source_prefix_ranges), tc.expected);
    });
  }

  describe('routes from the Ingress path types', () => {
    const cfg = configFor(
      ingressMesh(
        k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 14001, protocol: 'http' }], [NGINX_SOURCE]),
        k8s.ingress('httpbin', 'httpbin', [
          {
            paths: [
              { path: '/foo', pathType: 'Prefix', service: 'httpbin', port: 14001 },
              { path: '/status', pathType: 'Exact', service: 'httpbin', port: 14001 },
              { path: '/bar/', pathType: 'Prefix', service: 'httpbin', port: 14001 },
              { path: '/api/v[0-9]+/items', pathType: 'ImplementationSpecific', service: 'httpbin', port: 14001 },
              { path: '/static', pathType: 'ImplementationSpecific', service: 'httpbin', port: 14001 },
              { path: '/other', pathType: 'Prefix', service: 'bookstore', port: 14001 },
            ],
          },
          { host: 'httpbin.example.com', paths: [{ path: '/', pathType: 'Prefix', service: 'httpbin', port: 14001 }] },
        ]),
      ),
      'httpbin',
      'httpbin',
    );
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-ingress.14001')!;
    const any = rds.virtual_hosts.find((v: Decoded) => v.name === 'ingress_virtual-host|*');

    it('turns each path type into its Envoy path specifier, most specific first', () => {
      assert.deepEqual(
        any.routes.map((r: Decoded) => r.match),
        [
          { path: '/status' },
          { safe_regex: { regex: '/api/v[0-9]+/items' } },
          { prefix: '/static' },
          { path_separated_prefix: '/foo' },
          { path_separated_prefix: '/bar' },
        ],
      );
      assert.ok(any.routes.every((r: Decoded) => r.route.cluster === 'httpbin/httpbin|14001|local'));
    });

    const pathCases: [string, string, boolean][] = [
      ['Prefix /foo', '/foo', true],
      ['Prefix /foo', '/foo/bar', true],
      ['Prefix /foo', '/foo?x=1', true],
      ['Prefix /foo', '/foobar', false],
      ['Prefix /bar/ (trailing slash)', '/bar', true],
      ['Prefix /bar/ (trailing slash)', '/bar/baz', true],
      ['Exact /status', '/status', true],
      ['Exact /status', '/status/200', false],
      ['ImplementationSpecific regex', '/api/v2/items', true],
      ['ImplementationSpecific regex', '/api/vX/items', false],
      ['ImplementationSpecific prefix', '/staticfiles/a.css', true],
      ['other service', '/other', false],
    ];
    for (const [what, path, routed] of pathCases) {
      it(`${what}: ${path} is ${routed ? '' : 'not '}routed`, () => {
        assert.equal(routeFor(rds, 'anything.example.org', path) !== undefined, routed);
      });
    }

    it('puts a rule with a host in its own virtual host; Prefix / there matches every path', () => {
      const vh = rds.virtual_hosts.find((v: Decoded) => v.name === 'ingress_virtual-host|httpbin.example.com');
      assert.deepEqual(vh.domains, ['httpbin.example.com']);
      assert.deepEqual(vh.routes.map((r: Decoded) => r.match), [{ prefix: '/' }]);
      assert.ok(routeFor(rds, 'httpbin.example.com', '/anything/at/all'));
      const all = rds.virtual_hosts.flatMap((v: Decoded) => v.domains);
      assert.equal(new Set(all).size, all.length, 'domains unique across virtual hosts');
    });
  });

  it('terminates HTTPS with the service certificate, requires a client certificate and allows only the principals', () => {
    const cfg = configFor(
      ingressMesh(
        k8s.ingressBackend(
          'httpbin',
          'httpbin',
          [{ name: 'httpbin', port: 14001, protocol: 'https', tls: { skipClientCertValidation: false, sniHosts: ['httpbin.example.com'] } }],
          [NGINX_SOURCE, { kind: 'AuthenticatedPrincipal', name: 'ingress-nginx.ingress-nginx.cluster.local' }],
        ),
      ),
      'httpbin',
      'httpbin',
    );
    const c = chain(listener(cfg, 'inbound-listener'), HTTPS_CHAIN);
    assert.equal(c.filter_chain_match.transport_protocol, 'tls');
    assert.deepEqual(c.filter_chain_match.server_names, ['httpbin.example.com']);
    assert.deepEqual(ranges(c.filter_chain_match.source_prefix_ranges), ['10.244.9.1/32', '10.244.9.2/32']);
    const tls = c.transport_socket.typed_config;
    assert.equal(tls['@type'], 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext');
    assert.equal(tls.require_client_certificate.value, true);
    assert.equal(tls.common_tls_context.tls_certificate_sds_secret_configs[0].name, 'service-cert');
    assert.equal(tls.common_tls_context.validation_context_sds_secret_config.name, 'root-cert-https:httpbin/httpbin');
    const rbac = c.filters[0].typed_config;
    assert.equal(c.filters[0].name, 'envoy.filters.network.rbac');
    assert.equal(rbac.stat_prefix, 'ingress_rbac');
    assert.equal(rbac.rules.action, 'ALLOW');
    const principals = Object.values(rbac.rules.policies as Record<string, Decoded>).flatMap((p) => p.principals.map((x: Decoded) => x.authenticated.principal_name.exact));
    assert.deepEqual(principals, ['ingress-nginx.ingress-nginx.cluster.local']);
    assert.equal(c.filters[1].typed_config.rds.route_config_name, 'rds-ingress.14001');
    const secret = cfg.get(TypeUrl.Secret)!.get('root-cert-https:httpbin/httpbin')!;
    assert.equal(secret.validation_context.trusted_ca.inline_string, 'ROOT');
    assert.equal(secret.validation_context.match_typed_subject_alt_names, undefined, 'principals are checked by RBAC, not pinned');
  });

  it('with skipClientCertValidation: TLS without a client certificate, no RBAC, no root-cert-https', () => {
    const cfg = configFor(
      ingressMesh(
        k8s.ingressBackend(
          'httpbin',
          'httpbin',
          [{ name: 'httpbin', port: 14001, protocol: 'https', tls: { skipClientCertValidation: true } }],
          [NGINX_SOURCE, { kind: 'AuthenticatedPrincipal', name: 'untrusted-client.cluster.local' }],
        ),
      ),
      'httpbin',
      'httpbin',
    );
    const c = chain(listener(cfg, 'inbound-listener'), HTTPS_CHAIN);
    assert.equal(c.filter_chain_match.transport_protocol, 'tls');
    assert.equal(c.filter_chain_match.server_names, undefined, 'no sniHosts: any SNI');
    const tls = c.transport_socket.typed_config;
    assert.equal(tls.require_client_certificate.value, false);
    assert.equal(tls.common_tls_context.validation_context_sds_secret_config, undefined);
    assert.deepEqual(c.filters.map((f: Decoded) => f.name), ['envoy.filters.network.http_connection_manager']);
    assert.ok(!names(cfg, TypeUrl.Secret).includes('root-cert-https:httpbin/httpbin'));
  });

  it('keeps the mesh chain when an https ingress with no source ranges names the service FQDN as SNI', () => {
    const cfg = configFor(
      ingressMesh(
        k8s.ingressBackend(
          'httpbin',
          'httpbin',
          [{ name: 'httpbin', port: 14001, protocol: 'https', tls: { skipClientCertValidation: true, sniHosts: ['httpbin.httpbin.svc.cluster.local', 'httpbin.example.com'] } }],
          [],
        ),
      ),
      'httpbin',
      'httpbin',
    );
    const inbound = listener(cfg, 'inbound-listener');
    assert.deepEqual(chain(inbound, 'inbound_httpbin/httpbin|14001_http').filter_chain_match.server_names, ['httpbin.httpbin.svc.cluster.local']);
    assert.deepEqual(chain(inbound, HTTPS_CHAIN).filter_chain_match.server_names, ['httpbin.example.com'], 'the colliding SNI is left to the mesh chain');
  });

  it('gives nothing to a proxy that does not serve the backend', () => {
    const cfg = configFor(ingressMesh(k8s.ingressBackend('httpbin', 'httpbin', [{ name: 'httpbin', port: 14001, protocol: 'http' }], [NGINX_SOURCE])), 'bookstore', 'bookstore');
    assert.deepEqual(chainNames(cfg.get(TypeUrl.Listener)!.get('inbound-listener')).filter((n) => n.startsWith('ingress_')), []);
    assert.deepEqual(names(cfg, TypeUrl.RouteConfiguration).filter((n) => n.startsWith('rds-ingress')), []);
  });
});

const CURL = { ns: 'bookbuyer', sa: 'bookbuyer' };

function egressMesh(...extra: KubeObject[]): KubeObject[] {
  return [...bookstoreMesh(), ...extra];
}

describe('egress (OSM Egress policies)', () => {
  it('applies no Egress policy, and reports each, when MeshConfig featureFlags.enableEgressPolicy is false (OSM v1.2; unset is true, its chart default)', () => {
    const egress = k8s.egress('bookbuyer', 'httpbin-80', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 80, protocol: 'http' }] });
    const off = egressMesh(egress).map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), featureFlags: { enableEgressPolicy: false } } } : o));
    const { snapshot, problems } = buildMeshSnapshot(memoryStore(off), { meshName: 'osm', generation: 1 });
    assert.deepEqual(snapshot.egressPolicies, []);
    assert.deepEqual(problems.map((p) => `${p.kind} ${p.namespace}/${p.name} ${p.field}: ${p.message}`), [
      'Egress bookbuyer/httpbin-80 metadata: MeshConfig spec.featureFlags.enableEgressPolicy is off: it is not in force',
    ]);
    const listeners = generateProxyResources(new GenerationContext(snapshot), proxyProfile(proxyOf('bookbuyer', 'bookbuyer')), CERTS).get(TypeUrl.Listener) ?? [];
    const chains = listeners.flatMap((l) => (l.resource as { filter_chains?: { name?: string }[] }).filter_chains ?? []);
    assert.deepEqual(chains.map((c) => c.name).filter((n) => n?.startsWith('egress')), []);
    assert.equal(buildMeshSnapshot(memoryStore(egressMesh(egress)), { meshName: 'osm', generation: 1 }).snapshot.egressPolicies.length, 1, 'unset: on');
  });

  it('http: a chain on the port, rds-egress by host, a LOGICAL_DNS cluster per host:port', () => {
    const cfg = configFor(egressMesh(k8s.egress('bookbuyer', 'httpbin-80', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 80, protocol: 'http' }] })), 'bookbuyer', 'bookbuyer');
    const c = chain(listener(cfg, 'outbound-listener'), 'egress-http.80');
    assert.equal(c.filter_chain_match.destination_port.value, 80);
    assert.equal(c.filter_chain_match.prefix_ranges, undefined, 'no ipAddresses: any destination address');
    assert.equal(c.filters[0].typed_config.rds.route_config_name, 'rds-egress.80');
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-egress.80')!;
    assert.deepEqual(rds.virtual_hosts.map((v: Decoded) => [v.name, v.domains]), [['egress_virtual-host|httpbin.org', ['httpbin.org', 'httpbin.org:80']]]);
    assert.deepEqual(rds.virtual_hosts[0].routes.map((r: Decoded) => [r.match, r.route.cluster]), [[{ prefix: '/' }, 'httpbin.org:80']]);
    const cluster = cfg.get(TypeUrl.Cluster)!.get('httpbin.org:80')!;
    assert.equal(cluster.type, 'LOGICAL_DNS');
    assert.equal(cluster.dns_lookup_family, 'V4_PREFERRED');
    assert.equal(cluster.transport_socket, undefined, 'no mesh TLS to the outside');
    const addr = cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    assert.deepEqual([addr.address, addr.port_value], ['httpbin.org', 80]);
  });

  it('applies the UpstreamTrafficSetting of an egress host to its cluster (OSM circuit breaking, mesh external)', () => {
    const setting: KubeObject = {
      apiVersion: 'policy.openservicemesh.io/v1alpha1',
      kind: 'UpstreamTrafficSetting',
      metadata: { name: 'httpbin-external', namespace: 'bookbuyer' },
      spec: {
        host: 'httpbin.org',
        connectionSettings: { tcp: { maxConnections: 1 }, http: { maxPendingRequests: 1, maxRequestsPerConnection: 1 } },
      },
    };
    const egress = k8s.egress('bookbuyer', 'httpbin-80', {
      sources: [CURL],
      hosts: ['httpbin.org'],
      ports: [{ number: 80, protocol: 'http' }],
      matches: [{ apiGroup: 'policy.openservicemesh.io/v1alpha1', kind: 'UpstreamTrafficSetting', name: 'httpbin-external' }],
    });
    const cluster = configFor(egressMesh(egress, setting), 'bookbuyer', 'bookbuyer').get(TypeUrl.Cluster)!.get('httpbin.org:80')!;
    const t = cluster.circuit_breakers.thresholds[0];
    assert.deepEqual([t.max_connections.value, t.max_pending_requests.value], [1, 1]);
    const options = cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    assert.equal(options.common_http_protocol_options.max_requests_per_connection.value, 1);
  });

  it('http with an HTTPRouteGroup: one route per match, nothing else', () => {
    const cfg = configFor(
      egressMesh(
        k8s.httpRouteGroup('bookbuyer', 'egress-http-route', [
          { name: 'get', pathRegex: '/get' },
          { name: 'status', pathRegex: '/status.*', methods: ['GET', 'HEAD'] },
        ]),
        k8s.egress('bookbuyer', 'httpbin-80', {
          sources: [CURL],
          hosts: ['httpbin.org'],
          ports: [{ number: 80, protocol: 'http' }],
          matches: [{ kind: 'HTTPRouteGroup', name: 'egress-http-route' }],
        }),
      ),
      'bookbuyer',
      'bookbuyer',
    );
    const routes = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-egress.80')!.virtual_hosts[0].routes;
    assert.deepEqual(
      routes.map((r: Decoded) => [r.match.safe_regex?.regex, r.match.headers?.[0]?.string_match.safe_regex.regex, r.route.cluster]),
      [
        ['/get', undefined, 'httpbin.org:80'],
        ['/status.*', '^(GET|HEAD)$', 'httpbin.org:80'],
      ],
    );
  });

  it('https: a TLS chain matching the SNI to a tcp_proxy, and tls_inspector on the outbound listener', () => {
    const cfg = configFor(egressMesh(k8s.egress('bookbuyer', 'httpbin-443', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 443, protocol: 'https' }] })), 'bookbuyer', 'bookbuyer');
    const out = listener(cfg, 'outbound-listener');
    const c = chain(out, 'egress-https.443|httpbin.org');
    assert.equal(c.filter_chain_match.destination_port.value, 443);
    assert.deepEqual(c.filter_chain_match.server_names, ['httpbin.org']);
    assert.equal(c.filter_chain_match.transport_protocol, 'tls');
    assert.equal(c.filters[0].name, 'envoy.filters.network.tcp_proxy');
    assert.equal(c.filters[0].typed_config.cluster, 'httpbin.org:443');
    assert.equal(cfg.get(TypeUrl.Cluster)!.get('httpbin.org:443')!.type, 'LOGICAL_DNS');
    assert.deepEqual(out.listener_filters.map((f: Decoded) => f.name), ['envoy.filters.listener.original_dst', 'envoy.filters.listener.tls_inspector']);
    assert.equal(out.listener_filters[1].filter_disabled, undefined);
  });

  it('https to a wildcard host: SNI match, to the ORIGINAL_DST cluster of the port', () => {
    const cfg = configFor(egressMesh(k8s.egress('bookbuyer', 'wild', { sources: [CURL], hosts: ['*.example.com'], ports: [{ number: 443, protocol: 'https' }] })), 'bookbuyer', 'bookbuyer');
    const c = chain(listener(cfg, 'outbound-listener'), 'egress-https.443|*.example.com');
    assert.deepEqual(c.filter_chain_match.server_names, ['*.example.com']);
    assert.equal(c.filters[0].typed_config.cluster, '443');
    const cluster = cfg.get(TypeUrl.Cluster)!.get('443')!;
    assert.deepEqual([cluster.type, cluster.lb_policy], ['ORIGINAL_DST', 'CLUSTER_PROVIDED']);
  });

  it('tcp with IP ranges: a chain on port and ranges to the ORIGINAL_DST cluster of the port', () => {
    const cfg = configFor(
      egressMesh(k8s.egress('bookbuyer', 'db', { sources: [CURL], ipAddresses: ['10.1.0.0/16', '192.168.10.5/32'], ports: [{ number: 5432, protocol: 'tcp' }] })),
      'bookbuyer',
      'bookbuyer',
    );
    const c = chain(listener(cfg, 'outbound-listener'), 'egress-tcp.5432');
    assert.equal(c.filter_chain_match.destination_port.value, 5432);
    assert.deepEqual(ranges(c.filter_chain_match.prefix_ranges), ['10.1.0.0/16', '192.168.10.5/32']);
    assert.equal(c.filter_chain_match.server_names, undefined);
    assert.equal(c.filters[0].typed_config.cluster, '5432');
    assert.equal(cfg.get(TypeUrl.Cluster)!.get('5432')!.type, 'ORIGINAL_DST');
    assert.deepEqual(listener(cfg, 'outbound-listener').listener_filters.map((f: Decoded) => f.name), ['envoy.filters.listener.original_dst'], 'no TLS chain: no inspector');
  });

  it('merges two policies on one port into one chain and one route configuration', () => {
    const cfg = configFor(
      egressMesh(
        k8s.egress('bookbuyer', 'a', { sources: [CURL], hosts: ['a.example.com'], ipAddresses: ['203.0.113.0/24'], ports: [{ number: 80, protocol: 'http' }] }),
        k8s.egress('bookbuyer', 'b', { sources: [CURL], hosts: ['b.example.com', 'a.example.com'], ports: [{ number: 80, protocol: 'http' }] }),
        k8s.egress('bookbuyer', 'c', { sources: [CURL], ipAddresses: ['10.1.0.0/16'], ports: [{ number: 5432, protocol: 'tcp' }] }),
        k8s.egress('bookbuyer', 'd', { sources: [CURL], ipAddresses: ['10.2.0.0/16'], ports: [{ number: 5432, protocol: 'tcp-server-first' }] }),
      ),
      'bookbuyer',
      'bookbuyer',
    );
    const out = listener(cfg, 'outbound-listener');
    assert.deepEqual(chainNames(out).filter((n) => n.startsWith('egress')), ['egress-http.80', 'egress-tcp.5432']);
    assert.equal(chain(out, 'egress-http.80').filter_chain_match.prefix_ranges, undefined, 'policy b names no ipAddresses: any address');
    assert.deepEqual(ranges(chain(out, 'egress-tcp.5432').filter_chain_match.prefix_ranges), ['10.1.0.0/16', '10.2.0.0/16']);
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-egress.80')!;
    assert.deepEqual(rds.virtual_hosts.map((v: Decoded) => v.name), ['egress_virtual-host|a.example.com', 'egress_virtual-host|b.example.com']);
    assert.deepEqual(names(cfg, TypeUrl.Cluster).filter((n) => !n.includes('/') && !n.includes('-')), ['5432', 'a.example.com:80', 'b.example.com:80']);
  });

  it('disables tls_inspector on server-first ports', () => {
    const cfg = configFor(
      egressMesh(
        k8s.egress('bookbuyer', 'https', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 443, protocol: 'https' }] }),
        k8s.egress('bookbuyer', 'smtp', { sources: [CURL], ipAddresses: ['198.51.100.0/24'], ports: [{ number: 25, protocol: 'tcp-server-first' }] }),
      ),
      'bookbuyer',
      'bookbuyer',
    );
    const inspector = listener(cfg, 'outbound-listener').listener_filters[1];
    assert.equal(inspector.name, 'envoy.filters.listener.tls_inspector');
    assert.deepEqual(inspector.filter_disabled.destination_port_range, { start: 25, end: 26 });
  });

  it('gives a source not listed nothing', () => {
    const cfg = configFor(egressMesh(k8s.egress('bookbuyer', 'httpbin-80', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 80, protocol: 'http' }] })), 'bookthief', 'bookthief');
    assert.deepEqual(names(cfg, TypeUrl.Listener), []);
    assert.deepEqual(names(cfg, TypeUrl.Cluster), ['envoy-metrics-cluster']);
    assert.deepEqual(names(cfg, TypeUrl.RouteConfiguration), []);
  });

  it('ignores Egress policies when MeshConfig enableEgress passes everything through (OSM v1.2)', () => {
    const objects = egressMesh(k8s.egress('bookbuyer', 'httpbin-80', { sources: [CURL], hosts: ['httpbin.org'], ports: [{ number: 80, protocol: 'http' }] })).filter((o) => o.kind !== 'MeshConfig');
    objects.push(k8s.meshConfig(false, true));
    const cfg = configFor(objects, 'bookbuyer', 'bookbuyer');
    assert.deepEqual(chainNames(listener(cfg, 'outbound-listener')).filter((n) => n.startsWith('egress')), []);
    assert.ok(!names(cfg, TypeUrl.Cluster).includes('httpbin.org:80'));
    assert.ok(names(cfg, TypeUrl.Cluster).includes('passthrough-outbound'));
  });

  it('keeps the mesh chain for a ClusterIP an egress policy also names on the same port', () => {
    const cfg = configFor(
      egressMesh(
        k8s.egress('bookbuyer', 'overlap', { sources: [CURL], ipAddresses: ['10.96.0.10/32', '203.0.113.7/32'], ports: [{ number: 14001, protocol: 'tcp' }] }),
        k8s.egress('bookbuyer', 'web', { sources: [CURL], hosts: ['web.example.com'], ports: [{ number: 14001, protocol: 'http' }] }),
      ),
      'bookbuyer',
      'bookbuyer',
    );
    const out = listener(cfg, 'outbound-listener');
    assert.deepEqual(ranges(chain(out, 'outbound_http_14001').filter_chain_match.prefix_ranges), ['10.96.0.10/32', '10.96.0.11/32', '10.96.0.12/32']);
    assert.deepEqual(ranges(chain(out, 'egress-tcp.14001').filter_chain_match.prefix_ranges), ['203.0.113.7/32'], 'the ClusterIP stays with the mesh');
    assert.equal(chain(out, 'egress-http.14001').filter_chain_match.prefix_ranges, undefined);
  });
});
