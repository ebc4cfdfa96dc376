import { clusterName, serviceKey } from './names.js';
import type { MeshSnapshot } from './types.js';
import { sameSet } from '../util/same.js';

/**
 * What changed between two MeshSnapshots, as far as proxies are concerned: `'all'` when the
 * change can alter what any proxy may reach or how (mesh settings, namespaces, services added,
 * removed or re-shaped, service identities, TrafficTargets, Retry, Ingress, Egress, an
 * UpstreamTrafficSetting for a host outside the mesh), else the `<ns>/<svc>` keys of the
 * services whose endpoints, TrafficSplit or UpstreamTrafficSetting changed. Only proxies whose
 * configuration depends on one of those services need regenerating.
 */
export function diffMeshSnapshots(before: MeshSnapshot, after: MeshSnapshot): 'all' | Set<string> {
  const same = sameContent;
  if (
    !same(before.settings, after.settings) ||
    !sameSet(before.namespaces, after.namespaces) ||
    !same(before.services, after.services) ||
    !sameMap(before.identitiesByService, after.identitiesByService, same) ||
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
    const [a, b] = [splitsBefore.get(apex), splitsAfter.get(apex)];
    if (same(a, b)) continue;
    changed.add(apex);
    // A backend's own proxies answer to the apex's host names (inbound virtual host): a service
    // that becomes or stops being a backend changes its proxies, which did not depend on the apex.
    for (const split of [a, b]) for (const backend of split?.backends ?? []) changed.add(`${split!.namespace}/${backend.service}`);
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

/**
 * True when, of the services `changed` names (from {@link diffMeshSnapshots}), only endpoints
 * changed: no TrafficSplit or UpstreamTrafficSetting of theirs changed, and none is headless
 * (a headless service's endpoint addresses are in listeners' filter chain matches). Then only
 * the ClusterLoadAssignments of those services differ in any proxy's configuration.
 */
export function onlyEndpointsChanged(before: MeshSnapshot, after: MeshSnapshot, changed: ReadonlySet<string>): boolean {
  const same = sameContent;
  for (const key of changed) {
    const [namespace, name] = key.split('/');
    const split = (s: MeshSnapshot) => s.trafficSplits.find((t) => t.namespace === namespace && t.service === name);
    if (!same(split(before), split(after))) return false;
    const setting = (s: MeshSnapshot) => s.upstreamTrafficSettings.find((u) => u.service === key);
    if (!same(setting(before), setting(after))) return false;
    const services = after.services.filter((s) => s.namespace === namespace && s.name === name);
    if (services.length === 0 || services.some((s) => s.headless)) return false;
  }
  return true;
}

/**
 * Equal content. Builds reuse the objects of what did not change, so identity settles most
 * comparisons; arrays compare element by element (identity first, then JSON), the rest by JSON.
 */
function sameContent(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i] && JSON.stringify(a[i]) !== JSON.stringify(b[i])) return false;
    return true;
  }
  return JSON.stringify(a) === JSON.stringify(b);
}

/** Same keys in the same order, and values equal by `same`. */
function sameMap<K, V>(a: ReadonlyMap<K, V>, b: ReadonlyMap<K, V>, same: (x: V, y: V) => boolean): boolean {
  if (a.size !== b.size) return false;
  const ib = b.entries();
  for (const [k, v] of a) {
    const next = ib.next();
    if (next.done || next.value[0] !== k || !same(v, next.value[1])) return false;
  }
  return true;
}
