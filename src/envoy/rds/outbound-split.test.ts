import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeAny, encodeAny } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import { k8s } from '../../../test/fixtures/mesh.js';
import type { Decoded } from '../../../test/helpers/generate-config.js';
import { MeshSnapshotBuilder } from '../../catalog/build-snapshot.js';
import { parseCommonName } from '../../proxy/types.js';
import { ObjectStore } from '../../store/object-store.js';
import type { KubeObject } from '../../store/objects.js';
import { GenerationContext, proxyProfile, type ProxyProfile } from '../context.js';
import { generateProxyResources } from '../generate.js';
import { filterChainLeaves } from '../lds/filter-chain-match.js';
// A namespace import: these tests name what the split adds only through it, so that on a tree
// without the split they fail by their assertions rather than at link time.
import * as rds from './rds.js';

/** More HTTP destinations on port 8080 than the split threshold (128). */
const SERVICES = 200;
const SOURCE = 'test';
const CERTS = { certChainPem: 'c', privateKeyPem: 'k', caPem: 'r' };

const svcName = (i: number) => `svc-${String(i).padStart(3, '0')}`;
const clusterIp = (i: number) => `10.97.${i >> 8}.${(i & 255) + 1}`;

/**
 * A permissive mesh: `count` HTTP services on port 8080 in namespace `shop` (ClusterIP
 * {@link clusterIp}), svc-000 with a pod; a TCP service `db` on 8080 too; two HTTP services on
 * 9090; a TrafficSplit of `svc-apex` (8080) to svc-001/svc-002 with `weights`; `client/client`.
 */
function mesh(count = SERVICES, options: { weights?: [number, number]; extra?: KubeObject[]; noClusterIp?: boolean } = {}): KubeObject[] {
  const objects: KubeObject[] = [
    k8s.meshConfig(true),
    k8s.namespace('shop'),
    k8s.namespace('client'),
    k8s.serviceAccount('client', 'client'),
    k8s.serviceAccount('shop', 'shop'),
    k8s.pod('shop', 'svc-000-0', 'shop', { app: svcName(0) }, '10.1.0.10', [8080]),
    k8s.service('shop', 'db', { app: 'db' }, [{ port: 8080, name: 'tcp-db' }], '10.98.0.1'),
    k8s.service('shop', 'grpc-a', { app: 'grpc-a' }, [{ port: 9090, name: 'http' }], '10.98.1.1'),
    k8s.service('shop', 'grpc-b', { app: 'grpc-b' }, [{ port: 9090, name: 'http' }], '10.98.1.2'),
    k8s.service('shop', 'svc-apex', { app: 'svc-apex' }, [{ port: 8080, name: 'http' }], '10.98.2.1'),
    k8s.trafficSplit('shop', 'apex', 'svc-apex', [
      { service: svcName(1), weight: options.weights?.[0] ?? 50 },
      { service: svcName(2), weight: options.weights?.[1] ?? 50 },
    ]),
    ...(options.extra ?? []),
  ];
  for (let i = 0; i < count; i++) {
    const ip = options.noClusterIp && i === count - 1 ? undefined : clusterIp(i);
    objects.push(k8s.service('shop', svcName(i), { app: svcName(i) }, [{ port: 8080, name: 'http' }], ip as string));
  }
  return objects;
}

const CLIENT = proxyProfile(parseCommonName('a0000000-0000-4000-8000-000000000001.sidecar.client.client.cluster.local'));
const GRPC_CLIENT: ProxyProfile = { ...CLIENT, clientType: 'grpc' };

/** A proxy's resources of `type`: name → the generated object, its encoding and its decoding. */
function resources(context: GenerationContext, profile: ProxyProfile, type: TypeUrl): Map<string, { object: object; bytes: Buffer; decoded: Decoded }> {
  const out = new Map<string, { object: object; bytes: Buffer; decoded: Decoded }>();
  for (const r of generateProxyResources(context, profile, CERTS).get(type) ?? []) {
    const any = encodeAny(type, r.resource);
    out.set(r.name, { object: r.resource, bytes: Buffer.from(any.value), decoded: decodeAny(any) });
  }
  return out;
}

/** A store, its builder and the newest context; `next` replaces the objects and makes the next context with the one before. */
function generations(objects: KubeObject[]) {
  const store = new ObjectStore();
  const builder = new MeshSnapshotBuilder();
  store.replaceAll(SOURCE, objects);
  let generation = 1;
  let snapshot = builder.build(store, { meshName: 'osm', generation }).snapshot;
  let context = new GenerationContext(snapshot);
  return {
    get context() {
      return context;
    },
    next(changed: KubeObject[]): GenerationContext {
      store.replaceAll(SOURCE, changed);
      snapshot = builder.build(store, { meshName: 'osm', generation: ++generation, previous: snapshot }).snapshot;
      context = new GenerationContext(snapshot, context);
      return context;
    },
  };
}

const outboundRoutes = (m: Map<string, unknown>) => [...m.keys()].filter((n) => n.startsWith('rds-outbound.')).sort();
const vhostName = (name: string) => `outbound_virtual-host|${name}.shop.svc.cluster.local`;
/** The outbound route configurations holding a virtual host for service `name`. */
function holders(routes: Map<string, { decoded: Decoded }>, name: string): string[] {
  return outboundRoutes(routes).filter((n) => routes.get(n)!.decoded.virtual_hosts.some((vh: Decoded) => vh.name === vhostName(name)));
}
const chainsOf = (listeners: Map<string, { decoded: Decoded }>): Decoded[] => listeners.get('outbound-listener')!.decoded.filter_chains;
/** The chain named `name`. @throws AssertionError when there is none. */
function chainNamed(chains: Decoded[], name: string): Decoded {
  const chain = chains.find((c) => c.name === name);
  assert.ok(chain, `a chain ${name}`);
  return chain;
}
const ipsOf = (chain: Decoded): string[] => (chain.filter_chain_match.prefix_ranges ?? []).map((r: Decoded) => r.address_prefix);
const rdsOf = (chain: Decoded): string | undefined => chain.filters[0].typed_config.rds?.route_config_name;

describe('outbound routes split into buckets on a port with many HTTP destinations', () => {
  const { context } = generations(mesh());
  const routes = resources(context, CLIENT, TypeUrl.RouteConfiguration);
  const listeners = resources(context, CLIENT, TypeUrl.Listener);

  it('has one rds-outbound.8080.<b> per non-empty bucket, and keeps rds-outbound.9090 (2 destinations) whole', () => {
    const names = outboundRoutes(routes);
    assert.ok(names.includes('rds-outbound.9090'));
    assert.ok(!names.includes('rds-outbound.8080'), 'no whole route configuration for the split port');
    const buckets = names.filter((n) => n.startsWith('rds-outbound.8080.'));
    assert.ok(buckets.length > 1, `several buckets: ${buckets.join(', ')}`);
    for (const n of buckets) assert.match(n, /^rds-outbound\.8080\.\d+$/);
    assert.ok(buckets.length <= rds.OUTBOUND_ROUTE_SPLIT.buckets);
    assert.ok(SERVICES > rds.OUTBOUND_ROUTE_SPLIT.threshold, 'the mesh is above the threshold');
  });

  it('puts each service\'s virtual host in exactly one bucket, the one its name hashes to', () => {
    for (let i = 0; i < SERVICES; i++) {
      const bucket = rds.outboundRouteBucket({ namespace: 'shop', name: svcName(i) }, rds.OUTBOUND_ROUTE_SPLIT.buckets);
      assert.deepEqual(holders(routes, svcName(i)), [`rds-outbound.8080.${bucket}`], svcName(i));
    }
    // The split apex is a service of the port like the others, its route weighted.
    const [apex] = holders(routes, 'svc-apex');
    const vh = routes.get(apex)!.decoded.virtual_hosts.find((v: Decoded) => v.name === vhostName('svc-apex'));
    assert.deepEqual(vh.routes[0].route.weighted_clusters.clusters.map((c: Decoded) => [c.name, c.weight.value]), [
      ['shop/svc-001|8080', 50],
      ['shop/svc-002|8080', 50],
    ]);
    assert.deepEqual(holders(routes, 'grpc-a'), ['rds-outbound.9090']);
  });

  it('matches each bucket\'s ClusterIPs (and only those) with its own chain outbound_http_8080_<b> naming that bucket\'s RDS', () => {
    const chains = chainsOf(listeners);
    const byIp = new Map<string, Decoded>();
    for (const c of chains) for (const ip of ipsOf(c)) byIp.set(`${ip}:${c.filter_chain_match.destination_port.value}`, c);
    for (let i = 0; i < SERVICES; i++) {
      const chain = byIp.get(`${clusterIp(i)}:8080`);
      assert.ok(chain, `a chain matches ${clusterIp(i)}:8080`);
      const [holder] = holders(routes, svcName(i));
      assert.equal(rdsOf(chain), holder, svcName(i));
      assert.equal(chain.name, `outbound_http_8080_${holder.split('.').at(-1)}`);
      assert.equal(chain.filters[0].typed_config.stat_prefix, 'outbound_http_8080', 'the port\'s statistics, as without buckets');
    }
    // Every bucket chain matches exactly the ClusterIPs of the services whose virtual hosts it routes to.
    for (const chain of chains.filter((c) => c.name.startsWith('outbound_http_8080_'))) {
      const rc = routes.get(rdsOf(chain)!)!.decoded;
      const expected = rc.virtual_hosts.map((vh: Decoded) => vh.domains.find((d: string) => /^10\.9[78]\.\d+\.\d+$/.test(d))).sort();
      assert.deepEqual(ipsOf(chain), expected, chain.name);
    }
    const tcp = chainNamed(chains, 'outbound_shop/db|8080_tcp');
    assert.deepEqual(ipsOf(tcp), ['10.98.0.1'], 'the TCP service on the split port keeps its own chain');
    const grpc = chainNamed(chains, 'outbound_http_9090');
    assert.deepEqual([ipsOf(grpc), rdsOf(grpc)], [['10.98.1.1', '10.98.1.2'], 'rds-outbound.9090']);
    const leaves = chains.flatMap((c) => filterChainLeaves(c.filter_chain_match));
    assert.equal(new Set(leaves).size, leaves.length, 'no two chains share a match');
  });

  it('matches a headless service on the split port by its pods\' IPs in its bucket\'s chain, and one without endpoints by none', () => {
    const headless = [
      k8s.service('shop', 'svc-headless', { app: svcName(0) }, [{ port: 8080, name: 'http' }], 'None'),
      k8s.service('shop', 'svc-empty', { app: 'nothing' }, [{ port: 8080, name: 'http' }], 'None'),
    ];
    const g = generations(mesh(SERVICES, { extra: headless }));
    const withHeadless = resources(g.context, CLIENT, TypeUrl.RouteConfiguration);
    const chains = chainsOf(resources(g.context, CLIENT, TypeUrl.Listener));
    const [holder] = holders(withHeadless, 'svc-headless');
    assert.deepEqual(chains.filter((c) => ipsOf(c).includes('10.1.0.10')).map(rdsOf), [holder]);
    assert.equal(holders(withHeadless, 'svc-empty').length, 1, 'its virtual host is routed by name');
    assert.ok(chains.every((c) => c.filter_chain_match.destination_port.value !== 8080 || ipsOf(c).length > 0), 'no chain on 8080 matches the port alone');
  });

  it('gives a proxyless client\'s listener of a split service that service\'s bucket', () => {
    const grpcListeners = resources(context, GRPC_CLIENT, TypeUrl.Listener);
    const grpcRoutes = resources(context, GRPC_CLIENT, TypeUrl.RouteConfiguration);
    const name = svcName(7);
    const [holder] = holders(routes, name);
    const listener = grpcListeners.get(`${name}.shop.svc.cluster.local:8080`)!.decoded;
    assert.equal(listener.api_listener.api_listener.rds.route_config_name, holder);
    assert.ok(grpcRoutes.get(holder)!.decoded.virtual_hosts.some((vh: Decoded) => vh.domains.includes(`${name}.shop.svc.cluster.local:8080`)));
  });
});

describe('a change to one service on a split port', () => {
  const changedRoutes = (before: Map<string, { bytes: Buffer }>, after: Map<string, { bytes: Buffer }>) =>
    outboundRoutes(after).filter((n) => !before.get(n)?.bytes.equals(after.get(n)!.bytes));

  it('a new service changes exactly one route configuration (its bucket) and the listener; the other buckets stay the same objects', () => {
    const g = generations(mesh());
    const routes1 = resources(g.context, CLIENT, TypeUrl.RouteConfiguration);
    const listeners1 = resources(g.context, CLIENT, TypeUrl.Listener);
    const added = k8s.service('shop', 'svc-new', { app: 'svc-new' }, [{ port: 8080, name: 'http' }], '10.99.0.1');
    g.next(mesh(SERVICES, { extra: [added] }));
    const routes2 = resources(g.context, CLIENT, TypeUrl.RouteConfiguration);
    const listeners2 = resources(g.context, CLIENT, TypeUrl.Listener);
    const [holder] = holders(routes2, 'svc-new');
    assert.deepEqual(changedRoutes(routes1, routes2), [holder]);
    assert.deepEqual(outboundRoutes(routes1).filter((n) => !routes2.has(n)), [], 'none removed');
    assert.ok(!listeners1.get('outbound-listener')!.bytes.equals(listeners2.get('outbound-listener')!.bytes), 'the listener matches the new ClusterIP');
    assert.deepEqual(chainsOf(listeners2).filter((c) => ipsOf(c).includes('10.99.0.1')).map(rdsOf), [holder]);
    for (const n of outboundRoutes(routes2)) {
      if (n !== holder) assert.equal(routes2.get(n)!.object, routes1.get(n)!.object, `${n} carried over`);
    }
  });

  it('a TrafficSplit weight change changes exactly the apex\'s bucket, and not the listener', () => {
    const g = generations(mesh());
    const routes1 = resources(g.context, CLIENT, TypeUrl.RouteConfiguration);
    const listeners1 = resources(g.context, CLIENT, TypeUrl.Listener);
    g.next(mesh(SERVICES, { weights: [80, 20] }));
    const routes2 = resources(g.context, CLIENT, TypeUrl.RouteConfiguration);
    const changed = changedRoutes(routes1, routes2);
    assert.deepEqual(changed, holders(routes2, 'svc-apex'));
    const hosts = routes2.get(changed[0])!.decoded.virtual_hosts.length;
    assert.ok(hosts < SERVICES / 4, `the change resends ${hosts} of the port's ${SERVICES + 1} virtual hosts`);
    assert.ok(listeners1.get('outbound-listener')!.bytes.equals(resources(g.context, CLIENT, TypeUrl.Listener).get('outbound-listener')!.bytes));
  });
});

describe('ports that keep one outbound route configuration', () => {
  it(`below the threshold: rds-outbound.8080 and outbound_http_8080 (OSM's shape), split one service above it`, () => {
    // svc-apex is the +1: threshold − 1 numbered services and the apex are exactly the threshold.
    const at = resources(generations(mesh(rds.OUTBOUND_ROUTE_SPLIT.threshold - 1)).context, CLIENT, TypeUrl.RouteConfiguration);
    assert.deepEqual(outboundRoutes(at), ['rds-outbound.8080', 'rds-outbound.9090']);
    const listener = resources(generations(mesh(rds.OUTBOUND_ROUTE_SPLIT.threshold - 1)).context, CLIENT, TypeUrl.Listener);
    assert.deepEqual(chainsOf(listener).map((c) => c.name).filter((n) => n.startsWith('outbound_http_')), ['outbound_http_8080', 'outbound_http_9090']);
    const above = resources(generations(mesh(rds.OUTBOUND_ROUTE_SPLIT.threshold)).context, CLIENT, TypeUrl.RouteConfiguration);
    assert.ok(!outboundRoutes(above).includes('rds-outbound.8080'));
  });

  it('a port with a destination without a ClusterIP: one route configuration, a chain matching the port alone', () => {
    const { context } = generations(mesh(SERVICES, { noClusterIp: true }));
    const routes = resources(context, CLIENT, TypeUrl.RouteConfiguration);
    assert.deepEqual(outboundRoutes(routes), ['rds-outbound.8080', 'rds-outbound.9090']);
    assert.equal(routes.get('rds-outbound.8080')!.decoded.virtual_hosts.length, SERVICES + 1);
    const chain = chainNamed(chainsOf(resources(context, CLIENT, TypeUrl.Listener)), 'outbound_http_8080');
    assert.equal(chain.filter_chain_match.prefix_ranges, undefined);
  });
});

describe('egress chains beside a split port', () => {
  it('an Egress claiming a bucket\'s ClusterIP loses that range; no two chains share a match', () => {
    const egress = k8s.egress('client', 'out', { sources: [{ ns: 'client', sa: 'client' }], ipAddresses: [`${clusterIp(5)}/32`, '192.0.2.0/24'], ports: [{ number: 8080, protocol: 'tcp' }] });
    const { context } = generations([...mesh(), egress]);
    const chains = chainsOf(resources(context, CLIENT, TypeUrl.Listener));
    const leaves = chains.flatMap((c) => filterChainLeaves(c.filter_chain_match));
    assert.equal(new Set(leaves).size, leaves.length, 'no two chains share a match');
    const eg = chainNamed(chains, 'egress-tcp.8080');
    assert.deepEqual(ipsOf(eg), ['192.0.2.0'], 'the mesh chain keeps the ClusterIP');
    assert.ok(chains.some((c) => c.name.startsWith('outbound_http_8080_') && ipsOf(c).includes(clusterIp(5))));
  });
});

describe('an address shared by HTTP destinations of different buckets on a split port', () => {
  /** Two service names on 8080 whose buckets differ. */
  function twoBuckets(prefix: string): [string, string] {
    const bucket = (name: string) => rds.outboundRouteBucket({ namespace: 'shop', name }, rds.OUTBOUND_ROUTE_SPLIT.buckets);
    let other = `${prefix}-b`;
    for (let i = 0; bucket(other) === bucket(`${prefix}-a`); i++) other = `${prefix}-b${i}`;
    return [`${prefix}-a`, other];
  }

  /**
   * Each of `names` dialled at `ip`:8080 by its host name: the chain of the listener matching that
   * address (its exact range, else one matching the port alone) names a route configuration with
   * the service's virtual host, as on a port below the threshold (one rds-outbound.8080 routing by Host).
   */
  function assertRoutedByHost(objects: KubeObject[], ip: string, names: readonly string[]): void {
    const { context } = generations(objects);
    const routes = resources(context, CLIENT, TypeUrl.RouteConfiguration);
    const chains = chainsOf(resources(context, CLIENT, TypeUrl.Listener)).filter((c) => c.filter_chain_match.destination_port?.value === 8080);
    const chain = chains.find((c) => ipsOf(c).includes(ip)) ?? chains.find((c) => ipsOf(c).length === 0);
    assert.ok(chain, `a chain matches ${ip}:8080`);
    for (const name of names) {
      assert.ok(
        routes.get(rdsOf(chain)!)!.decoded.virtual_hosts.some((vh: Decoded) => vh.name === vhostName(name)),
        `${name} dialled at ${ip}:8080 reaches ${chain.name} → ${rdsOf(chain)}, which has its virtual host`,
      );
    }
  }

  it('two headless services selecting the same pod are both routed by Host, below and above the threshold', () => {
    const names = twoBuckets('hl');
    const extra = [...names.map((n) => k8s.service('shop', n, { app: 'hl' }, [{ port: 8080, name: 'http' }], 'None')), k8s.pod('shop', 'hl-0', 'shop', { app: 'hl' }, '10.1.0.50', [8080])];
    assertRoutedByHost(mesh(10, { extra }), '10.1.0.50', names);
    assertRoutedByHost(mesh(SERVICES, { extra }), '10.1.0.50', names);
  });

  it('two services with the same ClusterIP are both routed by Host, below and above the threshold', () => {
    const names = twoBuckets('dup');
    const extra = names.map((n) => k8s.service('shop', n, { app: n }, [{ port: 8080, name: 'http' }], '10.99.0.1'));
    assertRoutedByHost(mesh(10, { extra }), '10.99.0.1', names);
    assertRoutedByHost(mesh(SERVICES, { extra }), '10.99.0.1', names);
  });
});
