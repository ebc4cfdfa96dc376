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
 * The TrafficTargets that let `source` reach `svc`: those whose destination is one of the
 * service's identities, list `source` among their sources, and cover the port.
 */
export function targetsAllowing(snapshot: MeshSnapshot, source: ServiceIdentity, svc: MeshService): TrafficTargetPolicy[] {
  const identities = snapshot.identitiesByService.get(serviceKey(svc)) ?? [];
  return snapshot.trafficTargets.filter(
    (tt) => identities.includes(tt.destination) && tt.sources.includes(source) && targetCoversPort(tt, svc),
  );
}

/**
 * The MeshServices (ports) `source` may reach: every one in permissive mode; in SMI mode
 * those a TrafficTarget allows (SMI access v1alpha3: deny unless a TrafficTarget allows).
 * Sorted as in the snapshot.
 */
export function outboundServices(snapshot: MeshSnapshot, source: ServiceIdentity): MeshService[] {
  if (snapshot.settings.permissiveTrafficPolicyMode) return [...snapshot.services];
  return snapshot.services.filter((svc) => targetsAllowing(snapshot, source, svc).length > 0);
}

/** The MeshServices whose workloads run as `identity`: what its inbound listener serves. */
export function inboundServices(snapshot: MeshSnapshot, identity: ServiceIdentity): MeshService[] {
  const keys = new Set(snapshot.servicesByIdentity.get(identity) ?? []);
  return snapshot.services.filter((svc) => keys.has(serviceKey(svc)));
}

/** The TrafficTargets whose destination is `identity` (the inbound side of SMI access control). */
export function inboundTrafficTargets(snapshot: MeshSnapshot, identity: ServiceIdentity): TrafficTargetPolicy[] {
  return snapshot.trafficTargets.filter((tt) => tt.destination === identity);
}

/** The TrafficSplit whose apex is `svc`, if any. */
export function trafficSplitFor(snapshot: MeshSnapshot, svc: { namespace: string; name: string }): TrafficSplitPolicy | undefined {
  return snapshot.trafficSplits.find((s) => s.namespace === svc.namespace && s.service === svc.name);
}

/** The MeshService of `name` in `namespace` with service port `port`, or its only port, or undefined. */
export function findMeshService(snapshot: MeshSnapshot, namespace: string, name: string, port: number): MeshService | undefined {
  const ports = snapshot.services.filter((s) => s.namespace === namespace && s.name === name);
  return ports.find((s) => s.port === port) ?? (ports.length === 1 ? ports[0] : undefined);
}
