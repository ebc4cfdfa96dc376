import { clusterName, serviceKey } from './names.js';
import type { MeshSnapshot } from './types.js';

/**
 * What changed between two MeshSnapshots, as far as proxies are concerned: `'all'` when the
 * change can alter what any proxy may reach or how (mesh settings, namespaces, services added,
 * removed or re-shaped, service identities, TrafficTargets, Retry, Ingress, Egress, an
 * UpstreamTrafficSetting for a host outside the mesh), else the `<ns>/<svc>` keys of the
 * services whose endpoints, TrafficSplit or UpstreamTrafficSetting changed. Only proxies whose
 * configuration depends on one of those services need regenerating.
 */
export function diffMeshSnapshots(before: MeshSnapshot, after: MeshSnapshot): 'all' | Set<string> {
  const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);
  if (
    !same(before.settings, after.settings) ||
    !same([...before.namespaces].sort(), [...after.namespaces].sort()) ||
    !same(before.services, after.services) ||
    !same([...before.identitiesByService], [...after.identitiesByService]) ||
    !same(before.trafficTargets, after.trafficTargets) ||
    !same(before.retryPolicies, after.retryPolicies) ||
    !same(before.ingressBackends, after.ingressBackends) ||
    !same(before.egressPolicies, after.egressPolicies)
  ) {
    return 'all';
  }
  const changed = new Set<string>();
  for (const svc of after.services) {
    const cluster = clusterName(svc);
    if (!same(before.endpoints.get(cluster) ?? [], after.endpoints.get(cluster) ?? [])) changed.add(serviceKey(svc));
  }
  const byApex = (s: MeshSnapshot) => new Map(s.trafficSplits.map((t) => [`${t.namespace}/${t.service}`, t]));
  const [splitsBefore, splitsAfter] = [byApex(before), byApex(after)];
  for (const apex of new Set([...splitsBefore.keys(), ...splitsAfter.keys()])) {
    if (!same(splitsBefore.get(apex), splitsAfter.get(apex))) changed.add(apex);
  }
  const byHost = (s: MeshSnapshot) => new Map(s.upstreamTrafficSettings.map((u) => [u.host, u]));
  const [settingsBefore, settingsAfter] = [byHost(before), byHost(after)];
  for (const host of new Set([...settingsBefore.keys(), ...settingsAfter.keys()])) {
    const [a, b] = [settingsBefore.get(host), settingsAfter.get(host)];
    if (same(a, b)) continue;
    const service = a?.service ?? b?.service;
    // A setting for an egress host changes the egress clusters of every source of that host.
    if (service === undefined || (a && b && a.service !== b.service)) return 'all';
    changed.add(service);
  }
  return changed;
}
