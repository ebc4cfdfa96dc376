import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import { bookstoreMesh } from '../../test/fixtures/mesh.js';
import { generateConfig, proxyOf, TEST_CERTS, type Decoded } from '../../test/helpers/generate-config.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { buildMeshSnapshot } from '../catalog/build-snapshot.js';
import { formatProblem } from '../catalog/problems.js';
import type { KubeObject } from '../store/objects.js';
import { GenerationContext, proxyProfile } from './context.js';
import { generateProxyResources } from './generate.js';
import { formatViolation, validateProxyResources } from './validate/index.js';

const HCM = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const TCP_PROXY = 'type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy';

/** The bookstore mesh with `observability` set on its MeshConfig. */
function withObservability(observability: object | undefined): KubeObject[] {
  return bookstoreMesh().map((o) => (o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), observability } } : o));
}

/** Every network filter's typed config of a listener, by chain name and filter `@type`. */
function filtersOf(listener: Decoded, type: string): { chain: string; config: Decoded }[] {
  return listener.filter_chains.flatMap((c: Decoded) =>
    c.filters.filter((f: Decoded) => f.typed_config['@type'] === type).map((f: Decoded) => ({ chain: c.name, config: f.typed_config })),
  );
}

const BOTH_ON = { enableAccessLog: true, tracing: { enable: true, address: 'zipkin.tracing.svc.cluster.local', port: 9411, endpoint: '/api/v2/spans', sampledFraction: 0.25 } };

describe('MeshConfig telemetry: access logs and Zipkin tracing', () => {
  it('is off unless the MeshConfig turns it on: no access_log, no tracing, no tracing cluster', () => {
    for (const observability of [undefined, { enableAccessLog: false, tracing: { enable: false, address: 'zipkin', port: 9411 } }]) {
      const store = generateConfig(withObservability(observability), 'bookstore', 'bookstore');
      const buyer = generateConfig(withObservability(observability), 'bookbuyer', 'bookbuyer');
      assert.equal(buyer.get(TypeUrl.Cluster)!.has('envoy-tracing-cluster'), false);
      for (const l of [...store.get(TypeUrl.Listener)!.values(), ...buyer.get(TypeUrl.Listener)!.values()]) {
        for (const { config } of [...filtersOf(l, HCM), ...filtersOf(l, TCP_PROXY)]) {
          assert.equal(config.access_log, undefined);
          assert.equal(config.tracing, undefined);
        }
      }
    }
  });

  it('puts a stdout access log (default format) and Zipkin tracing on inbound and outbound HCMs, an access log on tcp_proxy', () => {
    const mysqlClient = generateConfig(withObservability(BOTH_ON), 'bookwarehouse', 'bookwarehouse');
    const server = generateConfig(withObservability(BOTH_ON), 'bookstore', 'bookstore');
    const inbound = filtersOf(server.get(TypeUrl.Listener)!.get('inbound-listener')!, HCM);
    // bookstore serves HTTP and reaches bookwarehouse over HTTP.
    const outbound = filtersOf(server.get(TypeUrl.Listener)!.get('outbound-listener')!, HCM);
    assert.ok(inbound.length > 0 && outbound.length > 0);
    for (const { chain, config } of [...inbound, ...outbound]) {
      assert.deepEqual(
        config.access_log,
        [{ name: 'envoy.access_loggers.stream', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog' } }],
        chain,
      );
      assert.equal(config.tracing.random_sampling.value, 25, chain);
      assert.equal(config.tracing.provider.name, 'envoy.tracers.zipkin');
      const zipkin = config.tracing.provider.typed_config;
      assert.equal(zipkin['@type'], 'type.googleapis.com/envoy.config.trace.v3.ZipkinConfig');
      assert.equal(zipkin.collector_cluster, 'envoy-tracing-cluster');
      assert.equal(zipkin.collector_endpoint, '/api/v2/spans');
      assert.equal(zipkin.collector_endpoint_version, 'HTTP_JSON');
    }
    // bookwarehouse reaches mysql over TCP: its tcp_proxy chain logs too (no tracing: it is not HTTP).
    const mysql = generateConfig(withObservability(BOTH_ON), 'mysql', 'bookwarehouse');
    const tcp = [...filtersOf(mysqlClient.get(TypeUrl.Listener)!.get('outbound-listener')!, TCP_PROXY), ...filtersOf(mysql.get(TypeUrl.Listener)!.get('inbound-listener')!, TCP_PROXY)];
    assert.deepEqual(tcp.map((t) => t.chain), ['outbound_bookwarehouse/mysql|3306_tcp', 'inbound_bookwarehouse/mysql|3306_tcp']);
    for (const { config } of tcp) assert.equal(config.access_log[0].name, 'envoy.access_loggers.stream');
    const cluster = mysqlClient.get(TypeUrl.Cluster)!.get('envoy-tracing-cluster')!;
    assert.equal(cluster.type, 'STRICT_DNS');
    assert.deepEqual(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address, {
      address: 'zipkin.tracing.svc.cluster.local',
      port_value: 9411,
    });
  });

  it('makes the tracing cluster STATIC for an IP address, with the defaults for port, endpoint and sampling', () => {
    const cfg = generateConfig(withObservability({ tracing: { enable: true, address: '10.0.0.9' } }), 'bookbuyer', 'bookbuyer');
    const cluster = cfg.get(TypeUrl.Cluster)!.get('envoy-tracing-cluster')!;
    assert.equal(cluster.type, 'STATIC');
    assert.equal(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value, 9411);
    const [hcm] = filtersOf(cfg.get(TypeUrl.Listener)!.get('outbound-listener')!, HCM);
    assert.equal(hcm.config.tracing.random_sampling.value, 100);
    assert.equal(hcm.config.tracing.provider.typed_config.collector_endpoint, '/api/v2/spans');
    assert.equal(hcm.config.access_log, undefined, 'tracing alone: no access log');
  });

  it('passes the validator (protos, PGV rules, cross-resource) with both on', () => {
    const { snapshot, problems } = buildMeshSnapshot(memoryStore(withObservability(BOTH_ON)), { meshName: 'osm', generation: 1 });
    assert.deepEqual(problems, []);
    for (const [sa, ns] of [['bookstore', 'bookstore'], ['bookwarehouse', 'bookwarehouse'], ['bookbuyer', 'bookbuyer']]) {
      const resources = generateProxyResources(new GenerationContext(snapshot), proxyProfile(proxyOf(sa, ns)), TEST_CERTS);
      assert.deepEqual(validateProxyResources(resources).violations.map(formatViolation), [], sa);
    }
  });

  it('reports an invalid tracing field by name and keeps the last good tracing settings', () => {
    const first = buildMeshSnapshot(memoryStore(withObservability(BOTH_ON)), { meshName: 'osm', generation: 1 });
    const good = first.snapshot.settings.tracing;
    assert.equal(good?.address, 'zipkin.tracing.svc.cluster.local');
    const cases: [object, string][] = [
      [{ enable: true, address: 'zipkin', port: 70000 }, 'spec.observability.tracing.port'],
      [{ enable: true, address: 'not a host!', port: 9411 }, 'spec.observability.tracing.address'],
      [{ enable: true, port: 9411 }, 'spec.observability.tracing.address'],
      [{ enable: true, address: 'zipkin', endpoint: 'api/v2/spans' }, 'spec.observability.tracing.endpoint'],
      [{ enable: true, address: 'zipkin', sampledFraction: 1.5 }, 'spec.observability.tracing.sampledFraction'],
    ];
    for (const [tracing, field] of cases) {
      const next = buildMeshSnapshot(memoryStore(withObservability({ tracing })), { meshName: 'osm', generation: 2, previous: first.snapshot });
      assert.deepEqual(next.problems.map((p) => p.field), [field], JSON.stringify(tracing));
      assert.match(formatProblem(next.problems[0]), /MeshConfig osm-system\/osm-mesh-config: spec\.observability\.tracing\.\w+: .*the last valid tracing settings .* stay in force/);
      assert.equal(next.snapshot.settings.tracing, good, 'the last good settings, the same object');
      // Without a previous good one: tracing is off.
      const fresh = buildMeshSnapshot(memoryStore(withObservability({ tracing })), { meshName: 'osm', generation: 1 });
      assert.equal(fresh.snapshot.settings.tracing, undefined);
      assert.match(fresh.problems[0].message, /tracing is off$/);
    }
  });
});
