import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import type { Proxy } from '../proxy/types.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { generateConfig, names, type Decoded, type DecodedConfig } from '../../test/helpers/generate-config.js';
import type { KubeObject } from '../store/objects.js';
import { NO_ROUTE_CLUSTER, NO_ROUTE_CONFIG, proxylessTargetNames } from './proxyless.js';

/** The decoded resources of `<ns>/<sa>` as a proxyless gRPC client (or as `clientType`). */
function configFor(objects: KubeObject[], sa: string, ns: string, clientType: Proxy['clientType'] = 'grpc'): DecodedConfig {
  return generateConfig(objects, sa, ns, { clientType });
}

describe('proxyless gRPC generation (gRFC A27) on the bookstore mesh', () => {
  const buyer = configFor(bookstoreMesh({ split: [80, 20] }), 'bookbuyer', 'bookbuyer');

  const hostForms = (svc: string, ns: string, ip: string): string[] => [
    `${svc}.${ns}:14001`,
    `${svc}.${ns}.svc:14001`,
    `${svc}.${ns}.svc.cluster:14001`,
    `${svc}.${ns}.svc.cluster.local:14001`,
    `${ip}:14001`,
  ];
  const reachable = ['bookstore', 'bookstore-v1', 'bookstore-v2'].flatMap((svc, i) => hostForms(svc, 'bookstore', `10.96.0.1${i}`));
  const unreachable = hostForms('bookwarehouse', 'bookwarehouse', '10.96.0.20');

  it('names a listener after every host form a client may dial for each HTTP mesh service, with the port', () => {
    assert.deepEqual(names(buyer, TypeUrl.Listener), [...reachable, ...unreachable].sort());
  });

  it('gives each listener only an api_listener HCM: RDS over ADS (rds-outbound.<port>, or no route when not allowed), router filter last', () => {
    for (const [name, listener] of buyer.get(TypeUrl.Listener)!) {
      assert.equal(listener.address, undefined);
      assert.equal(listener.filter_chains, undefined);
      const hcm = listener.api_listener.api_listener;
      assert.equal(hcm['@type'], 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager');
      assert.deepEqual(hcm.rds.config_source.ads, {});
      assert.equal(hcm.rds.route_config_name, reachable.includes(name) ? 'rds-outbound.14001' : NO_ROUTE_CONFIG, name);
      assert.equal(hcm.http_filters.at(-1).typed_config['@type'], 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router');
    }
    // Services bookbuyer may not reach: every RPC goes to a cluster without endpoints (UNAVAILABLE).
    const noRoute = buyer.get(TypeUrl.RouteConfiguration)!.get(NO_ROUTE_CONFIG)!;
    assert.deepEqual(
      noRoute.virtual_hosts.map((v: Decoded) => [v.domains, v.routes.map((r: Decoded) => [r.match, r.route.cluster])]),
      [[['*'], [[{ prefix: '/' }, NO_ROUTE_CLUSTER]]]],
    );
    assert.deepEqual(buyer.get(TypeUrl.ClusterLoadAssignment)!.get(NO_ROUTE_CLUSTER), {
      '@type': 'type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment',
      cluster_name: NO_ROUTE_CLUSTER,
    });
  });

  it('routes with the same policy as the sidecar: the split as weighted clusters whose total_weight is their sum (sidecars go without it)', () => {
    const sidecar = configFor(bookstoreMesh({ split: [80, 20] }), 'bookbuyer', 'bookbuyer', 'envoy');
    assert.deepEqual(names(buyer, TypeUrl.RouteConfiguration), [NO_ROUTE_CONFIG, 'rds-outbound.14001']);
    const rds = buyer.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001')!;
    const withoutTotal = structuredClone(rds);
    for (const vh of withoutTotal.virtual_hosts) for (const r of vh.routes) delete r.route.weighted_clusters?.total_weight;
    assert.deepEqual(withoutTotal, sidecar.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001'));
    const apex = rds.virtual_hosts.find((v: Decoded) => v.domains.includes('bookstore.bookstore:14001'));
    const split = apex.routes[0].route.weighted_clusters;
    assert.deepEqual(
      split.clusters.map((c: Decoded) => [c.name, c.weight.value]),
      [
        ['bookstore/bookstore-v1|14001', 80],
        ['bookstore/bookstore-v2|14001', 20],
      ],
    );
    assert.equal(split.total_weight.value, 100);
    // Every listener name of a reachable service is a domain of exactly one virtual host.
    for (const name of reachable) {
      assert.equal(rds.virtual_hosts.filter((v: Decoded) => v.domains.includes(name)).length, 1, name);
    }
  });

  it('sends plaintext EDS clusters (no SDS-based UpstreamTlsContext), ROUND_ROBIN, and no secrets', () => {
    assert.deepEqual(names(buyer, TypeUrl.Cluster), ['bookstore/bookstore-v1|14001', 'bookstore/bookstore-v2|14001', 'bookstore/bookstore|14001', NO_ROUTE_CLUSTER]);
    for (const c of buyer.get(TypeUrl.Cluster)!.values()) {
      assert.equal(c.type, 'EDS');
      assert.deepEqual(c.eds_cluster_config.eds_config.ads, {});
      assert.equal(c.eds_cluster_config.service_name, c.name);
      assert.equal(c.lb_policy, 'ROUND_ROBIN');
      assert.equal(c.transport_socket, undefined);
    }
    assert.deepEqual(names(buyer, TypeUrl.Secret), []);
  });

  it('sends ClusterLoadAssignments with IP literals and a weighted locality on every group', () => {
    const cla = buyer.get(TypeUrl.ClusterLoadAssignment)!.get('bookstore/bookstore-v1|14001')!;
    assert.equal(cla.endpoints.length, 1);
    for (const group of cla.endpoints) {
      assert.ok(group.locality, 'locality set');
      assert.ok(group.load_balancing_weight.value > 0);
    }
    assert.deepEqual(
      cla.endpoints[0].lb_endpoints.map((e: Decoded) => e.endpoint.address.socket_address),
      [{ address: '10.244.2.10', port_value: 14001 }],
    );
  });

  it('gives a source without a TrafficTarget no route: its listeners lead only to the cluster without endpoints', () => {
    const thief = configFor(bookstoreMesh(), 'bookthief', 'bookthief');
    assert.deepEqual(names(thief, TypeUrl.Listener), [...reachable, ...unreachable].sort());
    assert.deepEqual(names(thief, TypeUrl.RouteConfiguration), [NO_ROUTE_CONFIG]);
    assert.deepEqual(names(thief, TypeUrl.Cluster), [NO_ROUTE_CLUSTER]);
    assert.deepEqual(names(thief, TypeUrl.ClusterLoadAssignment), [NO_ROUTE_CLUSTER]);
  });

  it('adds the bare <svc>:<port> form only for a client in the service namespace', () => {
    const objects = [
      ...bookstoreMesh({ permissive: true }),
      k8s.serviceAccount('bookstore', 'client'),
      k8s.pod('bookstore', 'client-1', 'client', { app: 'client' }, '10.244.2.99'),
    ];
    const local = configFor(objects, 'client', 'bookstore');
    assert.ok(names(local, TypeUrl.Listener).includes('bookstore:14001'));
    assert.ok(!names(buyer, TypeUrl.Listener).includes('bookstore:14001'));
    // TCP destinations (mysql) get no listener: gRPC speaks HTTP/2 only.
    assert.ok(!names(local, TypeUrl.Listener).some((n) => n.startsWith('mysql')));
  });
});

describe('proxylessTargetNames', () => {
  it('keeps bracketed IPv6 ClusterIPs with the port and drops every port-less form', () => {
    const svc = { name: 'a', namespace: 'n', port: 80, targetPort: 8080, portName: undefined, protocol: 'grpc' as const, clusterIPs: ['fd00::1:80'], headless: false };
    assert.deepEqual(proxylessTargetNames(svc, 'n'), ['a:80', 'a.n:80', 'a.n.svc:80', 'a.n.svc.cluster:80', 'a.n.svc.cluster.local:80', '[fd00::1:80]:80']);
  });
});
