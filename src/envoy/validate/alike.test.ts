import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../../api/type-urls.js';
import { validLike } from './alike.js';
import { PgvRules } from './pgv-rules.js';

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const TCP_PROXY = 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy';
const UPSTREAM_TLS = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';

/** A valid EDS cluster over ADS, with an upstream TLS context. */
const CLUSTER: Obj = {
  name: 'ns/svc|80',
  type: 'EDS',
  connect_timeout: { seconds: 1 },
  eds_cluster_config: { eds_config: { ads: {}, resource_api_version: 'V3' } },
  transport_socket: { name: 'envoy.transport_sockets.tls', typed_config: { '@type': UPSTREAM_TLS, sni: 'svc.ns.svc.cluster.local' } },
};

describe('validLike', () => {
  const ADS = { ads: {}, resource_api_version: 'V3' };
  const tls = (cert: string, extra: Obj = {}): Obj => ({
    transport_socket: {
      name: 'envoy.transport_sockets.tls',
      typed_config: { '@type': UPSTREAM_TLS, common_tls_context: { tls_certificate_sds_secret_configs: [{ name: cert, sds_config: ADS }] }, sni: 's.ns', ...extra },
    },
  });

  it('holds for messages that differ only in strings meeting the same (or no) rules', () => {
    assert.equal(validLike(TypeUrl.Cluster, tls('cert-a'), tls('cert-b')), true);
    assert.equal(validLike(TypeUrl.Cluster, CLUSTER, { ...CLUSTER, name: 'other|80' }), true);
  });

  it('holds across map keys, unruled numbers, ruled list items and required-only messages that all meet their rules', () => {
    const RBAC = 'envoy.config.rbac.v3.RBAC';
    const principal = (p: string) => ({ authenticated: { principal_name: { exact: p } } });
    const rbac = (name: string, p: string) => ({ action: 'ALLOW', policies: { [name]: { permissions: [{ any: true }], principals: [principal(p)] } } });
    assert.equal(validLike(RBAC, rbac('a/x', 'spiffe://a'), rbac('b/y', 'spiffe://b')), true, 'map keys and StringMatcher (message.required) differ');
    assert.equal(validLike(RBAC, rbac('a', 'p'), { ...rbac('a', 'p'), policies: { a: rbac('a', 'p').policies.a, b: rbac('a', 'p').policies.a } }), false, 'an entry more');
    const VH = 'envoy.config.route.v3.VirtualHost';
    const vh = (...domains: string[]) => ({ name: 'v', domains });
    assert.equal(validLike(VH, vh('a.ns', 'a.ns:8080'), vh('b.ns', 'b.ns:9090')), true, 'domains items meet HTTP_HEADER_VALUE');
    assert.equal(validLike(VH, vh('a.ns'), vh('b\nc')), false, 'an item breaking its rule');
    assert.equal(validLike(VH, vh('a.ns'), vh('a.ns', 'b.ns')), false, 'an item more');
    const ADDRESS = 'envoy.config.core.v3.SocketAddress';
    assert.equal(validLike(ADDRESS, { address: '10.0.0.1', port_value: 8080 }, { address: '10.0.0.2', port_value: 9090 }), false, 'port_value has a rule (lte 65535)');
    const HCM = 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
    const hcm = (hops: number) => ({ stat_prefix: 'a', xff_num_trusted_hops: hops });
    assert.equal(validLike(HCM, hcm(1), hcm(7)), true, 'xff_num_trusted_hops: uint32, no rule');
    assert.equal(validLike(HCM, hcm(1), hcm(0)), false, 'zero is not on the wire');
  });

  it('fails when a differing string breaks a rule, is empty, or the shapes differ', () => {
    assert.equal(validLike(TypeUrl.Cluster, tls('service-cert'), tls('')), false, 'SdsSecretConfig.name min_len 1');
    assert.equal(validLike(TypeUrl.Cluster, tls('a'), tls('a', { sni: 'x'.repeat(300) })), false, 'sni max_bytes 255');
    assert.equal(validLike(TypeUrl.Cluster, tls('a'), tls('a', { allow_renegotiation: true })), false, 'a field more');
    assert.equal(validLike(TypeUrl.Cluster, CLUSTER, { ...CLUSTER, connect_timeout: { seconds: 2 } }), false, 'a number');
    assert.equal(validLike(TypeUrl.Cluster, CLUSTER, { ...CLUSTER, type: 'STATIC' }), false, 'an enum');
    const other = { transport_socket: { name: 'envoy.transport_sockets.tls', typed_config: { '@type': TCP_PROXY, stat_prefix: 's.ns' } } };
    assert.equal(validLike(TypeUrl.Cluster, tls('a'), other), false, 'another @type');
    assert.equal(validLike(TypeUrl.Cluster, { name: 'a', nonsense: 1 }, { name: 'b', nonsense: 1 }), false, 'an unknown field');
    const RDS = 'envoy.extensions.filters.network.http_connection_manager.v3.Rds';
    const rds = (config_source: Obj) => ({ config_source, route_config_name: 'r' });
    assert.equal(validLike(RDS, rds({ ads: {}, resource_api_version: 'V3' }), rds({ resource_api_version: 'V3' })), false, 'an empty message is a present field');
  });
});

describe('validLike with the rules a caller keeps', () => {
  it('answers the same with one PgvRules across calls as with a fresh one each time', () => {
    const pgv = new PgvRules();
    const tls = (cert: string) => ({ ...CLUSTER, transport_socket: { ...CLUSTER.transport_socket, name: cert } });
    for (const [a, b] of [[CLUSTER, tls('x')], [CLUSTER, tls('')], [CLUSTER, { ...CLUSTER, type: 'STATIC' }]] as const) {
      assert.equal(validLike(TypeUrl.Cluster, a, b, pgv), validLike(TypeUrl.Cluster, a, b));
    }
  });
});

describe('validLike with the messages a caller knows valid', () => {
  const LISTENER = TypeUrl.Listener;
  const DOWNSTREAM_TLS = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext';
  const ADS = { ads: {}, resource_api_version: 'V3' };
  const tcp = (extra: Obj): Obj => ({ name: 'envoy.filters.network.tcp_proxy', typed_config: { '@type': TCP_PROXY, stat_prefix: 's', ...extra } });
  const socket = (root: string, ciphers?: string[]): Obj => ({
    name: 'envoy.transport_sockets.tls',
    typed_config: {
      '@type': DOWNSTREAM_TLS,
      common_tls_context: { ...(ciphers ? { tls_params: { cipher_suites: ciphers } } : {}), validation_context_sds_secret_config: { name: root, sds_config: ADS } },
    },
  });
  const listener = (filter: Obj, transport: Obj): Obj => ({ name: 'inbound-listener', filter_chains: [{ filters: [filter], transport_socket: transport }] });

  it('takes a nested message found alike before as valid, wherever it is met again, and nothing else', () => {
    const known = new WeakMap();
    const pgv = new PgvRules();
    const mine = tcp({ cluster: 'mine' });
    // Two identities' listeners: mine is found alike the other's, and its filter known valid.
    assert.equal(validLike(LISTENER, listener(tcp({ cluster: 'theirs' }), socket('root-a')), listener(mine, socket('root-b')), pgv, known), true);
    // Cipher suites set (a field more in every TLS context): my new listener keeps its filter,
    // and is compared with another identity's new one, whose filter splits traffic.
    const theirs = listener(tcp({ weighted_clusters: { clusters: [{ name: 'a', weight: 1 }, { name: 'b', weight: 1 }] } }), socket('root-c', ['X']));
    assert.equal(validLike(LISTENER, theirs, listener(mine, socket('root-b', ['X'])), pgv), false, 'unlike by shape without what is known');
    assert.equal(validLike(LISTENER, theirs, listener(mine, socket('root-b', ['X'])), pgv, known), true, 'the filter known valid');
    assert.equal(validLike(LISTENER, theirs, listener(tcp({ cluster: 'mine' }), socket('root-b', ['X'])), pgv, known), false, 'an equal filter that is another object is compared');
    assert.equal(validLike(LISTENER, theirs, listener(mine, socket('', ['X'])), pgv, known), false, 'what differs beside it is still compared');
  });
});
