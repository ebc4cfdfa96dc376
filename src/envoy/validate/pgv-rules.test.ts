import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import protobuf from 'protobufjs';
import { decodeMessage, encodeMessage } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import { compileRe2, type Re2 } from '../../util/re2.js';
import { canonicalJson, ipVersion, validateMessage, validateWithType } from './pgv-rules.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const TCP_PROXY = 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy';
const UPSTREAM_TLS = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';

/** Valid base resources in the object form the codec encodes. */
const BASE: Record<string, Obj> = {
  [TypeUrl.Cluster]: {
    name: 'ns/svc|80',
    type: 'EDS',
    connect_timeout: { seconds: 1 },
    eds_cluster_config: { eds_config: { ads: {}, resource_api_version: 'V3' } },
    transport_socket: { name: 'envoy.transport_sockets.tls', typed_config: { '@type': UPSTREAM_TLS, sni: 'svc.ns.svc.cluster.local' } },
  },
  [TypeUrl.Listener]: {
    name: 'outbound-listener',
    address: { socket_address: { address: '0.0.0.0', port_value: 15001 } },
    filter_chains: [{ filters: [{ name: 'envoy.filters.network.tcp_proxy', typed_config: { '@type': TCP_PROXY, stat_prefix: 'tcp', cluster: 'ns/svc|80' } }] }],
  },
  [TypeUrl.RouteConfiguration]: {
    name: 'rds-outbound.80',
    virtual_hosts: [{ name: 'vh', domains: ['svc.ns'], routes: [{ match: { prefix: '/' }, route: { cluster: 'ns/svc|80' } }] }],
  },
  [TypeUrl.ClusterLoadAssignment]: {
    cluster_name: 'ns/svc|80',
    endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '10.0.0.1', port_value: 80 } } } }] }],
  },
  [TypeUrl.Secret]: {
    name: 'root-cert-for-mtls-outbound:ns/svc',
    validation_context: { match_typed_subject_alt_names: [{ san_type: 'URI', matcher: { exact: 'spiffe://cluster.local/ns/ns/sa/svc' } }] },
  },
};

/** The decoded (wire) form of a base resource, as the validator sees it. */
function decodedBase(typeUrl: string): Obj {
  return decodeMessage(typeUrl, encodeMessage(typeUrl, BASE[typeUrl]!));
}

interface Case {
  name: string;
  typeUrl: string;
  /** Changes the decoded form (so wire states the encoder refuses, e.g. an undefined enum number, can be made). */
  mutate: (d: Obj) => void;
  rule: string;
  path: string;
}

const tcp = (d: Obj): Obj => d.filter_chains[0].filters[0].typed_config;
const TCP_AT = 'filter_chains[0].filters[0].typed_config<TcpProxy>';
const route = (d: Obj): Obj => d.virtual_hosts[0].routes[0];

const CASES: Case[] = [
  { name: 'cluster without a name', typeUrl: TypeUrl.Cluster, mutate: (d) => delete d.name, rule: 'string.min_len', path: 'name' },
  { name: 'zero connect_timeout', typeUrl: TypeUrl.Cluster, mutate: (d) => (d.connect_timeout = {}), rule: 'duration.gt', path: 'connect_timeout' },
  { name: 'dns_refresh_rate under 1ms', typeUrl: TypeUrl.Cluster, mutate: (d) => (d.dns_refresh_rate = { nanos: 1000 }), rule: 'duration.gt', path: 'dns_refresh_rate' },
  { name: 'undefined enum number', typeUrl: TypeUrl.Cluster, mutate: (d) => (d.type = 99), rule: 'enum.defined_only', path: 'type' },
  { name: 'SNI over 255 bytes, inside an Any', typeUrl: TypeUrl.Cluster, mutate: (d) => (d.transport_socket.typed_config.sni = 'a'.repeat(256)), rule: 'string.max_bytes', path: 'transport_socket.typed_config<UpstreamTlsContext>.sni' },
  { name: 'TcpProxy without stat_prefix', typeUrl: TypeUrl.Listener, mutate: (d) => delete tcp(d).stat_prefix, rule: 'string.min_len', path: `${TCP_AT}.stat_prefix` },
  { name: 'TcpProxy with no cluster specifier', typeUrl: TypeUrl.Listener, mutate: (d) => delete tcp(d).cluster, rule: 'oneof.required', path: `${TCP_AT}.cluster_specifier` },
  { name: 'TcpProxy with both cluster specifiers', typeUrl: TypeUrl.Listener, mutate: (d) => (tcp(d).weighted_clusters = { clusters: [{ name: 'a', weight: 1 }] }), rule: 'oneof.required', path: `${TCP_AT}.cluster_specifier` },
  {
    name: 'TcpProxy weighted_clusters without clusters',
    typeUrl: TypeUrl.Listener,
    mutate: (d) => {
      delete tcp(d).cluster;
      tcp(d).weighted_clusters = { clusters: [] };
    },
    rule: 'repeated.min_items',
    path: `${TCP_AT}.weighted_clusters.clusters`,
  },
  {
    name: 'TcpProxy cluster weight 0',
    typeUrl: TypeUrl.Listener,
    mutate: (d) => {
      delete tcp(d).cluster;
      tcp(d).weighted_clusters = { clusters: [{ name: 'a' }] };
    },
    rule: 'uint32.gte',
    path: `${TCP_AT}.weighted_clusters.clusters[0].weight`,
  },
  { name: 'address with nothing set', typeUrl: TypeUrl.Listener, mutate: (d) => (d.address = {}), rule: 'oneof.required', path: 'address.address' },
  { name: 'port over 65535', typeUrl: TypeUrl.Listener, mutate: (d) => (d.address.socket_address.port_value = 70000), rule: 'uint32.lte', path: 'address.socket_address.port_value' },
  { name: 'wrapper value 0 where > 0 is required', typeUrl: TypeUrl.Listener, mutate: (d) => (d.max_connections_to_accept_per_socket_event = {}), rule: 'uint32.gt', path: 'max_connections_to_accept_per_socket_event.value' },
  { name: 'virtual host without domains', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (d.virtual_hosts[0].domains = []), rule: 'repeated.min_items', path: 'virtual_hosts[0].domains' },
  { name: 'virtual host without a name', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => delete d.virtual_hosts[0].name, rule: 'string.min_len', path: 'virtual_hosts[0].name' },
  { name: 'domain with a newline (items rule)', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (d.virtual_hosts[0].domains = ['a\nb']), rule: 'string.well_known_regex', path: 'virtual_hosts[0].domains[0]' },
  { name: 'route without match', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => delete route(d).match, rule: 'message.required', path: 'virtual_hosts[0].routes[0].match' },
  { name: 'route match without path specifier', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (route(d).match = {}), rule: 'oneof.required', path: 'virtual_hosts[0].routes[0].match.path_specifier' },
  { name: 'route to an empty cluster name', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (route(d).route.cluster = ''), rule: 'string.min_len', path: 'virtual_hosts[0].routes[0].route.cluster' },
  { name: 'empty safe_regex', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (route(d).match = { safe_regex: { google_re2: {} } }), rule: 'string.min_len', path: 'virtual_hosts[0].routes[0].match.safe_regex.regex' },
  {
    name: 'header name with a newline (HTTP_HEADER_NAME, not strict)',
    typeUrl: TypeUrl.RouteConfiguration,
    mutate: (d) => (d.request_headers_to_add = [{ header: { key: 'x\ny', value: 'v' } }]),
    rule: 'string.well_known_regex',
    path: 'request_headers_to_add[0].header.key',
  },
  {
    name: 'header value with a NUL (HTTP_HEADER_VALUE, not strict)',
    typeUrl: TypeUrl.RouteConfiguration,
    mutate: (d) => (d.request_headers_to_add = [{ header: { key: 'x', value: 'a\u0000b' } }]),
    rule: 'string.well_known_regex',
    path: 'request_headers_to_add[0].header.value',
  },
  { name: 'header to remove with a CR (items rule)', typeUrl: TypeUrl.RouteConfiguration, mutate: (d) => (d.response_headers_to_remove = ['ok', 'a\rb']), rule: 'string.well_known_regex', path: 'response_headers_to_remove[1]' },
  { name: 'assignment without cluster_name', typeUrl: TypeUrl.ClusterLoadAssignment, mutate: (d) => delete d.cluster_name, rule: 'string.min_len', path: 'cluster_name' },
  {
    name: 'endpoint weight 0',
    typeUrl: TypeUrl.ClusterLoadAssignment,
    mutate: (d) => (d.endpoints[0].lb_endpoints[0].load_balancing_weight = { value: 0 }),
    rule: 'uint32.gte',
    path: 'endpoints[0].lb_endpoints[0].load_balancing_weight.value',
  },
  { name: 'SAN type unspecified (enum not_in, absent = 0)', typeUrl: TypeUrl.Secret, mutate: (d) => delete d.validation_context.match_typed_subject_alt_names[0].san_type, rule: 'enum.not_in', path: 'validation_context.match_typed_subject_alt_names[0].san_type' },
  { name: 'string matcher with nothing set', typeUrl: TypeUrl.Secret, mutate: (d) => (d.validation_context.match_typed_subject_alt_names[0].matcher = {}), rule: 'oneof.required', path: 'validation_context.match_typed_subject_alt_names[0].matcher.match_pattern' },
];

describe('validate.rules read from the Envoy protos', () => {
  for (const typeUrl of Object.keys(BASE)) {
    it(`accepts the valid base ${typeUrl.slice(typeUrl.lastIndexOf('.') + 1)}`, () => {
      assert.deepEqual(validateMessage(typeUrl, decodedBase(typeUrl)), []);
    });
  }
  for (const c of CASES) {
    it(`reports ${c.rule} at ${c.path}: ${c.name}`, () => {
      const d = decodedBase(c.typeUrl);
      c.mutate(d);
      const found = validateMessage(c.typeUrl, d);
      assert.ok(
        found.some((v) => v.rule === c.rule && v.path === c.path),
        `expected ${c.rule} at ${c.path}, got ${JSON.stringify(found)}`,
      );
      assert.ok(found.every((v) => v.message.length > 0));
    });
  }
});

/** A synthetic proto carrying the rules the loaded Envoy protos do not happen to use. */
const SYNTHETIC = `
syntax = "proto3";
package t;
import "google/protobuf/any.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
enum Color { COLOR_UNSET = 0; RED = 1; GREEN = 2; }
message Inner { string v = 1 [(validate.rules).string.min_len = 1]; }
message Off { option (validate.disabled) = true; string v = 1 [(validate.rules).string.min_len = 1]; }
message M {
  string s_len = 1 [(validate.rules).string = {len: 3, ignore_empty: true}];
  string s_prefix = 2 [(validate.rules).string = {prefix: "ab", ignore_empty: true}];
  string s_pattern = 3 [(validate.rules).string = {pattern: "^[a-z]+$", ignore_empty: true}];
  string s_in = 4 [(validate.rules).string = {in: ["x", "y"], ignore_empty: true}];
  string s_not_in = 5 [(validate.rules).string = {not_in: ["bad"]}];
  string s_max_len = 6 [(validate.rules).string.max_len = 2];
  string s_min_bytes = 7 [(validate.rules).string = {min_bytes: 2, ignore_empty: true}];
  string s_header = 8 [(validate.rules).string = {well_known_regex: HTTP_HEADER_NAME}];
  string s_value = 9 [(validate.rules).string = {well_known_regex: HTTP_HEADER_VALUE, strict: true}];
  int32 i32 = 10 [(validate.rules).int32 = {in: [0, 1, 2]}];
  int32 i32_not = 11 [(validate.rules).int32 = {not_in: [7]}];
  int64 i64 = 12 [(validate.rules).int64 = {gte: 0, lt: 10}];
  uint64 u64 = 13 [(validate.rules).uint64 = {const: 0}];
  double d = 14 [(validate.rules).double = {gte: 0, lte: 1}];
  float f = 15 [(validate.rules).float = {lt: 0, gt: 1}];
  uint32 u32 = 16 [(validate.rules).uint32 = {gt: 10, lt: 5}];
  Color color = 17 [(validate.rules).enum = {defined_only: true, in: [0, 1]}];
  repeated string tags = 18 [(validate.rules).repeated = {unique: true, max_items: 3}];
  map<string, int64> weights = 19 [(validate.rules).map = {min_pairs: 1, keys: {string: {min_len: 2}}, values: {int64: {gt: 0}}}];
  google.protobuf.Any any_req = 20 [(validate.rules).any = {required: true, in: ["type.googleapis.com/envoy.config.core.v3.Locality"]}];
  google.protobuf.Duration dur = 21 [(validate.rules).duration = {required: true, gte: {seconds: 1}, lte: {seconds: 60}}];
  google.protobuf.Duration dur_lt = 22 [(validate.rules).duration = {lt: {seconds: 5}, const: {seconds: 1}}];
  google.protobuf.UInt32Value w = 23 [(validate.rules).uint32.lte = 5];
  Inner inner = 24 [(validate.rules).message.required = true];
  Inner skipped = 25 [(validate.rules).message.skip = true];
  Off off = 26;
  optional string opt = 27 [(validate.rules).string.min_len = 1];
  bool flag = 28 [(validate.rules).bool.const = true];
  bytes raw = 29 [(validate.rules).bytes = {max_len: 2}];
  repeated Inner inners = 30 [(validate.rules).repeated.min_items = 1];
  oneof choice {
    option (validate.required) = true;
    string a = 31;
    string b = 32 [(validate.rules).string.min_len = 5];
  }
}
`;

function syntheticType(): protobuf.Type {
  const root = new protobuf.Root();
  const common = (protobuf as unknown as { common: Record<string, { nested: protobuf.INamespace['nested'] }> }).common;
  for (const f of ['google/protobuf/any.proto', 'google/protobuf/duration.proto', 'google/protobuf/wrappers.proto']) root.addJSON(common[f]!.nested!);
  protobuf.parse(SYNTHETIC, root, { keepCase: true });
  root.resolveAll();
  return root.lookupType('t.M');
}

const VALID_SYNTHETIC: Obj = {
  s_max_len: 'ab',
  s_header: 'x-ok',
  s_value: 'fine value',
  i64: '3',
  d: 0.5,
  f: 2,
  u32: 11,
  color: 'RED',
  tags: ['a', 'b'],
  weights: { ab: '1' },
  any_req: { '@type': 'type.googleapis.com/envoy.config.core.v3.Locality', region: 'r' },
  dur: { seconds: '30' },
  inner: { v: 'x' },
  skipped: {},
  off: {},
  flag: true,
  raw: Buffer.from('ab').toString('base64'),
  inners: [{ v: 'x' }],
  a: '',
};

const SYNTHETIC_CASES: { mutate: (d: Obj) => void; rule: string; path: string }[] = [
  { mutate: (d) => (d.s_len = 'abcd'), rule: 'string.len', path: 's_len' },
  { mutate: (d) => (d.s_prefix = 'xyz'), rule: 'string.prefix', path: 's_prefix' },
  { mutate: (d) => (d.s_pattern = 'ABC'), rule: 'string.pattern', path: 's_pattern' },
  { mutate: (d) => (d.s_in = 'z'), rule: 'string.in', path: 's_in' },
  { mutate: (d) => (d.s_not_in = 'bad'), rule: 'string.not_in', path: 's_not_in' },
  { mutate: (d) => (d.s_max_len = 'héé'), rule: 'string.max_len', path: 's_max_len' },
  { mutate: (d) => (d.s_min_bytes = 'a'), rule: 'string.min_bytes', path: 's_min_bytes' },
  { mutate: (d) => (d.s_header = 'bad header'), rule: 'string.well_known_regex', path: 's_header' },
  { mutate: (d) => (d.s_value = 'tab\u0001'), rule: 'string.well_known_regex', path: 's_value' },
  { mutate: (d) => (d.i32 = 5), rule: 'int32.in', path: 'i32' },
  { mutate: (d) => (d.i32_not = 7), rule: 'int32.not_in', path: 'i32_not' },
  { mutate: (d) => (d.i64 = '-1'), rule: 'int64.gte', path: 'i64' },
  { mutate: (d) => (d.i64 = '10'), rule: 'int64.lt', path: 'i64' },
  { mutate: (d) => (d.u64 = '18446744073709551615'), rule: 'uint64.const', path: 'u64' },
  { mutate: (d) => (d.d = 1.5), rule: 'double.lte', path: 'd' },
  { mutate: (d) => (d.f = 0.5), rule: 'float.gt', path: 'f' }, // exclusive range: outside [0, 1]
  { mutate: (d) => (d.u32 = 7), rule: 'uint32.gt', path: 'u32' }, // exclusive range: > 10 or < 5
  { mutate: (d) => (d.color = 7), rule: 'enum.defined_only', path: 'color' },
  { mutate: (d) => (d.color = 'GREEN'), rule: 'enum.in', path: 'color' },
  { mutate: (d) => (d.tags = ['a', 'a']), rule: 'repeated.unique', path: 'tags[1]' },
  { mutate: (d) => (d.tags = ['a', 'b', 'c', 'd']), rule: 'repeated.max_items', path: 'tags' },
  { mutate: (d) => (d.weights = {}), rule: 'map.min_pairs', path: 'weights' },
  { mutate: (d) => (d.weights = { x: '1' }), rule: 'string.min_len', path: 'weights[x]' },
  { mutate: (d) => (d.weights = { ab: '0' }), rule: 'int64.gt', path: 'weights[ab]' },
  { mutate: (d) => delete d.any_req, rule: 'any.required', path: 'any_req' },
  { mutate: (d) => (d.any_req = { '@type': 'type.googleapis.com/envoy.config.core.v3.Node' }), rule: 'any.in', path: 'any_req' },
  { mutate: (d) => delete d.dur, rule: 'duration.required', path: 'dur' },
  { mutate: (d) => (d.dur = { nanos: 5 }), rule: 'duration.gte', path: 'dur' },
  { mutate: (d) => (d.dur = { seconds: '61' }), rule: 'duration.lte', path: 'dur' },
  { mutate: (d) => (d.dur_lt = { seconds: '2' }), rule: 'duration.const', path: 'dur_lt' },
  { mutate: (d) => (d.dur_lt = { seconds: '9' }), rule: 'duration.lt', path: 'dur_lt' },
  { mutate: (d) => (d.w = { value: 6 }), rule: 'uint32.lte', path: 'w.value' },
  { mutate: (d) => delete d.inner, rule: 'message.required', path: 'inner' },
  { mutate: (d) => (d.inner = {}), rule: 'string.min_len', path: 'inner.v' },
  { mutate: (d) => (d.opt = ''), rule: 'string.min_len', path: 'opt' },
  { mutate: (d) => (d.flag = false), rule: 'bool.const', path: 'flag' },
  { mutate: (d) => (d.raw = Buffer.from('abc').toString('base64')), rule: 'bytes.max_len', path: 'raw' },
  { mutate: (d) => (d.inners = [{ v: 'x' }, {}]), rule: 'string.min_len', path: 'inners[1].v' },
  { mutate: (d) => delete d.a, rule: 'oneof.required', path: 'choice' },
  { mutate: (d) => (d.b = 'long enough'), rule: 'oneof.required', path: 'choice' },
  {
    mutate: (d) => {
      delete d.a;
      d.b = 'shr';
    },
    rule: 'string.min_len',
    path: 'b',
  },
];

describe('validate.rules on a synthetic proto (every rule kind)', () => {
  const type = syntheticType();
  it('accepts the valid message; skips message.skip, (validate.disabled), unset proto3 optional and unset oneof members', () => {
    assert.deepEqual(validateWithType(type, structuredClone(VALID_SYNTHETIC)), []);
    assert.deepEqual(validateWithType(type, { ...structuredClone(VALID_SYNTHETIC), skipped: { v: '' }, off: { v: '' } }), []);
  });
  for (const c of SYNTHETIC_CASES) {
    it(`reports ${c.rule} at ${c.path}`, () => {
      const d = structuredClone(VALID_SYNTHETIC);
      c.mutate(d);
      const found = validateWithType(type, d);
      assert.ok(found.some((v) => v.rule === c.rule && v.path === c.path), `expected ${c.rule} at ${c.path}, got ${JSON.stringify(found)}`);
    });
  }
});

describe('helpers', () => {
  it('tells IP literals from hostnames', () => {
    for (const ip of ['10.0.0.1', '0.0.0.0', '255.255.255.255']) assert.equal(ipVersion(ip), 4, ip);
    for (const ip of ['::', '::1', 'fe80::1', '2001:db8::8a2e:370:7334', '::ffff:10.0.0.1', '1:2:3:4:5:6:7:8']) assert.equal(ipVersion(ip), 6, ip);
    for (const s of ['bookstore.bookstore', '256.0.0.1', '10.0.0', '1:2:3:4:5:6:7:8:9', '1::2::3', 'fe80::1%eth0', '', '01.2.3.4']) assert.equal(ipVersion(s), 0, s);
  });
  it('compiles RE2 patterns with RE2, and reports what does not compile', () => {
    assert.ok((compileRe2('(?i)abc') as Re2).test('ABC'));
    assert.ok(!(compileRe2('(?P<x>a)') instanceof Error));
    assert.ok(compileRe2('a(') instanceof Error);
  });
  it('canonical JSON ignores key order and empty values', () => {
    assert.equal(canonicalJson({ b: 1, a: [], c: {}, d: { y: 2, x: 1 } }), canonicalJson({ d: { x: 1, y: 2 }, b: 1 }));
  });
});
