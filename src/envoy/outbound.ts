import { clusterName } from '../catalog/names.js';
import { findMeshService, outboundServices, trafficSplitFor } from '../catalog/traffic-policy.js';
import type { MeshService, MeshSnapshot } from '../catalog/types.js';
import type { ServiceIdentity } from '../proxy/types.js';
import { byKey } from '../util/order.js';
import { sameElements } from '../util/same.js';

/** A cluster a route or tcp_proxy sends to, with its weight (1 when there is no split). */
export interface WeightedCluster {
  readonly cluster: string;
  readonly weight: number;
}

/** One destination a proxy may reach, and where its traffic goes. */
export interface OutboundDestination {
  readonly service: MeshService;
  /**
   * The clusters traffic to the service goes to: the TrafficSplit's backends (weights as
   * given) when the service is a split apex with reachable backends, else its own cluster.
   */
  readonly targets: readonly WeightedCluster[];
}

/** What a proxy reaches: its destinations, and every upstream service needing a cluster. */
export interface OutboundView {
  readonly destinations: readonly OutboundDestination[];
  /** Services with an upstream cluster, deduplicated by cluster name, sorted by it. */
  readonly upstreams: readonly MeshService[];
}

/** The same services (by identity: a rebuild keeps unchanged ones) reached through the same clusters and weights. */
export function sameOutboundView(a: OutboundView, b: OutboundView): boolean {
  if (!sameElements(a.upstreams, b.upstreams) || a.destinations.length !== b.destinations.length) return false;
  return a.destinations.every((d, i) => {
    const e = b.destinations[i];
    return d.service === e.service && d.targets.length === e.targets.length && d.targets.every((t, j) => t.cluster === e.targets[j].cluster && t.weight === e.targets[j].weight);
  });
}

/**
 * Everything a view holds, as text: destinations (service and port) with their weighted
 * targets, then upstreams. Two views with the same key reach the same destinations the same way.
 */
export function outboundViewKey(view: OutboundView): string {
  return `${view.destinations.map(outboundDestinationKey).join(';')}|${view.upstreams.map((u) => `${clusterName(u)}:${u.port}`).join(',')}`;
}

/** One destination as text: its service (cluster and port) and weighted targets. Two destinations with the same key go the same way. */
export function outboundDestinationKey(d: OutboundDestination): string {
  // The service port, not only the cluster (`<ns>/<svc>|<targetPort>`): two ports of a service can
  // share a target port, and a proxy may be allowed one of them only.
  return `${clusterName(d.service)}:${d.service.port}>${d.targets.map((t) => `${t.cluster}*${t.weight}`).join(',')}`;
}

/**
 * Computes the outbound view of a proxy of `identity` from the snapshot: the destinations its
 * identity may reach (permissive, or SMI TrafficTargets), TrafficSplits applied to apex
 * services (SMI split v1alpha2; backends with weight 0 are left out; backends the source may
 * not reach are left out too, so traffic never goes where no TrafficTarget allows). Generators
 * ask `GenerationContext.outboundView`, which computes it once per identity and generation.
 */
export function computeOutboundView(snapshot: MeshSnapshot, identity: ServiceIdentity): OutboundView {
  const allowed = outboundServices(snapshot, identity);
  const allowedKeys = new Set(allowed.map(clusterName));
  const upstreams = new Map<string, MeshService>();
  const destinations: OutboundDestination[] = [];
  for (const svc of allowed) {
    upstreams.set(clusterName(svc), svc);
    const split = trafficSplitFor(snapshot, svc);
    const targets: WeightedCluster[] = [];
    for (const b of split?.backends ?? []) {
      const backend = findMeshService(snapshot, svc.namespace, b.service, svc.port);
      if (!backend || !allowedKeys.has(clusterName(backend))) continue;
      upstreams.set(clusterName(backend), backend);
      targets.push({ cluster: clusterName(backend), weight: b.weight });
    }
    destinations.push({ service: svc, targets: targets.length > 0 ? targets : [{ cluster: clusterName(svc), weight: 1 }] });
  }
  const sorted = [...upstreams.entries()].sort(byKey).map(([, s]) => s);
  return { destinations, upstreams: sorted };
}

/**
 * Whether every identity's outbound view is the same in `a` and `b` without computing it: what
 * {@link computeOutboundView} reads is the same, namely the permissive mode, the services (the
 * same MeshService objects in the same order: a rebuild keeps unchanged ones), the TrafficTargets
 * and TrafficSplits (the same lists: a rebuild keeps them when unchanged) and the services of
 * each identity. Endpoints, MeshConfig's other settings and the other policies are not read.
 */
export function sameOutboundViewInputs(a: MeshSnapshot, b: MeshSnapshot): boolean {
  if (a.settings.permissiveTrafficPolicyMode !== b.settings.permissiveTrafficPolicyMode) return false;
  if (a.trafficTargets !== b.trafficTargets || a.trafficSplits !== b.trafficSplits || !sameElements(a.services, b.services)) return false;
  if (a.servicesByIdentity.size !== b.servicesByIdentity.size) return false;
  for (const [identity, keys] of a.servicesByIdentity) {
    const other = b.servicesByIdentity.get(identity);
    if (!other || !sameElements(keys, other)) return false;
  }
  return true;
}
