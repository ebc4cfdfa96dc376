import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { TypeUrl } from '../api/type-urls.js';
import { bookstoreMesh, k8s } from '../../test/fixtures/mesh.js';
import { generateConfig, names, type Decoded } from '../../test/helpers/generate-config.js';
import { memoryStore } from '../../test/helpers/memory-store.js';
import { buildMeshSnapshot, MeshSnapshotBuilder } from '../catalog/build-snapshot.js';
import { parseCommonName } from '../proxy/types.js';
import { GenerationContext, proxyProfile } from './context.js';
import { generateProxyResources } from './generate.js';
import { ObjectStore } from '../store/object-store.js';
import type { KubeObject } from '../store/objects.js';

describe('generators on the bookstore mesh (SMI mode)', () => {
  const buyer = generateConfig(bookstoreMesh(), 'bookbuyer', 'bookbuyer');

  it('gives bookbuyer clusters for the bookstore apex and both split backends, and nothing else upstream', () => {
    assert.deepEqual(names(buyer, TypeUrl.Cluster), [
      'bookstore/bookstore-v1|14001',
      'bookstore/bookstore-v2|14001',
      'bookstore/bookstore|14001',
      'envoy-metrics-cluster',
    ]);
    const v1 = buyer.get(TypeUrl.Cluster)!.get('bookstore/bookstore-v1|14001')!;
    assert.equal(v1.type, 'EDS');
    assert.deepEqual(v1.eds_cluster_config.eds_config.ads, {});
    const tls = v1.transport_socket.typed_config;
    assert.equal(tls['@type'], 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext');
    assert.equal(tls.sni, 'bookstore-v1.bookstore.svc.cluster.local');
    assert.equal(tls.common_tls_context.tls_certificate_sds_secret_configs[0].name, 'service-cert');
    // The mesh root over SDS, one Secret for every upstream, and the service's identities as SANs in the cluster.
    const validation = tls.common_tls_context.combined_validation_context;
    assert.equal(validation.validation_context_sds_secret_config.name, 'root-cert-for-mtls-outbound');
    assert.deepEqual(
      validation.default_validation_context.match_typed_subject_alt_names.map((m: Decoded) => [m.san_type, m.matcher.exact]),
      [['URI', 'spiffe://cluster.local/ns/bookstore/sa/bookstore']],
    );
    assert.equal(tls.common_tls_context.validation_context_sds_secret_config, undefined);
  });

  it('routes bookstore 50/50 to bookstore-v1 and bookstore-v2, without the total_weight Envoy deprecates', () => {
    const rds = buyer.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001')!;
    const vh = rds.virtual_hosts.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
    assert.ok(vh, 'virtual host for the bookstore apex');
    assert.ok(vh.domains.includes('bookstore.bookstore'));
    assert.ok(vh.domains.includes('bookstore.bookstore.svc.cluster.local:14001'));
    assert.ok(vh.domains.includes('10.96.0.10:14001'));
    assert.ok(!vh.domains.includes('bookstore'), 'bare name only from the same namespace');
    const wc = vh.routes[0].route.weighted_clusters;
    assert.deepEqual(
      wc.clusters.map((c: Decoded) => [c.name, c.weight.value]),
      [
        ['bookstore/bookstore-v1|14001', 50],
        ['bookstore/bookstore-v2|14001', 50],
      ],
    );
    // Envoy 1.40 warned: "Using deprecated option 'envoy.config.route.v3.WeightedCluster.total_weight' … will be removed from Envoy soon".
    assert.equal(wc.total_weight, undefined);
    const all = rds.virtual_hosts.flatMap((v: Decoded) => v.domains);
    assert.equal(new Set(all).size, all.length, 'domains unique across virtual hosts');
  });

  it('captures bookstore traffic on the outbound listener by ClusterIP and port', () => {
    const lds = buyer.get(TypeUrl.Listener)!;
    assert.deepEqual([...lds.keys()], ['outbound-listener'], 'bookbuyer serves nothing: no inbound listener');
    const out = lds.get('outbound-listener')!;
    assert.equal(out.address.socket_address.port_value, 15001);
    assert.equal(out.listener_filters[0].name, 'envoy.filters.listener.original_dst');
    const chain = out.filter_chains.find((c: Decoded) => c.name === 'outbound_http_14001');
    assert.equal(chain.filter_chain_match.destination_port.value, 14001);
    assert.deepEqual(
      chain.filter_chain_match.prefix_ranges.map((r: Decoded) => r.address_prefix),
      ['10.96.0.10', '10.96.0.11', '10.96.0.12'],
    );
    const hcm = chain.filters[0].typed_config;
    assert.equal(hcm.rds.route_config_name, 'rds-outbound.14001');
    assert.equal(hcm.http_filters.at(-1).name, 'envoy.filters.http.router');
  });

  it('serves EDS with the pod IPs on the target port', () => {
    const cla = buyer.get(TypeUrl.ClusterLoadAssignment)!.get('bookstore/bookstore|14001')!;
    const addrs = cla.endpoints[0].lb_endpoints.map((e: Decoded) => `${e.endpoint.address.socket_address.address}:${e.endpoint.address.socket_address.port_value}`);
    assert.deepEqual(addrs, ['10.244.2.10:14001', '10.244.2.20:14001']);
    const v2 = buyer.get(TypeUrl.ClusterLoadAssignment)!.get('bookstore/bookstore-v2|14001')!;
    assert.deepEqual(v2.endpoints[0].lb_endpoints.map((e: Decoded) => e.endpoint.address.socket_address.address), ['10.244.2.20']);
  });

  it('pins outbound validation contexts to the identities behind each service, over one shared root Secret', () => {
    const sds = buyer.get(TypeUrl.Secret)!;
    const apex = buyer.get(TypeUrl.Cluster)!.get('bookstore/bookstore|14001')!.transport_socket.typed_config.common_tls_context.combined_validation_context;
    assert.deepEqual(
      apex.default_validation_context.match_typed_subject_alt_names.map((m: Decoded) => [m.san_type, m.matcher.exact]),
      [
        ['URI', 'spiffe://cluster.local/ns/bookstore/sa/bookstore'],
        ['URI', 'spiffe://cluster.local/ns/bookstore/sa/bookstore-v2'],
      ],
    );
    // One root for every upstream: no per-service Secret repeating it.
    const root = sds.get('root-cert-for-mtls-outbound')!;
    assert.deepEqual(root.validation_context, { trusted_ca: { inline_string: 'ROOT' } });
    assert.deepEqual([...sds.keys()].filter((n) => n.startsWith('root-cert-for-mtls-outbound')), ['root-cert-for-mtls-outbound']);
    const own = sds.get('service-cert')!;
    assert.equal(own.tls_certificate.certificate_chain.inline_string, 'CERT');
    assert.equal(own.tls_certificate.private_key.inline_string, 'KEY');
  });

  it('gives bookstore an inbound listener with mTLS, SNI and l4_rbac allowing only bookbuyer', () => {
    const store = generateConfig(bookstoreMesh(), 'bookstore', 'bookstore');
    const inbound = store.get(TypeUrl.Listener)!.get('inbound-listener')!;
    assert.equal(inbound.address.socket_address.port_value, 15003);
    assert.deepEqual(inbound.listener_filters.map((f: Decoded) => f.name), [
      'envoy.filters.listener.tls_inspector',
      'envoy.filters.listener.original_dst',
    ]);
    const chain = inbound.filter_chains.find((c: Decoded) => c.name === 'inbound_bookstore/bookstore-v1|14001_http');
    assert.deepEqual(chain.filter_chain_match.server_names, ['bookstore-v1.bookstore.svc.cluster.local']);
    assert.equal(chain.filter_chain_match.destination_port.value, 14001);
    const tls = chain.transport_socket.typed_config;
    assert.equal(tls.require_client_certificate.value, true);
    assert.equal(tls.common_tls_context.validation_context_sds_secret_config.name, 'root-cert-for-mtls-inbound:bookstore/bookstore');
    const rbac = chain.filters[0].typed_config;
    assert.equal(rbac.stat_prefix, 'l4_rbac');
    const principals = Object.values(rbac.rules.policies as Record<string, Decoded>).flatMap((p) =>
      p.principals.map((x: Decoded) => x.authenticated.principal_name.exact),
    );
    assert.deepEqual(principals, ['spiffe://cluster.local/ns/bookbuyer/sa/bookbuyer']);
    const matches = inbound.filter_chains.map((c: Decoded) => JSON.stringify(c.filter_chain_match));
    assert.equal(new Set(matches).size, matches.length, 'filter chain matches unique');
  });

  it('has one inbound route per HTTPRouteGroup match with per-route RBAC', () => {
    const store = generateConfig(bookstoreMesh(), 'bookstore', 'bookstore');
    const rds = store.get(TypeUrl.RouteConfiguration)!.get('rds-inbound.14001')!;
    const vh = rds.virtual_hosts.find((v: Decoded) => v.name === 'inbound_virtual-host|bookstore-v1.bookstore.svc.cluster.local');
    const byName = new Map<string, Decoded>(vh.routes.map((r: Decoded) => [r.name, r]));
    assert.deepEqual([...byName.keys()].sort(), [
      'bookstore/bookstore-service-routes/books-bought',
      'bookstore/bookstore-service-routes/buy-a-book',
    ]);
    const bought = byName.get('bookstore/bookstore-service-routes/books-bought')!;
    assert.equal(bought.match.safe_regex.regex, '/books-bought');
    assert.deepEqual(
      bought.match.headers.map((h: Decoded) => [h.name, h.string_match.safe_regex.regex]),
      [
        [':method', '^(GET)$'],
        ['client-app', 'bookbuyer'],
        ['user-agent', '.*-http-client/*.*'],
      ],
    );
    assert.equal(bought.route.cluster, 'bookstore/bookstore-v1|14001|local');
    const perRoute = bought.typed_per_filter_config['envoy.filters.http.rbac'];
    const policy = Object.values(perRoute.rbac.rules.policies as Record<string, Decoded>)[0];
    assert.equal(policy.principals[0].authenticated.principal_name.exact, 'spiffe://cluster.local/ns/bookbuyer/sa/bookbuyer');
  });

  it('sends bookwarehouse → mysql through tcp_proxy to the headless service pod IPs', () => {
    const wh = generateConfig(bookstoreMesh(), 'bookwarehouse', 'bookwarehouse');
    const out = wh.get(TypeUrl.Listener)!.get('outbound-listener')!;
    const chain = out.filter_chains.find((c: Decoded) => c.name === 'outbound_bookwarehouse/mysql|3306_tcp');
    assert.equal(chain.filter_chain_match.destination_port.value, 3306);
    assert.deepEqual(chain.filter_chain_match.prefix_ranges.map((r: Decoded) => r.address_prefix), ['10.244.3.20']);
    assert.equal(chain.filters[0].typed_config.cluster, 'bookwarehouse/mysql|3306');
    const mysql = generateConfig(bookstoreMesh(), 'mysql', 'bookwarehouse');
    const inChain = mysql.get(TypeUrl.Listener)!.get('inbound-listener')!.filter_chains[0];
    assert.equal(inChain.filters.at(-1).typed_config.cluster, 'bookwarehouse/mysql|3306|local');
    assert.deepEqual(names(mysql, TypeUrl.Cluster), ['bookwarehouse/mysql|3306|local', 'envoy-metrics-cluster']);
  });

  it('gives bookthief nothing to reach in SMI mode, and everything in permissive mode', () => {
    const thief = generateConfig(bookstoreMesh(), 'bookthief', 'bookthief');
    assert.deepEqual(names(thief, TypeUrl.Cluster), ['envoy-metrics-cluster']);
    assert.deepEqual(names(thief, TypeUrl.Listener), []);
    assert.deepEqual(names(thief, TypeUrl.RouteConfiguration), []);
    const open = generateConfig(bookstoreMesh({ permissive: true }), 'bookthief', 'bookthief');
    assert.ok(names(open, TypeUrl.Cluster).includes('bookstore/bookstore|14001'));
    assert.ok(names(open, TypeUrl.Cluster).includes('bookwarehouse/mysql|3306'));
    assert.ok(names(open, TypeUrl.RouteConfiguration).includes('rds-outbound.14001'));
  });

  it('leaves a weight-0 backend out and routes 100 % to the other', () => {
    const cfg = generateConfig(bookstoreMesh({ split: [100, 0] }), 'bookbuyer', 'bookbuyer');
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001')!;
    const vh = rds.virtual_hosts.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore.bookstore.svc.cluster.local');
    assert.deepEqual(vh.routes[0].route.weighted_clusters.clusters.map((c: Decoded) => c.name), ['bookstore/bookstore-v1|14001']);
    assert.equal(vh.routes[0].route.weighted_clusters.total_weight, undefined);
    const v2 = rds.virtual_hosts.find((v: Decoded) => v.name === 'outbound_virtual-host|bookstore-v2.bookstore.svc.cluster.local');
    assert.equal(v2.routes[0].route.cluster, 'bookstore/bookstore-v2|14001', 'a backend stays reachable by its own name');
  });

  it('adds passthrough-outbound and a default chain when egress is on', () => {
    const objects = bookstoreMesh().filter((o) => o.kind !== 'MeshConfig');
    objects.push(k8s.meshConfig(false, true));
    const thief = generateConfig(objects, 'bookthief', 'bookthief');
    const cluster = thief.get(TypeUrl.Cluster)!.get('passthrough-outbound')!;
    assert.equal(cluster.type, 'ORIGINAL_DST');
    assert.equal(cluster.lb_policy, 'CLUSTER_PROVIDED');
    const out = thief.get(TypeUrl.Listener)!.get('outbound-listener')!;
    assert.equal(out.default_filter_chain.filters[0].typed_config.cluster, 'passthrough-outbound');
  });

  it('matches an HTTP port alone when a destination on it has no ClusterIP', () => {
    const objects = bookstoreMesh().map((o) =>
      o.kind === 'Service' && o.metadata.name === 'bookstore-v1' ? { ...o, spec: { ...(o.spec as object), clusterIP: undefined } } : o,
    );
    const cfg = generateConfig(objects, 'bookbuyer', 'bookbuyer');
    const chain = cfg.get(TypeUrl.Listener)!.get('outbound-listener')!.filter_chains.find((c: Decoded) => c.name === 'outbound_http_14001');
    assert.equal(chain.filter_chain_match.destination_port.value, 14001);
    assert.equal(chain.filter_chain_match.prefix_ranges, undefined);
    const rds = cfg.get(TypeUrl.RouteConfiguration)!.get('rds-outbound.14001')!;
    assert.ok(rds.virtual_hosts.some((v: Decoded) => v.domains.includes('bookstore-v1.bookstore.svc.cluster.local')));
  });
});


describe('resources shared between proxies (one object for identities that get the same thing)', () => {
  const snapshotOf = (permissive: boolean) => new GenerationContext(buildMeshSnapshot(memoryStore(bookstoreMesh({ permissive })), { meshName: 'osm', generation: 1 }).snapshot);
  const proxyOf = (ns: string, sa: string, n: number) => proxyProfile(parseCommonName(`a0000000-0000-4000-8000-00000000000${n}.sidecar.${sa}.${ns}.cluster.local`));
  const certs = { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' };
  const get = (r: ReturnType<typeof generateProxyResources>, type: TypeUrl, name: string) => r.get(type)!.find((x) => x.name === name)?.resource;

  it('permissive: two identities of one namespace share the outbound listener and route configuration objects', () => {
    const mesh = snapshotOf(true);
    const v1 = generateProxyResources(mesh, proxyOf('bookstore', 'bookstore', 1), certs);
    const v2 = generateProxyResources(mesh, proxyOf('bookstore', 'bookstore-v2', 2), certs);
    assert.ok(get(v1, TypeUrl.Listener, 'outbound-listener'));
    assert.equal(get(v1, TypeUrl.Listener, 'outbound-listener'), get(v2, TypeUrl.Listener, 'outbound-listener'));
    assert.equal(get(v1, TypeUrl.RouteConfiguration, 'rds-outbound.14001'), get(v2, TypeUrl.RouteConfiguration, 'rds-outbound.14001'));
    // Another namespace sees other short host names: its own route configuration.
    const buyer = generateProxyResources(mesh, proxyOf('bookbuyer', 'bookbuyer', 3), certs);
    assert.notEqual(get(buyer, TypeUrl.RouteConfiguration, 'rds-outbound.14001'), get(v1, TypeUrl.RouteConfiguration, 'rds-outbound.14001'));
    assert.equal(get(buyer, TypeUrl.Listener, 'outbound-listener'), get(v1, TypeUrl.Listener, 'outbound-listener'));
  });

  it('SMI: identities that may reach different services get different objects with their own contents', () => {
    const mesh = snapshotOf(false);
    const buyer = generateProxyResources(mesh, proxyOf('bookbuyer', 'bookbuyer', 1), certs);
    const thief = generateProxyResources(mesh, proxyOf('bookthief', 'bookthief', 2), certs);
    assert.ok(get(buyer, TypeUrl.Listener, 'outbound-listener'), 'bookbuyer may reach bookstore');
    assert.equal(get(thief, TypeUrl.Listener, 'outbound-listener'), undefined, 'bookthief may reach nothing');
  });

  it('SMI: identities allowed different ports of one service (same target port) do not share a view', () => {
    const objects = [
      k8s.namespace('ns1'),
      k8s.meshConfig(false),
      k8s.serviceAccount('ns1', 'a'),
      k8s.serviceAccount('ns1', 'b'),
      k8s.serviceAccount('ns1', 'db'),
      k8s.service('ns1', 'db', { app: 'db' }, [{ port: 80, name: 'tcp-a', appProtocol: 'tcp', targetPort: 8080 }, { port: 81, name: 'tcp-b', appProtocol: 'tcp', targetPort: 8080 }], '10.96.5.5'),
      k8s.pod('ns1', 'db-1', 'db', { app: 'db' }, '10.244.5.5', [8080]),
      k8s.tcpRoute('ns1', 'r80', [80]),
      k8s.tcpRoute('ns1', 'r81', [81]),
      k8s.trafficTarget('ns1', 'a-db', 'db', [{ ns: 'ns1', sa: 'a' }], [{ kind: 'TCPRoute', name: 'r80' }]),
      k8s.trafficTarget('ns1', 'b-db', 'db', [{ ns: 'ns1', sa: 'b' }], [{ kind: 'TCPRoute', name: 'r81' }]),
    ];
    const mesh = new GenerationContext(buildMeshSnapshot(memoryStore(objects), { meshName: 'osm', generation: 1 }).snapshot);
    const ports = (sa: string, n: number) => {
      const listener = get(generateProxyResources(mesh, proxyOf('ns1', sa, n), certs), TypeUrl.Listener, 'outbound-listener') as Decoded;
      return listener.filter_chains.map((c: Decoded) => c.filter_chain_match.destination_port.value);
    };
    // a first: b must not inherit a's view (port 80).
    assert.deepEqual(ports('a', 1), [80]);
    assert.deepEqual(ports('b', 2), [81]);
  });
});

describe('shared resources across snapshots', () => {
  const SOURCE = 'test';
  const db = (ip: string) => [
    k8s.service('bookwarehouse', 'db', { app: 'db' }, [{ port: 5432, name: 'tcp-db' }], 'None'),
    k8s.pod('bookwarehouse', 'db-0', 'bookwarehouse', { app: 'db' }, ip, [5432]),
  ];
  const withCiphers = (o: KubeObject): KubeObject =>
    o.kind === 'MeshConfig' ? { ...o, spec: { ...(o.spec as object), sidecar: { cipherSuites: ['ECDHE-ECDSA-AES256-GCM-SHA384'] } } } : o;
  const withEgress = (o: KubeObject): KubeObject => (o.kind === 'MeshConfig' ? k8s.meshConfig(true, true) : o);
  const bookbuyer = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.bookbuyer.bookbuyer.cluster.local'));
  const outbound = (mesh: GenerationContext) =>
    generateProxyResources(mesh, bookbuyer, { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' }).get(TypeUrl.Listener)!.find((l) => l.name === 'outbound-listener')!.resource as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

  it('is the same object after a change it does not read, and follows headless endpoints and egress', () => {
    const store = new ObjectStore();
    store.replaceAll(SOURCE, [...bookstoreMesh({ permissive: true }), ...db('10.1.0.5')]);
    const builder = new MeshSnapshotBuilder();
    // One context per MeshSnapshot generation, each made with the one before (as the controller does).
    const first = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 1 }).snapshot);
    const l1 = outbound(first);
    assert.ok(JSON.stringify(l1).includes('10.1.0.5'), 'the headless destination is matched by its pod IP');
    // A MeshConfig change of TLS settings: nothing the outbound listener reads.
    store.replaceAll(SOURCE, [...bookstoreMesh({ permissive: true }).map(withCiphers), ...db('10.1.0.5')]);
    const second = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 2, previous: first.snapshot }).snapshot, first);
    assert.equal(outbound(second), l1, 'one object: checked and encoded once');
    const upstream = (mesh: GenerationContext) =>
      generateProxyResources(mesh, bookbuyer, { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' }).get(TypeUrl.Cluster)!.find((c) => c.name === 'bookstore/bookstore-v1|14001')!;
    assert.equal(upstream(first).resource, upstream(first).resource, 'an upstream cluster is one object in a generation');
    assert.notEqual(upstream(second).resource, upstream(first).resource, 'its TLS context has the new cipher suites');
    assert.match(JSON.stringify(upstream(second).resource), /ECDHE-ECDSA-AES256-GCM-SHA384/);
    // The headless service's pod moves: its chain matches the new IP.
    store.replaceAll(SOURCE, [...bookstoreMesh({ permissive: true }).map(withCiphers), ...db('10.1.0.6')]);
    const third = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 3, previous: second.snapshot }).snapshot, second);
    const l3 = outbound(third);
    assert.ok(JSON.stringify(l3).includes('10.1.0.6') && !JSON.stringify(l3).includes('10.1.0.5'), 'the new pod IP, not the old');
    // Egress on: unmatched traffic passes through.
    store.replaceAll(SOURCE, [...bookstoreMesh({ permissive: true }).map(withEgress), ...db('10.1.0.6')]);
    const fourth = new GenerationContext(builder.build(store, { meshName: 'osm', generation: 4, previous: third.snapshot }).snapshot, third);
    assert.equal(outbound(fourth).default_filter_chain?.name, 'outbound-egress-passthrough');
    assert.equal(l3.default_filter_chain, undefined);
  });
});
