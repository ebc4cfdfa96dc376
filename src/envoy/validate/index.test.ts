import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../../api/type-urls.js';
import { buildMeshSnapshot, MeshSnapshotBuilder } from '../../catalog/build-snapshot.js';
import { ObjectStore } from '../../store/object-store.js';
import { parseCommonName, type Proxy } from '../../proxy/types.js';
import { bookstoreMesh, k8s } from '../../../test/fixtures/mesh.js';
import { memoryStore } from '../../../test/helpers/memory-store.js';
import { mulberry32 } from '../../../test/helpers/seeded-random.js';
import { GenerationContext, proxyProfile } from '../context.js';
import { generateProxyResources, type ProxyResources } from '../generate.js';
import type { NamedResource } from '../resource.js';
import { formatViolation, ResourceCheckCache, validateProxyResources } from './index.js';
import { decodeMessage, encodeChecked, encodeMessage } from '../../api/codec.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const HCM = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const ROUTER = 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router';
const TCP_PROXY = 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy';
const UPSTREAM_TLS = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';
const ADS = { ads: {}, resource_api_version: 'V3' };

/** A small, complete and consistent resource set (object form). */
function baseSet(): Record<TypeUrl, Obj[]> {
  const cluster = (name: string): Obj => ({
    name,
    type: 'EDS',
    connect_timeout: { seconds: 1 },
    eds_cluster_config: { eds_config: ADS },
    transport_socket: {
      name: 'envoy.transport_sockets.tls',
      typed_config: {
        '@type': UPSTREAM_TLS,
        common_tls_context: {
          tls_certificate_sds_secret_configs: [{ name: 'service-cert', sds_config: ADS }],
          validation_context_sds_secret_config: { name: 'root', sds_config: ADS },
        },
      },
    },
  });
  const cla = (name: string): Obj => ({
    cluster_name: name,
    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '10.0.0.1', port_value: 80 } } } }] }],
  });
  return {
    [TypeUrl.Cluster]: [cluster('a'), cluster('b')],
    [TypeUrl.ClusterLoadAssignment]: [cla('a'), cla('b')],
    [TypeUrl.Listener]: [
      {
        name: 'outbound-listener',
        address: { socket_address: { address: '0.0.0.0', port_value: 15001 } },
        filter_chains: [
          {
            name: 'http',
            filter_chain_match: { destination_port: { value: 80 } },
            filters: [
              {
                name: 'envoy.filters.network.http_connection_manager',
                typed_config: {
                  '@type': HCM,
                  stat_prefix: 'http',
                  rds: { route_config_name: 'rds-outbound.80', config_source: ADS },
                  http_filters: [{ name: 'envoy.filters.http.router', typed_config: { '@type': ROUTER } }],
                },
              },
            ],
          },
          {
            name: 'tcp',
            filter_chain_match: { destination_port: { value: 3306 } },
            filters: [{ name: 'envoy.filters.network.tcp_proxy', typed_config: { '@type': TCP_PROXY, stat_prefix: 'tcp', cluster: 'b' } }],
          },
        ],
      },
    ],
    [TypeUrl.RouteConfiguration]: [
      {
        name: 'rds-outbound.80',
        virtual_hosts: [
          { name: 'a', domains: ['a.ns', 'a.ns:80'], routes: [{ match: { prefix: '/' }, route: { cluster: 'a' } }] },
          {
            name: 'b',
            domains: ['b.ns'],
            routes: [
              {
                match: { safe_regex: { regex: '/books.*' } },
                route: { weighted_clusters: { clusters: [{ name: 'a', weight: { value: 60 } }, { name: 'b', weight: { value: 40 } }], total_weight: { value: 100 } } },
              },
            ],
          },
        ],
      },
    ],
    [TypeUrl.Secret]: [
      { name: 'service-cert', tls_certificate: { certificate_chain: { inline_string: 'C' }, private_key: { inline_string: 'K' } } },
      { name: 'root', validation_context: { trusted_ca: { inline_string: 'R' } } },
    ],
  };
}

function toResources(set: Record<TypeUrl, Obj[]>): ProxyResources {
  const nameOf = (type: TypeUrl, r: Obj): string => (type === TypeUrl.ClusterLoadAssignment ? r.cluster_name : r.name);
  return new Map(Object.entries(set).map(([type, list]) => [type as TypeUrl, list.map((r) => ({ name: nameOf(type as TypeUrl, r), resource: r }) as NamedResource)]));
}

const L = (s: Record<TypeUrl, Obj[]>): Obj => s[TypeUrl.Listener][0]!;
const RC = (s: Record<TypeUrl, Obj[]>): Obj => s[TypeUrl.RouteConfiguration][0]!;
const WC = (s: Record<TypeUrl, Obj[]>): Obj => RC(s).virtual_hosts[1].routes[0].route.weighted_clusters;

interface Case {
  name: string;
  mutate: (s: Record<TypeUrl, Obj[]>) => void;
  typeUrl: TypeUrl;
  resource: string;
  rule: string;
  path: string;
}

const CASES: Case[] = [
  { name: 'two clusters with one name', mutate: (s) => s[TypeUrl.Cluster].push({ ...s[TypeUrl.Cluster][0] }), typeUrl: TypeUrl.Cluster, resource: 'a', rule: 'name.unique', path: '' },
  {
    name: 'duplicate filter_chain_match (absent and empty equal)',
    mutate: (s) => {
      L(s).filter_chains[0].filter_chain_match = { destination_port: { value: 80 }, prefix_ranges: [] };
      L(s).filter_chains[1].filter_chain_match = { destination_port: { value: 80 } };
    },
    typeUrl: TypeUrl.Listener,
    resource: 'outbound-listener',
    rule: 'listener.unique_filter_chain_match',
    path: 'filter_chains[1].filter_chain_match',
  },
  { name: 'a domain in two virtual hosts', mutate: (s) => RC(s).virtual_hosts[1].domains.push('A.ns'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'route_configuration.unique_domains', path: 'virtual_hosts[1].domains[1]' },
  { name: 'route to a missing cluster', mutate: (s) => (RC(s).virtual_hosts[0].routes[0].route.cluster = 'nope'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'reference.cluster', path: 'virtual_hosts[0].routes[0].route.cluster' },
  { name: 'weighted cluster missing', mutate: (s) => (WC(s).clusters[1].name = 'nope'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'reference.cluster', path: 'virtual_hosts[1].routes[0].route.weighted_clusters.clusters[1].name' },
  {
    name: 'tcp_proxy to a missing cluster',
    mutate: (s) => (L(s).filter_chains[1].filters[0].typed_config.cluster = 'nope'),
    typeUrl: TypeUrl.Listener,
    resource: 'outbound-listener',
    rule: 'reference.cluster',
    path: 'filter_chains[1].filters[0].typed_config<TcpProxy>.cluster',
  },
  {
    name: 'HCM names a missing route configuration',
    mutate: (s) => (L(s).filter_chains[0].filters[0].typed_config.rds.route_config_name = 'rds-outbound.81'),
    typeUrl: TypeUrl.Listener,
    resource: 'outbound-listener',
    rule: 'reference.route_configuration',
    path: 'filter_chains[0].filters[0].typed_config<HttpConnectionManager>.rds.route_config_name',
  },
  { name: 'EDS cluster without assignment', mutate: (s) => s[TypeUrl.ClusterLoadAssignment].pop(), typeUrl: TypeUrl.Cluster, resource: 'b', rule: 'reference.cluster_load_assignment', path: 'name' },
  {
    name: 'missing secret',
    mutate: (s) => s[TypeUrl.Secret].pop(),
    typeUrl: TypeUrl.Cluster,
    resource: 'a',
    rule: 'reference.secret',
    path: 'transport_socket.typed_config<UpstreamTlsContext>.common_tls_context.validation_context_sds_secret_config.name',
  },
  { name: 'weights not summing to total_weight', mutate: (s) => (WC(s).total_weight = { value: 90 }), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'weighted_clusters.total_weight', path: 'virtual_hosts[1].routes[0].route.weighted_clusters.total_weight' },
  {
    name: 'weights summing to 0',
    mutate: (s) => {
      WC(s).clusters.forEach((c: Obj) => (c.weight = { value: 0 }));
      delete WC(s).total_weight;
    },
    typeUrl: TypeUrl.RouteConfiguration,
    resource: 'rds-outbound.80',
    rule: 'weighted_clusters.zero_sum',
    path: 'virtual_hosts[1].routes[0].route.weighted_clusters.clusters',
  },
  {
    name: 'hostname endpoint',
    mutate: (s) => (s[TypeUrl.ClusterLoadAssignment][0]!.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address = 'a.ns.svc'),
    typeUrl: TypeUrl.ClusterLoadAssignment,
    resource: 'a',
    rule: 'endpoint.ip_literal',
    path: 'endpoints[0].lb_endpoints[0].endpoint.address.socket_address.address',
  },
  { name: 'regex that does not compile', mutate: (s) => (RC(s).virtual_hosts[1].routes[0].match.safe_regex.regex = '/books(['), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'regex.compile', path: 'virtual_hosts[1].routes[0].match.safe_regex.regex' },
  { name: 'regex over RE2\'s repeat limit', mutate: (s) => (RC(s).virtual_hosts[1].routes[0].match.safe_regex.regex = '/x{1001}'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'regex.compile', path: 'virtual_hosts[1].routes[0].match.safe_regex.regex' },
  { name: 'regex with an escape RE2 does not have (\\Z)', mutate: (s) => (RC(s).virtual_hosts[1].routes[0].match.safe_regex.regex = '/books\\Z'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'regex.compile', path: 'virtual_hosts[1].routes[0].match.safe_regex.regex' },
  { name: 'regex RE2 rejects (lookahead)', mutate: (s) => (RC(s).virtual_hosts[1].routes[0].match.safe_regex.regex = '/(?!admin)'), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'regex.re2_unsupported', path: 'virtual_hosts[1].routes[0].match.safe_regex.regex' },
  { name: 'empty regex (annotation)', mutate: (s) => (RC(s).virtual_hosts[1].routes[0].match.safe_regex.regex = ''), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'string.min_len', path: 'virtual_hosts[1].routes[0].match.safe_regex.regex' },
  { name: 'virtual host with no domains (annotation)', mutate: (s) => (RC(s).virtual_hosts[1].domains = []), typeUrl: TypeUrl.RouteConfiguration, resource: 'rds-outbound.80', rule: 'repeated.min_items', path: 'virtual_hosts[1].domains' },
  { name: 'unknown field cannot be encoded', mutate: (s) => (s[TypeUrl.Secret][1]!.bogus = 1), typeUrl: TypeUrl.Secret, resource: 'root', rule: 'encode', path: '' },
];

describe('validateProxyResources: cross-resource rules', () => {
  it('finds nothing wrong in the consistent base set, and leaves it whole', () => {
    const resources = toResources(baseSet());
    const result = validateProxyResources(resources);
    assert.deepEqual(result.violations.map(formatViolation), []);
    assert.deepEqual(result.dropped, []);
    for (const [type, list] of resources) assert.equal(result.valid.get(type), list);
  });
  for (const c of CASES) {
    it(`reports ${c.rule}: ${c.name}`, () => {
      const set = baseSet();
      c.mutate(set);
      const { violations, valid } = validateProxyResources(toResources(set));
      assert.ok(
        violations.some((v) => v.typeUrl === c.typeUrl && v.name === c.resource && v.rule === c.rule && v.path === c.path),
        `expected ${c.rule} on ${c.resource} at ${c.path}, got ${violations.map(formatViolation).join('; ')}`,
      );
      assert.ok(!valid.get(c.typeUrl)!.some((r) => r.name === c.resource), `${c.resource} is left out of valid`);
    });
  }
});

describe('validateProxyResources: what is left out', () => {
  it('drops what refers to a dropped resource, transitively, and keeps the rest', () => {
    const set = baseSet();
    set[TypeUrl.Cluster][0]!.connect_timeout = { seconds: 0 }; // cluster a breaks duration.gt
    const { violations, valid, dropped } = validateProxyResources(toResources(set));
    assert.deepEqual(violations.map((v) => [v.name, v.rule, v.path]), [['a', 'duration.gt', 'connect_timeout']]);
    assert.deepEqual(dropped[0], { typeUrl: TypeUrl.Cluster, name: 'a', reason: 'violation' });
    const byName = new Map(dropped.map((d) => [d.name, d]));
    assert.deepEqual(byName.get('rds-outbound.80')?.because, { typeUrl: TypeUrl.Cluster, name: 'a' });
    assert.deepEqual(byName.get('outbound-listener')?.because, { typeUrl: TypeUrl.RouteConfiguration, name: 'rds-outbound.80' });
    assert.deepEqual(new Set(dropped.map((d) => d.name)), new Set(['a', 'rds-outbound.80', 'outbound-listener']));
    assert.deepEqual(valid.get(TypeUrl.Cluster)!.map((r) => r.name), ['b']);
    assert.deepEqual(valid.get(TypeUrl.Listener), []);
    assert.deepEqual(valid.get(TypeUrl.RouteConfiguration), []);
    assert.deepEqual(valid.get(TypeUrl.ClusterLoadAssignment)!.map((r) => r.name), ['a', 'b'], 'an orphan assignment is harmless');
    const again = validateProxyResources(valid);
    assert.deepEqual(again.violations, [], 'valid is referentially closed');
  });
});

describe('ResourceCheckCache: what it remembers is its own', () => {
  it('a fresh cache finds, in objects another cache checked, what they break now (cross-resource facts included)', () => {
    const set = baseSet();
    assert.deepEqual(validateProxyResources(toResources(set), new ResourceCheckCache()).violations, []);
    // Objects a cache checked are not to be changed (generated objects never are); a test that
    // changes one and checks it with a new cache must not get the first cache's answers.
    RC(set).virtual_hosts[0].routes[0].route.cluster = 'missing';
    const again = validateProxyResources(toResources(set), new ResourceCheckCache());
    assert.deepEqual(again.violations.map((v) => `${v.name} ${v.rule} ${v.path}`), ['rds-outbound.80 reference.cluster virtual_hosts[0].routes[0].route.cluster']);
  });
});

describe('generated configuration of the bookstore fixture', () => {
  const certs = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };
  for (const permissive of [false, true]) {
    for (const egress of [false, true]) {
      it(`has no violations for any identity (${permissive ? 'permissive' : 'SMI'}, egress ${egress ? 'on' : 'off'})`, () => {
        const objects = bookstoreMesh({ permissive }).map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(permissive, egress) : o));
        const { snapshot } = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
        const context = new GenerationContext(snapshot);
        const identities = [...snapshot.servicesByIdentity.keys(), 'bookbuyer/bookbuyer', 'bookthief/bookthief'];
        assert.ok(identities.length >= 6);
        for (const identity of new Set(identities)) {
          const [ns, sa] = identity.split('/') as [string, string];
          for (const clientType of [undefined, 'grpc'] as const) {
            const proxy: Proxy = { ...parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`), ...(clientType ? { clientType } : {}) };
            const resources = generateProxyResources(context, proxyProfile(proxy), certs);
            const { violations } = validateProxyResources(resources);
            assert.deepEqual(violations.map(formatViolation), [], `${identity}${clientType ? ' (proxyless)' : ''}`);
          }
        }
      });
    }
  }
});

describe('encodeChecked', () => {
  it('gives, for every generated resource, the very object its bytes decode to', () => {
    const certs = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };
    const objects = bookstoreMesh({ permissive: false }).map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(false, true) : o));
    const { snapshot } = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
    const context = new GenerationContext(snapshot);
    let compared = 0;
    for (const identity of snapshot.servicesByIdentity.keys()) {
      const [ns, sa] = identity.split('/') as [string, string];
      const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
      for (const [typeUrl, list] of generateProxyResources(context, proxyProfile(proxy), certs)) {
        for (const r of list) {
          const { encoded, decoded } = encodeChecked(typeUrl, r.resource);
          assert.deepEqual(decoded, decodeMessage(typeUrl, encoded), r.name);
          compared++;
        }
      }
    }
    assert.ok(compared > 40, `compared ${compared}`);
  });

  it('reports an unknown field by its path', () => {
    assert.throws(() => encodeChecked(TypeUrl.Cluster, { name: 'a', conect_timeout: { seconds: 1 } }), /Cluster: unknown field "conect_timeout"/);
  });

  it('reports a number that does not fit its integer field, which protobufjs would wrap', () => {
    const limits = (max_connections: number) => ({ name: 'a', circuit_breakers: { thresholds: [{ max_connections: { value: max_connections } }] } });
    assert.throws(() => encodeChecked(TypeUrl.Cluster, limits(4_294_967_296)), /Cluster\.circuit_breakers\.thresholds\[0\]\.max_connections\.value: 4294967296 does not fit uint32/);
    assert.throws(() => encodeChecked(TypeUrl.Cluster, limits(-1)), /-1 does not fit uint32/);
    assert.throws(() => encodeChecked(TypeUrl.Cluster, limits(1.5)), /1\.5 does not fit uint32/);
    assert.doesNotThrow(() => encodeChecked(TypeUrl.Cluster, limits(4_294_967_295)));
  });
});

/**
 * A generated upstream cluster as two parts, all but its transport socket and that socket (no
 * generator gives parts since every proxy shares one upstream cluster; the encoder still takes them).
 */
function tlsParts(r: NamedResource): readonly object[] | undefined {
  const { transport_socket, ...base } = r.resource as Obj;
  return transport_socket !== undefined && base.type === 'EDS' ? [base, { transport_socket }] : r.parts;
}

describe('resources given as parts (NamedResource.parts)', () => {
  const bookbuyer = parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.bookbuyer.bookbuyer.cluster.local');
  const mesh = new GenerationContext(buildMeshSnapshot(memoryStore(bookstoreMesh()), { meshName: 'osm', generation: 1 }).snapshot);

  it('encode, concatenated, to the same message as the whole resource', () => {
    const clusters = generateProxyResources(mesh, proxyProfile(bookbuyer), { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' }).get(TypeUrl.Cluster)!;
    const withParts = clusters.filter((c) => tlsParts(c));
    assert.ok(withParts.length >= 3, 'the upstream clusters split into parts');
    const cache = new ResourceCheckCache();
    for (const c of withParts) {
      const checked = cache.check(TypeUrl.Cluster, c.resource, tlsParts(c));
      assert.deepEqual(checked.violations, []);
      // The wire form of the parts is the whole resource: decoded, nothing is lost or added.
      assert.deepEqual(decodeMessage(TypeUrl.Cluster, checked.encoded!), decodeMessage(TypeUrl.Cluster, encodeMessage(TypeUrl.Cluster, c.resource)), c.name);
    }
  });

  it('of an upstream cluster are one object each for proxies of different identities, as the cluster is', () => {
    const bookthief = parseCommonName('a0000000-0000-4000-8000-000000000002.sidecar.bookthief.bookthief.cluster.local');
    const permissive = new GenerationContext(buildMeshSnapshot(memoryStore(bookstoreMesh({ permissive: true })), { meshName: 'osm', generation: 1 }).snapshot);
    const of = (proxy: Proxy) => generateProxyResources(permissive, proxyProfile(proxy), { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' }).get(TypeUrl.Cluster)!.find((c) => c.name === 'bookstore/bookstore-v1|14001')!;
    const [a, b] = [of(bookbuyer), of(bookthief)];
    assert.equal(a.resource, b.resource, 'one cluster object');
    assert.equal(a.parts?.length, 2, 'all but the transport socket, and the transport socket');
    assert.equal(a.parts?.[0], b.parts?.[0]);
    assert.equal(a.parts?.[1], b.parts?.[1]);
    const certOf = (c: NamedResource) => (c.resource as Obj).transport_socket.typed_config.common_tls_context.tls_certificate_sds_secret_configs[0].name;
    assert.deepEqual([certOf(a), certOf(b)], ['service-cert', 'service-cert']);
  });

  it('report a broken rule in any part, and a part that cannot be encoded', () => {
    const cache = new ResourceCheckCache();
    const base = { name: 'c', type: 'EDS', eds_cluster_config: { eds_config: ADS }, connect_timeout: { seconds: -1 } };
    const own = { transport_socket: { name: '' } };
    const checked = cache.check(TypeUrl.Cluster, { ...base, ...own }, [base, own]);
    assert.deepEqual(checked.violations.map((v) => `${v.path} ${v.rule}`).sort(), ['connect_timeout duration.gt', 'transport_socket.name string.min_len']);
    const broken = cache.check(TypeUrl.Cluster, { ...base }, [base, { transport_socket: { nonsense: 1 } }]);
    assert.equal(broken.encoded, undefined);
    assert.match(broken.error!, /unknown field "nonsense"/);
  });

  it('check a part like the last one after the same base by encoding it, and still catch what differs', () => {
    const cache = new ResourceCheckCache();
    const base = { name: 'c', type: 'EDS', eds_cluster_config: { eds_config: ADS }, connect_timeout: { seconds: 1 } };
    const own = (cert: string, sni = 'svc.ns.svc.cluster.local') => ({
      transport_socket: {
        name: 'envoy.transport_sockets.tls',
        typed_config: { '@type': UPSTREAM_TLS, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: cert, sds_config: ADS }] }, sni },
      },
    });
    const check = (part: Obj) => cache.check(TypeUrl.Cluster, { ...base, ...part }, [base, part]);
    assert.deepEqual(check(own('cert-a')).violations, []);
    const b = own('cert-b');
    const checked = check(b);
    assert.deepEqual(checked.violations, []);
    assert.deepEqual(decodeMessage(TypeUrl.Cluster, checked.encoded!), decodeMessage(TypeUrl.Cluster, encodeMessage(TypeUrl.Cluster, { ...base, ...b })));
    // What differs breaks a rule: an empty secret name (SdsSecretConfig.name min_len 1), an SNI over 255 bytes.
    assert.deepEqual(check(own('')).violations.map((v) => `${v.path} ${v.rule}`), [
      'transport_socket.typed_config<UpstreamTlsContext>.common_tls_context.tls_certificate_sds_secret_configs[0].name string.min_len',
    ]);
    assert.deepEqual(check(own('cert-c', 'x'.repeat(300))).violations.map((v) => `${v.path} ${v.rule}`), [
      'transport_socket.typed_config<UpstreamTlsContext>.sni string.max_bytes',
    ]);
    // An empty message is a present field: it meets a required oneof that its absence breaks.
    const options = (config: Obj) => ({
      typed_extension_protocol_options: {
        'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': { '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions', explicit_http_config: config },
      },
    });
    const fresh = new ResourceCheckCache();
    const checkIn = (part: Obj) => fresh.check(TypeUrl.Cluster, { ...base, ...part }, [base, part]);
    assert.deepEqual(checkIn(options({ http2_protocol_options: {} })).violations, []);
    assert.deepEqual(checkIn(options({})).violations.map((v) => v.rule), ['oneof.required']);
    // After a part with a violation, a like part is checked on its own (it does not inherit it).
    assert.deepEqual(check(own('cert-d', 'y'.repeat(300))).violations.length, 1);
    assert.deepEqual(check(own('cert-e')).violations, []);
  });
});

describe('ResourceCheckCache: a resource alike a valid sibling', () => {
  const certs = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };
  const generated = (permissive: boolean): [TypeUrl, NamedResource][] => {
    const objects = bookstoreMesh({ permissive }).map((o) => (o.kind === 'MeshConfig' ? k8s.meshConfig(permissive, true) : o));
    const { snapshot } = buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 });
    const context = new GenerationContext(snapshot);
    const out: [TypeUrl, NamedResource][] = [];
    for (const identity of snapshot.servicesByIdentity.keys()) {
      const [ns, sa] = identity.split('/') as [string, string];
      const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
      for (const [typeUrl, list] of generateProxyResources(context, proxyProfile(proxy), certs)) for (const r of list) out.push([typeUrl, r]);
    }
    return out;
  };

  it('takes the shortcut between proxies: another identity’s listener, route configuration, secret', () => {
    const all = generated(false);
    const shared = new ResourceCheckCache();
    for (const [typeUrl, r] of all) {
      const viaSiblings = shared.check(typeUrl, r.resource, r.parts, r.name);
      const alone = new ResourceCheckCache().check(typeUrl, r.resource, r.parts, r.name);
      assert.deepEqual(viaSiblings.violations, alone.violations, r.name);
      assert.deepEqual(viaSiblings.encoded, alone.encoded, r.name);
    }
    // Siblings answered for the others: only the first of each kind was checked by content.
    assert.ok(shared.fullChecks < all.length * 0.6, `${shared.fullChecks} checked in full of ${all.length}`);
  });

  it('is valid only when checking it in full finds it valid (random mutations of generated resources)', () => {
    let seed = 42;
    const random = (n: number): number => {
      // mulberry32
      seed = (seed + 0x6d2b79f5) | 0;
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return Math.floor((((t ^ (t >>> 14)) >>> 0) / 4294967296) * n);
    };
    const STRINGS = ['', 'x'.repeat(300), 'a\nb', '*.bad domain', '0.0.0.0', '::1', 'UNKNOWN_ENUM', 'ok-name'];
    const NUMBERS = [0, -1, 1, 2 ** 32, 1.5, 65536, 70000];
    const leaves = (v: unknown, path: (string | number)[], out: (string | number)[][]): void => {
      if (Array.isArray(v)) v.forEach((x, i) => leaves(x, [...path, i], out));
      else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) leaves(x, [...path, k], out);
      if (path.length > 0 && (path.at(-1) !== '@type' || random(4) === 0)) out.push(path);
    };
    const mutate = (resource: unknown): unknown => {
      const copy = structuredClone(resource) as Obj;
      const paths: (string | number)[][] = [];
      leaves(copy, [], paths);
      const path = paths[random(paths.length)]!;
      let parent: Obj = copy;
      for (const p of path.slice(0, -1)) parent = parent[p];
      const last = path.at(-1)!;
      const old = parent[last];
      const choice = random(4);
      if (choice === 0) {
        if (Array.isArray(parent)) parent.splice(last as number, 1);
        else delete parent[last];
      } else if (choice === 1 && Array.isArray(parent)) parent.push(structuredClone(old));
      else if (typeof old === 'string') parent[last] = STRINGS[random(STRINGS.length)];
      else if (typeof old === 'number') parent[last] = NUMBERS[random(NUMBERS.length)];
      else if (typeof old === 'boolean') parent[last] = !old;
      else if (old && typeof old === 'object') parent[last] = Array.isArray(old) ? [] : {};
      return copy;
    };
    let shortcuts = 0;
    let partShortcuts = 0;
    let invalid = 0;
    for (const permissive of [false, true]) {
      const all = generated(permissive);
      for (let round = 0; round < 12; round++) {
        for (const [typeUrl, r] of all) {
          const cache = new ResourceCheckCache();
          const original = cache.check(typeUrl, r.resource, undefined, r.name);
          assert.deepEqual(original.violations, [], r.name);
          const mutated = mutate(r.resource) as object;
          const viaSibling = cache.check(typeUrl, mutated, undefined, r.name);
          const alone = new ResourceCheckCache().check(typeUrl, mutated);
          const what = `${r.name}: ${JSON.stringify(mutated).slice(0, 300)}`;
          assert.deepEqual(viaSibling.violations, alone.violations, what);
          assert.equal(viaSibling.error, alone.error, what);
          assert.deepEqual(viaSibling.encoded, alone.encoded, what);
          if (cache.fullChecks === 1) shortcuts++;
          if (alone.violations.length > 0 || alone.error) invalid++;
          const split = tlsParts(r);
          if (split && split.length === 2) {
            // A part after another base object (a new push's): compared with the last part at
            // its position after any base.
            const parts = new ResourceCheckCache();
            assert.deepEqual(parts.check(typeUrl, r.resource, split, r.name).violations, [], r.name);
            const base = structuredClone(split[0]) as Obj;
            const part = mutate(split[1]) as Obj;
            const viaPosition = parts.check(typeUrl, { ...base, ...part }, [base, part], r.name);
            const partAlone = new ResourceCheckCache().check(typeUrl, { ...base, ...part }, [base, part], r.name);
            const whatPart = `${r.name} part: ${JSON.stringify(part).slice(0, 300)}`;
            assert.deepEqual(viaPosition.violations, partAlone.violations, whatPart);
            assert.equal(viaPosition.error, partAlone.error, whatPart);
            assert.deepEqual(viaPosition.encoded, partAlone.encoded, whatPart);
            if (parts.fullChecks === 2) partShortcuts++;
          }
        }
      }
    }
    // Both paths were exercised: mutants taken by the shortcut, and mutants that break rules.
    assert.ok(shortcuts > 200, `${shortcuts} shortcuts`);
    assert.ok(invalid > 200, `${invalid} invalid mutants`);
    assert.ok(partShortcuts > 20, `${partShortcuts} parts by position`);
  });
});

describe('ResourceCheckCache: values JSON cannot tell apart', () => {
  const cluster = (extra: Obj = {}): Obj => ({ name: 'c', type: 'EDS', connect_timeout: { seconds: 1 }, eds_cluster_config: { eds_config: ADS }, ...extra });
  /** The result of checking `b` after a valid `a` of the same name, and of checking `b` alone. */
  const both = (a: Obj, b: Obj) => {
    const cache = new ResourceCheckCache();
    assert.deepEqual(cache.check(TypeUrl.Cluster, a, undefined, 'c').violations, []);
    return { after: cache.check(TypeUrl.Cluster, b, undefined, 'c'), alone: new ResourceCheckCache().check(TypeUrl.Cluster, b, undefined, 'c') };
  };
  const outcome = (r: { error: string | undefined; violations: readonly { rule: string }[] }) => r.error ?? r.violations.map((v) => v.rule).join(',');

  it('a key whose value is undefined in the sibling does not hide a field of the candidate', () => {
    const { after, alone } = both(cluster({ alt_stat_name: undefined }), cluster({ lb_policy: 42 }));
    assert.equal(outcome(alone), 'enum.defined_only');
    assert.equal(outcome(after), outcome(alone));
    const unknown = both(cluster({ alt_stat_name: undefined }), cluster({ bogus: 1 }));
    assert.match(outcome(unknown.alone), /unknown field "bogus"/);
    assert.equal(outcome(unknown.after), outcome(unknown.alone));
  });

  it('an unknown key with an undefined value, NaN and ±Infinity are not equal to absent or null', () => {
    const unknown = both(cluster(), cluster({ connect_timeout: { seconds: 1, bogus: undefined } }));
    assert.match(outcome(unknown.alone), /unknown field "bogus" for google.protobuf.Duration/);
    assert.equal(outcome(unknown.after), outcome(unknown.alone));
    const nan = both(cluster({ connect_timeout: { seconds: 1, nanos: null } }), cluster({ connect_timeout: { seconds: 1, nanos: Number.NaN } }));
    assert.match(outcome(nan.alone), /NaN does not fit int32/);
    assert.equal(outcome(nan.after), outcome(nan.alone));
  });

  it('Object.prototype members are not fields', () => {
    assert.throws(() => encodeChecked(TypeUrl.Cluster, { name: 'a', constructor: 1 }), /unknown field "constructor"/);
    const { after, alone } = both(cluster(), cluster({ toString: 'x' }));
    assert.match(outcome(alone), /unknown field "toString"/);
    assert.equal(outcome(after), outcome(alone));
  });
});

describe('ResourceCheckCache: a new version of a resource that keeps parts of the one before', () => {
  const certs = { certChainPem: 'CERT', privateKeyPem: 'KEY', caPem: 'ROOT' };
  const withCiphers = (objects: ReturnType<typeof bookstoreMesh>, cipherSuites: string[]) =>
    objects.map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar: { cipherSuites } } } : o));
  /** Every identity's resources of one MeshSnapshot, generated in `context`. */
  const resources = (context: GenerationContext): [TypeUrl, NamedResource][] => {
    const out: [TypeUrl, NamedResource][] = [];
    for (const identity of context.snapshot.servicesByIdentity.keys()) {
      const [ns, sa] = identity.split('/') as [string, string];
      const proxy = parseCommonName(`6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.${sa}.${ns}.cluster.local`);
      for (const [typeUrl, list] of generateProxyResources(context, proxyProfile(proxy), certs)) for (const r of list) out.push([typeUrl, r]);
    }
    return out;
  };

  it('encodes, after a MeshConfig TLS change, one typed config per inbound listener: its TLS context (SMI)', () => {
    const store = new ObjectStore();
    const builder = new MeshSnapshotBuilder();
    store.replaceAll('test', bookstoreMesh({ permissive: false }));
    const one = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 1 }).snapshot);
    const cache = new ResourceCheckCache();
    const inbound = (context: GenerationContext) => resources(context).filter(([type, r]) => type === TypeUrl.Listener && r.name === 'inbound-listener');
    for (const [type, r] of inbound(one)) assert.deepEqual(cache.check(type, r.resource, r.parts, r.name).violations, [], r.name);
    store.replaceAll('test', withCiphers(bookstoreMesh({ permissive: false }), ['ECDHE-ECDSA-AES256-GCM-SHA384']));
    const two = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 2, previous: one.snapshot }).snapshot, one);
    const listeners = inbound(two);
    assert.ok(listeners.length >= 3, `${listeners.length} inbound listeners`);
    const before = cache.typedConfigsEncoded;
    for (const [type, r] of listeners) {
      const checked = cache.check(type, r.resource, r.parts, r.name);
      assert.deepEqual(checked.violations, [], r.name);
      assert.deepEqual(checked.encoded, encodeMessage(type, r.resource), `${r.name}: the bytes of encoding it whole`);
    }
    // Their RBAC, HCM and listener filters' typed configs were encoded in the generation before.
    assert.equal(cache.typedConfigsEncoded - before, listeners.length);
  });

  it('finds what a fresh cache finds, when a mutant keeps every other part of a resource checked before (random mutations)', () => {
    const next = mulberry32(7);
    const random = (n: number): number => Math.floor(next() * n);
    const STRINGS = ['', 'x'.repeat(300), 'a\nb', '*.bad domain', '0.0.0.0', 'UNKNOWN_ENUM', 'ok-name', '(?=x)'];
    const NUMBERS = [0, -1, 1, 2 ** 32, 1.5, 65536];
    const paths = (v: unknown, path: (string | number)[], out: (string | number)[][]): void => {
      if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...path, i], out));
      else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) paths(x, [...path, k], out);
      if (path.length > 0) out.push(path);
    };
    /** `value` with the leaf at `path` changed: new objects along the path, every other object the very one of `value`. */
    const mutateAt = (value: unknown, path: readonly (string | number)[]): unknown => {
      const copy = (Array.isArray(value) ? [...value] : { ...(value as Obj) }) as Obj;
      const [step, ...rest] = path as [string | number, ...(string | number)[]];
      if (rest.length > 0) {
        copy[step] = mutateAt(copy[step], rest);
        return copy;
      }
      const old = copy[step];
      const choice = random(3);
      if (choice === 0) {
        if (Array.isArray(copy)) copy.splice(step as number, 1);
        else delete copy[step];
      } else if (typeof old === 'string') copy[step] = STRINGS[random(STRINGS.length)];
      else if (typeof old === 'number') copy[step] = NUMBERS[random(NUMBERS.length)];
      else if (typeof old === 'boolean') copy[step] = !old;
      else if (old && typeof old === 'object') copy[step] = Array.isArray(old) ? [] : {};
      else copy[step] = 'ok-name';
      return copy;
    };
    let carried = 0;
    let invalid = 0;
    for (const permissive of [false, true]) {
      const all = resources(new GenerationContext(buildMeshSnapshot(memoryStore(bookstoreMesh({ permissive })), { meshName: 'osm', generation: 1 }).snapshot));
      // One cache for every round: the encodings, known-valid messages and facts of the parts
      // a mutant keeps are those found before.
      const cache = new ResourceCheckCache();
      for (let round = 0; round < 8; round++) {
        // By type and name: the resource checked last (another identity's, found alike the one before it).
        const last = new Map<string, object>();
        for (const [typeUrl, r] of all) {
          assert.deepEqual(cache.check(typeUrl, r.resource, undefined, r.name).violations, [], r.name);
          // A mutant of the one checked before this one (its parts known valid when it was found
          // alike), compared with this one: what the mutant keeps is not this one's.
          const key = `${typeUrl} ${r.name}`;
          const base = last.get(key) ?? r.resource;
          last.set(key, r.resource);
          const found: (string | number)[][] = [];
          paths(base, [], found);
          const mutant = mutateAt(base, found[random(found.length)]!) as Obj;
          const encodedBefore = cache.typedConfigsEncoded;
          const after = cache.check(typeUrl, mutant, undefined, r.name);
          const alone = new ResourceCheckCache().check(typeUrl, mutant, undefined, r.name);
          const what = `${r.name}: ${JSON.stringify(mutant).slice(0, 300)}`;
          assert.deepEqual(after.violations, alone.violations, what);
          assert.equal(after.error, alone.error, what);
          assert.deepEqual(after.encoded, alone.encoded, what);
          assert.deepEqual(cache.facts.of(typeUrl, mutant), new ResourceCheckCache().facts.of(typeUrl, mutant), `facts of ${what}`);
          if (alone.violations.length > 0 || alone.error) invalid++;
          else if (JSON.stringify(mutant).includes('"@type"') && cache.typedConfigsEncoded - encodedBefore < (JSON.stringify(mutant).match(/"@type"/g) ?? []).length) carried++;
        }
      }
    }
    // Both ways were taken: valid mutants whose other typed configs carried over, and invalid ones.
    assert.ok(carried > 100, `${carried} valid mutants with typed configs carried over`);
    assert.ok(invalid > 100, `${invalid} invalid mutants`);
  });
});
