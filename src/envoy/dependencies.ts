import { serviceKey } from '../catalog/names.js';
import { inboundServices } from '../catalog/traffic-policy.js';
import type { MeshChange } from '../catalog/snapshot-diff.js';
import type { Proxy } from '../proxy/types.js';
import { UnionSet } from '../util/union-set.js';
import type { GenerationContext, ProxyProfile } from './context.js';
import type { OutboundView } from './outbound.js';

/**
 * The services (`<ns>/<svc>`) whose endpoints, TrafficSplit or UpstreamTrafficSetting the
 * resources of a proxy of `profile`'s identity are generated from: every destination it may reach and
 * every split backend behind them (CDS, EDS, LDS, RDS, SDS), every service it serves (inbound
 * listener, local clusters, rate limits), and the apex of every TrafficSplit that names one of
 * those as a backend (inbound virtual host domains). A change to any other service cannot
 * change this proxy's configuration, unless it names the proxy's identity or is mesh-wide
 * (see `diffMeshSnapshots` and {@link affectedBy}).
 */
export function proxyDependencies(context: GenerationContext, profile: ProxyProfile): ReadonlySet<string> {
  const { snapshot } = context;
  const view = context.outboundView(profile.identity);
  // What the view reaches: one set for every identity with the view (kept while the view is).
  const reached = context.shared('Dependencies', `${context.outboundViewId(view)}`, [view], viewDependencies);
  const served = inboundServices(snapshot, profile.identity).map(serviceKey);
  const own = [...served];
  const servedSet = new Set(served);
  for (const split of snapshot.trafficSplits) {
    if (split.backends.some((b) => servedSet.has(`${split.namespace}/${b.service}`))) own.push(`${split.namespace}/${split.service}`);
  }
  return new UnionSet(reached, own);
}

/** The services an outbound view reaches: its destinations and its upstreams (split backends). */
function viewDependencies(view: OutboundView): ReadonlySet<string> {
  return new Set([...view.destinations.map((d) => serviceKey(d.service)), ...view.upstreams.map(serviceKey)]);
}

/**
 * Whether `change` can alter the configuration of `proxy` (a `Proxy` or its `ProxyProfile`), generated from `dependencies`
 * ({@link proxyDependencies} of the MeshSnapshot before the change): its identity is named, it
 * depended on a changed service, or it is a proxyless client (one listener per HTTP service of
 * the mesh) and the set of services changed.
 */
export function affectedBy(change: MeshChange, proxy: Pick<Proxy, 'identity' | 'clientType'>, dependencies: ReadonlySet<string>): boolean {
  if (change.identities.has(proxy.identity)) return true;
  if (change.servicesChanged && proxy.clientType === 'grpc') return true;
  for (const key of change.services) if (dependencies.has(key)) return true;
  return false;
}
