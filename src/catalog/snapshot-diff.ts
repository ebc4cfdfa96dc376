import { clusterName, serviceKey } from './names.js';
import type { MeshService, MeshSnapshot, TrafficSplitPolicy } from './types.js';
import type { UpstreamTrafficSettingPolicy } from './upstream-policies.js';
import type { ServiceIdentity } from '../proxy/types.js';
import { sameSet } from '../util/same.js';
import { meshServicePorts } from './traffic-policy.js';

/**
 * What a change short of a mesh-wide one touches (see {@link diffMeshSnapshots}).
 */
export interface MeshChange {
  /**
   * `<ns>/<svc>` keys of the services whose endpoints, ports, identities, TrafficSplit or
   * UpstreamTrafficSetting changed, that appeared or went away, and the apexes of the
   * TrafficSplits naming one as a backend: a proxy whose configuration was generated from one
   * of them (`proxyDependencies`) is affected.
   */
  readonly services: ReadonlySet<string>;
  /**
   * Identities whose own access changed: the destination and sources of every TrafficTarget
   * added, removed or changed, the identities of the services that appeared, went away or
   * changed identities, and the sources the TrafficTargets to those identities allow. Every
   * proxy of one is affected, whatever it depended on before.
   */
  readonly identities: ReadonlySet<ServiceIdentity>;
  /**
   * The set of MeshServices changed (one added, removed or re-shaped): proxyless clients, which
   * get a listener for every HTTP service of the mesh, are affected.
   */
  readonly servicesChanged: boolean;
}

/**
 * What changed between two MeshSnapshots, as far as proxies are concerned: `'all'` when the
 * change can alter what any proxy gets (mesh settings, namespaces, Retry, Ingress, Egress, an
 * UpstreamTrafficSetting for a host outside the mesh, a service added or removed in permissive
 * mode), else a {@link MeshChange} naming the services and identities it touches. Only proxies
 * whose configuration depends on one of those need regenerating. `meshConfig` (where the
 * settings come from) and `partialPolicies` are not compared: no generator reads them; nor is
 * `index`, which `services`, `trafficTargets` and `trafficSplits` make.
 */
export function diffMeshSnapshots(before: MeshSnapshot, after: MeshSnapshot): 'all' | MeshChange {
  const same = sameContent;
  if (
    !same(before.settings, after.settings) ||
    !sameSet(before.namespaces, after.namespaces) ||
    !same(before.retryPolicies, after.retryPolicies) ||
    !same(before.ingressBackends, after.ingressBackends) ||
    !same(before.egressPolicies, after.egressPolicies)
  ) {
    return 'all';
  }
  const services = new Set<string>();
  const identities = new Set<ServiceIdentity>();
  // A service's identities and the sources their TrafficTargets allow: who serves it and who may reach it.
  const reach = (key: string): void => {
    for (const s of [before, after]) {
      for (const identity of s.identitiesByService.get(key) ?? []) {
        identities.add(identity);
        for (const tt of s.trafficTargets) if (tt.destination === identity) for (const source of tt.sources) identities.add(source);
      }
    }
  };
  const servicesChanged = !same(before.services, after.services);
  if (servicesChanged) {
    const [portsBefore, portsAfter] = [groupBy(before.services, serviceKey), groupBy(after.services, serviceKey)];
    for (const key of new Set([...portsBefore.keys(), ...portsAfter.keys()])) {
      const [a, b] = [portsBefore.get(key), portsAfter.get(key)];
      if (a && b && same(a, b)) continue;
      // Permissive: every proxy reaches every service, so one more or one less changes them all.
      if (!a || !b) if (after.settings.permissiveTrafficPolicyMode) return 'all';
      services.add(key);
      reach(key);
    }
  }
  if (!sameMap(before.identitiesByService, after.identitiesByService, same)) {
    for (const key of new Set([...before.identitiesByService.keys(), ...after.identitiesByService.keys()])) {
      if (same(before.identitiesByService.get(key) ?? [], after.identitiesByService.get(key) ?? [])) continue;
      services.add(key);
      reach(key);
    }
  }
  if (!same(before.trafficTargets, after.trafficTargets)) {
    const byName = (s: MeshSnapshot) => new Map(s.trafficTargets.map((t) => [t.name, t]));
    const [targetsBefore, targetsAfter] = [byName(before), byName(after)];
    for (const name of new Set([...targetsBefore.keys(), ...targetsAfter.keys()])) {
      const [a, b] = [targetsBefore.get(name), targetsAfter.get(name)];
      if (same(a, b)) continue;
      for (const tt of [a, b]) {
        if (!tt) continue;
        identities.add(tt.destination);
        for (const source of tt.sources) identities.add(source);
      }
    }
  }
  for (const svc of after.services) {
    const cluster = clusterName(svc);
    if (!same(before.endpoints.get(cluster) ?? [], after.endpoints.get(cluster) ?? [])) services.add(serviceKey(svc));
  }
  // Every split of an apex and every setting of a host, in order: a policy that conflicts with
  // an earlier one can stay in the snapshot (its last valid version), and the first one applies.
  const [splitsBefore, splitsAfter] = [splitsByApex(before), splitsByApex(after)];
  for (const apex of new Set([...splitsBefore.keys(), ...splitsAfter.keys()])) {
    const [a, b] = [splitsBefore.get(apex) ?? [], splitsAfter.get(apex) ?? []];
    if (same(a, b)) continue;
    services.add(apex);
    // A backend's own proxies answer to the apex's host names (inbound virtual host): a service
    // that becomes or stops being a backend changes its proxies, which did not depend on the apex.
    for (const split of [...a, ...b]) for (const backend of split.backends) services.add(`${split.namespace}/${backend.service}`);
  }
  const [settingsBefore, settingsAfter] = [settingsByHost(before), settingsByHost(after)];
  for (const host of new Set([...settingsBefore.keys(), ...settingsAfter.keys()])) {
    const [a, b] = [settingsBefore.get(host) ?? [], settingsAfter.get(host) ?? []];
    if (same(a, b)) continue;
    const of = new Set([...a, ...b].map((u) => u.service));
    // A setting for an egress host changes the egress clusters of every source of that host.
    const [service] = of;
    if (of.size !== 1 || service === undefined) return 'all';
    services.add(service);
  }
  if (servicesChanged) {
    // A split resolves its backends by name and port: one that appears, goes or changes ports
    // changes where the apex's traffic goes, for proxies that did not depend on that backend.
    for (const s of [before, after]) {
      for (const split of s.trafficSplits) {
        if (split.backends.some((b) => services.has(`${split.namespace}/${b.service}`))) services.add(`${split.namespace}/${split.service}`);
      }
    }
  }
  return { services, identities, servicesChanged };
}

/** Every TrafficSplit by its apex `<ns>/<svc>`, in snapshot order. */
function splitsByApex(snapshot: MeshSnapshot): Map<string, TrafficSplitPolicy[]> {
  return groupBy(snapshot.trafficSplits, (t) => `${t.namespace}/${t.service}`);
}

/** Every UpstreamTrafficSetting by its host, in snapshot order. */
function settingsByHost(snapshot: MeshSnapshot): Map<string, UpstreamTrafficSettingPolicy[]> {
  return groupBy(snapshot.upstreamTrafficSettings, (u) => u.host);
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = out.get(k);
    if (list) list.push(item);
    else out.set(k, [item]);
  }
  return out;
}

/**
 * True when, of what `change` names (from {@link diffMeshSnapshots}), only services' endpoints
 * changed (no identity, no service added, removed or re-shaped): no TrafficSplit or UpstreamTrafficSetting of theirs changed, and none is headless
 * (a headless service's endpoint addresses are in listeners' filter chain matches). Then only
 * the ClusterLoadAssignments of those services differ in any proxy's configuration.
 */
export function onlyEndpointsChanged(before: MeshSnapshot, after: MeshSnapshot, change: MeshChange): boolean {
  if (change.servicesChanged || change.identities.size > 0) return false;
  const same = sameContent;
  const [splitsBefore, splitsAfter] = [splitsByApex(before), splitsByApex(after)];
  for (const key of change.services) {
    if (!same(splitsBefore.get(key) ?? [], splitsAfter.get(key) ?? []) || !sameSettings(before, after, key)) return false;
    const services = servicePorts(after, key);
    if (services.length === 0 || services.some((s) => s.headless)) return false;
  }
  return true;
}

/**
 * True when, of what `change` names (from {@link diffMeshSnapshots}), only TrafficSplit weights
 * changed: each changed split keeps the same backends, each keeping or not a positive weight
 * (so the same clusters are reached), its apex serves HTTP or gRPC on every port and is not
 * headless (a TCP apex's weights are in listeners); no endpoints, UpstreamTrafficSetting,
 * identity or service changed. Then only RouteConfigurations differ in any proxy's
 * configuration (the weighted clusters of the apexes' routes).
 */
export function onlySplitWeightsChanged(before: MeshSnapshot, after: MeshSnapshot, change: MeshChange): boolean {
  if (change.servicesChanged || change.identities.size > 0 || change.services.size === 0) return false;
  const same = sameContent;
  const [splitsBefore, splitsAfter] = [splitsByApex(before), splitsByApex(after)];
  let splitChanged = false;
  for (const key of change.services) {
    const services = servicePorts(after, key);
    for (const svc of services) if (!same(before.endpoints.get(clusterName(svc)) ?? [], after.endpoints.get(clusterName(svc)) ?? [])) return false;
    if (!sameSettings(before, after, key)) return false;
    const [splitsA, splitsB] = [splitsBefore.get(key) ?? [], splitsAfter.get(key) ?? []];
    if (splitsA.length === 0 && splitsB.length === 0) continue; // a backend of a changed split: its inbound host names depend on the apex only
    if (splitsA.length !== 1 || splitsB.length !== 1) return false; // none, or a conflict
    const [a, b] = [splitsA[0], splitsB[0]];
    if (a.backends.length !== b.backends.length) return false;
    for (let i = 0; i < a.backends.length; i++) {
      const [x, y] = [a.backends[i], b.backends[i]];
      if (x.service !== y.service || x.weight > 0 !== y.weight > 0) return false;
    }
    if (services.length === 0 || services.some((s) => s.headless || (s.protocol !== 'http' && s.protocol !== 'grpc'))) return false;
    splitChanged ||= !same(a, b);
  }
  return splitChanged;
}

/** Every port of the service `<ns>/<svc>` in `snapshot` (see `meshServicePorts`). */
function servicePorts(snapshot: MeshSnapshot, key: string): readonly MeshService[] {
  const [namespace, name] = key.split('/');
  return meshServicePorts(snapshot, namespace, name);
}

/** The same UpstreamTrafficSettings for the service `key` before and after. */
function sameSettings(before: MeshSnapshot, after: MeshSnapshot, key: string): boolean {
  const of = (s: MeshSnapshot) => s.upstreamTrafficSettings.filter((u) => u.service === key);
  return sameContent(of(before), of(after));
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
