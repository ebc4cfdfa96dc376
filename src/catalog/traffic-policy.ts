import type { ServiceIdentity } from '../proxy/types.js';
import { serviceKey } from './names.js';
import type { MeshService, MeshSnapshot, TrafficSplitPolicy, TrafficTargetPolicy } from './types.js';

/** True when a TrafficTarget's rules cover a service port: HTTP matches for HTTP/gRPC ports, TCPRoute ports for any port. */
export function targetCoversPort(tt: TrafficTargetPolicy, svc: MeshService): boolean {
  const httpLike = svc.protocol === 'http' || svc.protocol === 'grpc';
  if (httpLike && tt.httpMatches.length > 0) return true;
  if (tt.tcpPorts === 'any') return true;
  return tt.tcpPorts !== undefined && (tt.tcpPorts.includes(svc.targetPort) || tt.tcpPorts.includes(svc.port));
}

/**
 * Lookup tables over one MeshSnapshot, built once per snapshot (snapshots are immutable) so
 * every per-proxy query is proportional to what the proxy reaches, not to the mesh's size.
 */
interface SnapshotIndex {
  /** TrafficTargets by source identity. */
  readonly targetsBySource: ReadonlyMap<ServiceIdentity, readonly TrafficTargetPolicy[]>;
  /** TrafficTargets by destination identity. */
  readonly targetsByDestination: ReadonlyMap<ServiceIdentity, readonly TrafficTargetPolicy[]>;
  /** MeshServices (every port) by `<ns>/<svc>`, in snapshot order. */
  readonly servicesByKey: ReadonlyMap<string, readonly MeshService[]>;
  /** Position of each MeshService in `snapshot.services`, to keep results in snapshot order. */
  readonly order: ReadonlyMap<MeshService, number>;
  /** TrafficSplits by apex `<ns>/<svc>`. */
  readonly splitsByApex: ReadonlyMap<string, TrafficSplitPolicy>;
}

const indexes = new WeakMap<MeshSnapshot, SnapshotIndex>();

function group<K, V>(items: readonly V[], keyOf: (v: V) => readonly K[]): Map<K, V[]> {
  const out = new Map<K, V[]>();
  for (const item of items) {
    for (const key of keyOf(item)) {
      const list = out.get(key);
      if (list) list.push(item);
      else out.set(key, [item]);
    }
  }
  return out;
}

function indexOf(snapshot: MeshSnapshot): SnapshotIndex {
  let index = indexes.get(snapshot);
  if (!index) {
    const splitsByApex = new Map<string, TrafficSplitPolicy>();
    // The first split of an apex wins, as the catalog reports later ones as conflicts.
    for (const s of snapshot.trafficSplits) if (!splitsByApex.has(`${s.namespace}/${s.service}`)) splitsByApex.set(`${s.namespace}/${s.service}`, s);
    index = {
      targetsBySource: group(snapshot.trafficTargets, (tt) => [...new Set(tt.sources)]),
      targetsByDestination: group(snapshot.trafficTargets, (tt) => [tt.destination]),
      servicesByKey: group(snapshot.services, (svc) => [serviceKey(svc)]),
      order: new Map(snapshot.services.map((svc, i) => [svc, i])),
      splitsByApex,
    };
    indexes.set(snapshot, index);
  }
  return index;
}

/**
 * The TrafficTargets that let `source` reach `svc`: those whose destination is one of the
 * service's identities, list `source` among their sources, and cover the port.
 */
export function targetsAllowing(snapshot: MeshSnapshot, source: ServiceIdentity, svc: MeshService): TrafficTargetPolicy[] {
  const identities = snapshot.identitiesByService.get(serviceKey(svc)) ?? [];
  return (indexOf(snapshot).targetsBySource.get(source) ?? []).filter((tt) => identities.includes(tt.destination) && targetCoversPort(tt, svc));
}

/**
 * The MeshServices (ports) `source` may reach: every one in permissive mode; in SMI mode
 * those a TrafficTarget allows (SMI access v1alpha3: deny unless a TrafficTarget allows).
 * Sorted as in the snapshot.
 */
export function outboundServices(snapshot: MeshSnapshot, source: ServiceIdentity): MeshService[] {
  if (snapshot.settings.permissiveTrafficPolicyMode) return [...snapshot.services];
  const index = indexOf(snapshot);
  const reached = new Set<MeshService>();
  for (const tt of index.targetsBySource.get(source) ?? []) {
    for (const key of snapshot.servicesByIdentity.get(tt.destination) ?? []) {
      for (const svc of index.servicesByKey.get(key) ?? []) if (targetCoversPort(tt, svc)) reached.add(svc);
    }
  }
  return [...reached].sort((a, b) => index.order.get(a)! - index.order.get(b)!);
}

/** The MeshServices whose workloads run as `identity`: what its inbound listener serves, in snapshot order. */
export function inboundServices(snapshot: MeshSnapshot, identity: ServiceIdentity): MeshService[] {
  const index = indexOf(snapshot);
  return (snapshot.servicesByIdentity.get(identity) ?? [])
    .flatMap((key) => index.servicesByKey.get(key) ?? [])
    .sort((a, b) => index.order.get(a)! - index.order.get(b)!);
}

/** The TrafficTargets whose destination is `identity` (the inbound side of SMI access control). */
export function inboundTrafficTargets(snapshot: MeshSnapshot, identity: ServiceIdentity): TrafficTargetPolicy[] {
  return [...(indexOf(snapshot).targetsByDestination.get(identity) ?? [])];
}

/** The TrafficSplit whose apex is `svc`, if any. */
export function trafficSplitFor(snapshot: MeshSnapshot, svc: { namespace: string; name: string }): TrafficSplitPolicy | undefined {
  return indexOf(snapshot).splitsByApex.get(serviceKey(svc));
}

/** Every port of the Service `<namespace>/<name>`, in snapshot order (empty when there is none). */
export function meshServicePorts(snapshot: MeshSnapshot, namespace: string, name: string): readonly MeshService[] {
  return indexOf(snapshot).servicesByKey.get(`${namespace}/${name}`) ?? [];
}

/** The MeshService of `name` in `namespace` with service port `port`, or its only port, or undefined. */
export function findMeshService(snapshot: MeshSnapshot, namespace: string, name: string, port: number): MeshService | undefined {
  const ports = meshServicePorts(snapshot, namespace, name);
  return ports.find((s) => s.port === port) ?? (ports.length === 1 ? ports[0] : undefined);
}
