import type { ServiceIdentity } from '../proxy/types.js';
import { serviceKey } from './names.js';
import type { MeshService, MeshSnapshot, MeshSnapshotIndex, TrafficSplitPolicy, TrafficTargetPolicy } from './types.js';
import { sameElements } from '../util/same.js';

/** True when a TrafficTarget's rules cover a service port: HTTP matches for HTTP/gRPC ports, TCPRoute ports for any port. */
export function targetCoversPort(tt: TrafficTargetPolicy, svc: MeshService): boolean {
  const httpLike = svc.protocol === 'http' || svc.protocol === 'grpc';
  if (httpLike && tt.httpMatches.length > 0) return true;
  if (tt.tcpPorts === 'any') return true;
  return tt.tcpPorts !== undefined && (tt.tcpPorts.includes(svc.targetPort) || tt.tcpPorts.includes(svc.port));
}

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

/**
 * The {@link MeshSnapshotIndex} of a snapshot's lists. The tables of a list that is `previous`'s
 * (the same array; for services, the same MeshService objects in the same order) are
 * `previous`'s, so a rebuild that changed no service or policy indexes nothing again.
 */
export function indexMeshSnapshot(
  lists: Pick<MeshSnapshot, 'services' | 'trafficTargets' | 'trafficSplits'>,
  previous?: MeshSnapshotIndex,
): MeshSnapshotIndex {
  const { services, trafficTargets, trafficSplits } = lists;
  const sameTargets = previous !== undefined && previous.trafficTargets === trafficTargets;
  const sameServices = previous !== undefined && sameElements(previous.services, services);
  let splitsByApex = previous?.trafficSplits === trafficSplits ? previous.splitsByApex : undefined;
  if (!splitsByApex) {
    const byApex = new Map<string, TrafficSplitPolicy>();
    for (const s of trafficSplits) if (!byApex.has(`${s.namespace}/${s.service}`)) byApex.set(`${s.namespace}/${s.service}`, s);
    splitsByApex = byApex;
  }
  return {
    services,
    trafficTargets,
    trafficSplits,
    targetsBySource: sameTargets ? previous.targetsBySource : group(trafficTargets, (tt) => [...new Set(tt.sources)]),
    targetsByDestination: sameTargets ? previous.targetsByDestination : group(trafficTargets, (tt) => [tt.destination]),
    servicesByKey: sameServices ? previous.servicesByKey : group(services, (svc) => [serviceKey(svc)]),
    order: sameServices ? previous.order : new Map(services.map((svc, i) => [svc, i])),
    splitsByApex,
  };
}

/** The snapshot's index; for a copy of a snapshot whose lists are not the ones indexed (`{ ...snapshot, services }`), an index of its own lists. */
function indexOf(snapshot: MeshSnapshot): MeshSnapshotIndex {
  const index = snapshot.index;
  if (index.services === snapshot.services && index.trafficTargets === snapshot.trafficTargets && index.trafficSplits === snapshot.trafficSplits) return index;
  return indexMeshSnapshot(snapshot);
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

/** The TrafficTargets whose destination is `identity` (the inbound side of SMI access control): the index's own list, not a copy. */
export function inboundTrafficTargets(snapshot: MeshSnapshot, identity: ServiceIdentity): readonly TrafficTargetPolicy[] {
  return indexOf(snapshot).targetsByDestination.get(identity) ?? NO_TARGETS;
}

const NO_TARGETS: readonly TrafficTargetPolicy[] = Object.freeze([]);

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
