import { serviceKey } from '../catalog/names.js';
import { inboundServices } from '../catalog/traffic-policy.js';
import type { MeshSnapshot } from '../catalog/types.js';
import type { ServiceIdentity } from '../proxy/types.js';
import { outboundView } from './outbound.js';

/**
 * The services (`<ns>/<svc>`) whose endpoints, TrafficSplit or UpstreamTrafficSetting the
 * resources of a proxy of `identity` are generated from: every destination it may reach and
 * every split backend behind them (CDS, EDS, LDS, RDS, SDS), every service it serves (inbound
 * listener, local clusters, rate limits), and the apex of every TrafficSplit that names one of
 * those as a backend (inbound virtual host domains). A change to any other service cannot
 * change this proxy's configuration, unless it is a mesh-wide change (see
 * `diffMeshSnapshots`).
 */
export function proxyDependencies(snapshot: MeshSnapshot, identity: ServiceIdentity): ReadonlySet<string> {
  const view = outboundView(snapshot, identity);
  const served = inboundServices(snapshot, identity).map(serviceKey);
  const out = new Set<string>([...view.destinations.map((d) => serviceKey(d.service)), ...view.upstreams.map(serviceKey), ...served]);
  const servedSet = new Set(served);
  for (const split of snapshot.trafficSplits) {
    if (split.backends.some((b) => servedSet.has(`${split.namespace}/${b.service}`))) out.add(`${split.namespace}/${split.service}`);
  }
  return out;
}
