import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeMessage, encodeMessage } from '../api/codec.js';
import { proxyCommonName, XDS_SERVER_SPIFFE_ID } from '../proxy/types.js';
import { parse, stringify } from 'yaml';
import { MAX_RE2_PROGRAM_SIZE } from '../util/re2.js';
import { envoyBootstrap, isIpLiteral } from './bootstrap.js';

const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';
const nodeId = proxyCommonName('0b7d6a52-1f0c-4c4e-9f5e-2a8c2b7a9d11', 'sidecar', 'bookstore', 'bookstore-v1');

type Obj = Record<string, unknown>;
/** Walks a decoded object along a path of keys and indexes. */
function at(obj: unknown, ...pathParts: (string | number)[]): unknown {
  return pathParts.reduce<unknown>((o, k) => (o as Obj | unknown[] | undefined)?.[k as never], obj);
}

function roundTrip(obj: object): Obj {
  return decodeMessage(BOOTSTRAP, encodeMessage(BOOTSTRAP, obj));
}

describe('envoyBootstrap', () => {
  const opts = {
    nodeId,
    xdsHost: 'osm-controller.osm-system.svc.cluster.local',
    xdsPort: 15128,
    certFile: '/etc/trellis/xds-cert.pem',
    keyFile: '/etc/trellis/xds-key.pem',
    caFile: '/etc/trellis/ca.pem',
  };

  it('encodes with the real Envoy Bootstrap proto and decodes back to the same node, admin and ADS config', () => {
    const decoded = roundTrip(envoyBootstrap(opts));
    assert.equal(at(decoded, 'node', 'id'), nodeId);
    assert.equal(at(decoded, 'node', 'cluster'), 'bookstore-v1.bookstore');
    assert.deepEqual(at(decoded, 'admin', 'address', 'socket_address'), { address: '127.0.0.1', port_value: 15000 });
    assert.equal(
      at(decoded, 'admin', 'access_log', 0, 'typed_config', '@type'),
      'type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog',
    );
    const ads = at(decoded, 'dynamic_resources', 'ads_config') as Obj;
    assert.equal(ads.api_type, 'GRPC');
    assert.equal(ads.transport_api_version, 'V3');
    assert.equal(ads.set_node_on_first_message_only, true);
    assert.equal(at(ads, 'grpc_services', 0, 'envoy_grpc', 'cluster_name'), 'osm-controller');
    for (const key of ['cds_config', 'lds_config']) {
      assert.deepEqual(at(decoded, 'dynamic_resources', key), { ads: {}, resource_api_version: 'V3' }, key);
    }
  });

  it('points the osm-controller cluster at a DNS host with LOGICAL_DNS, HTTP/2 and mTLS from files', () => {
    const decoded = roundTrip(envoyBootstrap(opts));
    const clusters = at(decoded, 'static_resources', 'clusters') as Obj[];
    assert.equal(clusters.length, 1);
    const [cluster] = clusters;
    assert.equal(cluster.name, 'osm-controller');
    assert.equal(cluster.type, 'LOGICAL_DNS');
    assert.deepEqual(at(cluster, 'load_assignment', 'endpoints', 0, 'lb_endpoints', 0, 'endpoint', 'address', 'socket_address'), {
      address: 'osm-controller.osm-system.svc.cluster.local',
      port_value: 15128,
    });
    assert.deepEqual(at(cluster, 'typed_extension_protocol_options'), {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
        '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
        explicit_http_config: { http2_protocol_options: {} },
      },
    });

    const transport = at(cluster, 'transport_socket') as Obj;
    assert.equal(transport.name, 'envoy.transport_sockets.tls');
    const tls = transport.typed_config as Obj;
    assert.equal(tls['@type'], 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext');
    assert.equal(tls.sni, 'osm-controller.osm-system.svc.cluster.local');
    const common = tls.common_tls_context as Obj;
    assert.deepEqual(common.alpn_protocols, ['h2']);
    assert.deepEqual(common.tls_params, { tls_minimum_protocol_version: 'TLSv1_2', tls_maximum_protocol_version: 'TLSv1_3' });
    assert.deepEqual(common.tls_certificates, [
      { certificate_chain: { filename: '/etc/trellis/xds-cert.pem' }, private_key: { filename: '/etc/trellis/xds-key.pem' } },
    ]);
    assert.deepEqual(at(common, 'validation_context', 'trusted_ca'), { filename: '/etc/trellis/ca.pem' });
  });

  it("requires the ADS server's certificate to carry the controller's URI SAN (exact), whatever the host", () => {
    // Chaining to the mesh CA is not enough: it signs every workload's service certificate too.
    for (const xdsHost of [opts.xdsHost, '10.0.0.7', '::1']) {
      const validation = at(roundTrip(envoyBootstrap({ ...opts, xdsHost })), 'static_resources', 'clusters', 0, 'transport_socket', 'typed_config', 'common_tls_context', 'validation_context') as Obj;
      assert.deepEqual(validation.trusted_ca, { filename: '/etc/trellis/ca.pem' }, xdsHost);
      assert.deepEqual(validation.match_typed_subject_alt_names, [{ san_type: 'URI', matcher: { exact: 'spiffe://cluster.local/osm-controller' } }], xdsHost);
      assert.equal(validation.match_subject_alt_names, undefined, xdsHost);
    }
    assert.equal(XDS_SERVER_SPIFFE_ID, 'spiffe://cluster.local/osm-controller');
  });

  it('uses a STATIC cluster without SNI for IPv4 and IPv6 literals, and honours the ports given', () => {
    for (const [host, want] of [['10.0.0.7', '10.0.0.7'], ['::1', '::1'], ['[fd00::1]', 'fd00::1']] as const) {
      const decoded = roundTrip(envoyBootstrap({ ...opts, xdsHost: host, xdsPort: 9000, adminPort: 15999 }));
      const cluster = at(decoded, 'static_resources', 'clusters', 0) as Obj;
      assert.equal(cluster.type, 'STATIC', host);
      assert.deepEqual(at(cluster, 'load_assignment', 'endpoints', 0, 'lb_endpoints', 0, 'endpoint', 'address', 'socket_address'), {
        address: want,
        port_value: 9000,
      });
      assert.equal(at(cluster, 'transport_socket', 'typed_config', 'sni'), undefined, host);
      assert.equal(at(decoded, 'admin', 'address', 'socket_address', 'port_value'), 15999);
    }
  });

  it('writes DELTA_GRPC with delta, and a 0600 Pipe admin address with adminSocketPath', () => {
    assert.equal(at(roundTrip(envoyBootstrap(opts)), 'dynamic_resources', 'ads_config', 'api_type'), 'GRPC');
    const decoded = roundTrip(envoyBootstrap({ ...opts, delta: true, adminSocketPath: '/run/lab/admin.sock' }));
    assert.equal(at(decoded, 'dynamic_resources', 'ads_config', 'api_type'), 'DELTA_GRPC');
    assert.deepEqual(at(decoded, 'admin', 'address'), { pipe: { path: '/run/lab/admin.sock', mode: 0o600 } });
  });

  it('takes node.cluster when given, and rejects a node id that is not a proxy CommonName otherwise', () => {
    assert.equal(at(roundTrip(envoyBootstrap({ ...opts, nodeCluster: 'custom' })), 'node', 'cluster'), 'custom');
    assert.throws(() => envoyBootstrap({ ...opts, nodeId: 'not-a-cn' as typeof nodeId }), /CommonName "not-a-cn"/);
    assert.throws(() => envoyBootstrap({ ...opts, xdsPort: 70000 }), /xdsPort 70000/);
  });
  it('raises Envoy\'s RE2 program-size limit to the one the controller checks, in the YAML Envoy reads', () => {
    const yaml = parse(stringify(envoyBootstrap(opts))) as Obj;
    assert.deepEqual(at(yaml, 'layered_runtime', 'layers'), [
      { name: 'static', static_layer: { 're2.max_program_size.error_level': MAX_RE2_PROGRAM_SIZE } },
      { name: 'admin', admin_layer: {} },
    ]);
  });
});

describe('isIpLiteral', () => {
  it('tells IP literals from DNS names', () => {
    for (const ip of ['127.0.0.1', '0.0.0.0', '255.255.255.255', '::', '::1', 'fe80::1%eth0', '2001:db8::ffff:10.0.0.1']) assert.ok(isIpLiteral(ip), ip);
    for (const name of ['localhost', 'osm-controller.osm-system.svc', '256.1.1.1', '1.2.3', 'a:b']) assert.ok(!isIpLiteral(name), name);
  });
});
