import * as grpc from '@grpc/grpc-js';
import { Registry } from 'prom-client';
import { encodeAny } from '../../src/api/codec.js';
import { TypeUrl } from '../../src/api/type-urls.js';
import { parseCommonName, type Proxy } from '../../src/proxy/types.js';
import { SnapshotCache, ResourceInterner, buildProxySnapshot, type NamedResource } from '../../src/xds/cache/snapshot-cache.js';
import type { ProxySnapshot } from '../../src/xds/cache/types.js';
import { AdsServer, authenticateFromNodeId, type AdsServerOptions, type NackDetail, type TypeStreamInfo } from '../../src/xds/server/ads-server.js';
import { AdsTestClient, TEST_NODE_ID } from './ads-client.js';

/** The proxy of {@link TEST_NODE_ID}, the node every test stream says it is. */
export const PROXY: Proxy = parseCommonName(TEST_NODE_ID);

const { Cluster: CDS, ClusterLoadAssignment: EDS, Listener: LDS, RouteConfiguration: RDS, Secret: SDS } = TypeUrl;

/** Content of a test snapshot: resource name → a number that changes the resource's bytes. */
export interface Spec {
  clusters?: Record<string, number>;
  endpoints?: Record<string, number>;
  listeners?: Record<string, number>;
  routes?: Record<string, number>;
  secrets?: Record<string, number>;
}

/**
 * A proxy snapshot of small but real (encodable) resources, as `spec` says. With `shared`, a type
 * it names has those of its resources that `shared` picks in a shared layer (as the controller's
 * snapshots have, `buildProxySnapshot`'s `shared`), the others as the proxy's own.
 */
export function snapshot(spec: Spec, shared?: (typeUrl: TypeUrl, name: string) => boolean): ProxySnapshot {
  const make = (typeUrl: string, m: Record<string, number> | undefined, build: (name: string, n: number) => object): NamedResource[] =>
    Object.entries(m ?? {}).map(([name, n]) => ({ name, resource: encodeAny(typeUrl, build(name, n)) }));
  const all = new Map([
      [CDS, make(CDS, spec.clusters, (name, n) => ({ name, connect_timeout: { seconds: n } }))],
      [
        EDS,
        make(EDS, spec.endpoints, (cluster_name, n) => ({
          cluster_name,
          endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: `10.0.0.${n}`, port_value: 80 } } } }] }],
        })),
      ],
      [LDS, make(LDS, spec.listeners, (name, n) => ({ name, address: { socket_address: { address: '0.0.0.0', port_value: 15000 + n } } }))],
      [RDS, make(RDS, spec.routes, (name, n) => ({ name, virtual_hosts: [{ name: `vh${n}`, domains: ['*'] }] }))],
      [SDS, make(SDS, spec.secrets, (name, n) => ({ name, validation_context: { trust_chain_verification: n } }))],
  ] as const);
  if (!shared) return buildProxySnapshot(all, new ResourceInterner());
  const layers = new Map([...all].map(([type, list]) => [type, list.filter((r) => shared(type, r.name))] as const));
  const own = new Map([...all].map(([type, list]) => [type, list.filter((r) => !layers.get(type)!.includes(r))] as const));
  return buildProxySnapshot(own, new ResourceInterner(), layers);
}

/**
 * A plaintext ADS server on a snapshot cache, what its hooks saw, a client channel to it, and
 * the test streams opened on it (of type `S`, opened with arguments `A`).
 */
export interface AdsHarness<S, A extends unknown[]> {
  cache: SnapshotCache;
  server: AdsServer;
  client: AdsTestClient;
  /** The server's port on 127.0.0.1. */
  port: number;
  registry: Registry;
  /** `open <uuid> <streamId>` and `close <uuid> <streamId>`, in the order of the hooks. */
  events: string[];
  acks: Array<{ typeUrl: string; version: string }>;
  nacks: Array<{ typeUrl: string; version: string; detail: NackDetail }>;
  /** The id of the first stream onStreamClose was called for. */
  closed: Promise<number>;
  /** Every stream {@link open} opened, in order. */
  streams: S[];
  /** Opens a test stream on {@link client}. */
  open(...args: A): S;
  /** Sets {@link PROXY}'s snapshot to `spec`'s. */
  set(spec: Spec): ProxySnapshot;
  /** The debug view of `typeUrl` on the server's first stream. */
  typeInfo(typeUrl: string): TypeStreamInfo | undefined;
}

/** What {@link startAdsHarness} sets in onStreamOpen, as the controller does. */
export interface InitialSnapshot {
  readonly spec: Spec;
  /** Set it only when the proxy has no snapshot yet (a reconnecting proxy keeps the current one). */
  readonly unlessSet?: boolean;
}

/**
 * Starts a plaintext server on 127.0.0.1 (node.id authentication) and a client channel to it.
 * Its onStreamOpen is async on purpose (the server must await it) and sets `initial`, when
 * given, as the proxy's snapshot. `opener` opens a test stream (SotW or delta) on the channel.
 */
export async function startAdsHarness<S, A extends unknown[]>(
  opener: (client: AdsTestClient, ...args: A) => S,
  initial?: InitialSnapshot,
  serverOptions: Pick<AdsServerOptions, 'maxBytesInFlight' | 'sendHoldLimitMs' | 'unreadTimeoutMs' | 'logger' | 'maxSubscribedNamesCost' | 'firstRequestTimeoutMs'> = {},
): Promise<AdsHarness<S, A>> {
  const cache = new SnapshotCache();
  const registry = new Registry();
  const events: string[] = [];
  const acks: AdsHarness<S, A>['acks'] = [];
  const nacks: AdsHarness<S, A>['nacks'] = [];
  let resolveClosed!: (id: number) => void;
  const closed = new Promise<number>((r) => (resolveClosed = r));
  const server = new AdsServer({
    ...serverOptions,
    watcher: cache,
    metrics: registry,
    hooks: {
      onStreamOpen: async (proxy, streamId) => {
        events.push(`open ${proxy.uuid} ${streamId}`);
        await new Promise((r) => setImmediate(r)); // async on purpose: the server must await it
        if (initial && !(initial.unlessSet && cache.getSnapshot(proxy.uuid))) cache.setSnapshot(proxy.uuid, snapshot(initial.spec));
      },
      onStreamClose: (proxy, streamId) => {
        events.push(`close ${proxy.uuid} ${streamId}`);
        resolveClosed(streamId);
      },
      onAck: (_p, typeUrl, version) => acks.push({ typeUrl, version }),
      onNack: (_p, typeUrl, version, detail) => nacks.push({ typeUrl, version, detail }),
    },
  });
  const port = await server.start({
    address: '127.0.0.1:0',
    credentials: grpc.ServerCredentials.createInsecure(),
    authenticate: authenticateFromNodeId,
  });
  const client = new AdsTestClient(`127.0.0.1:${port}`);
  const streams: S[] = [];
  return {
    cache,
    server,
    client,
    port,
    registry,
    events,
    acks,
    nacks,
    closed,
    streams,
    open(...args: A) {
      const s = opener(client, ...args);
      streams.push(s);
      return s;
    },
    set(spec: Spec) {
      const snap = snapshot(spec);
      cache.setSnapshot(PROXY.uuid, snap);
      return snap;
    },
    typeInfo(typeUrl: string) {
      const [s] = server.streams();
      return s?.types.find((t) => t.typeUrl === typeUrl);
    },
  };
}
