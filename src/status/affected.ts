/**
 * Which proxies a policy object's content reaches, in the terms the controller records per
 * proxy: identities named (the ones `diffMeshSnapshots` marks as changed for such an object) and
 * services (`<ns>/<svc>`) looked up in each proxy's dependencies (`proxyDependencies`, what
 * `affectedBy` reads). Pure: reads the store's objects and the MeshSnapshot.
 */
import type { MeshSnapshot } from '../catalog/types.js';
import { serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import type { Egress, IdentityBindingSubject, IngressBackend, KubeObject, Retry, TrafficSplit, TrafficTarget, UpstreamTrafficSetting } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import type { PolicyKind } from './object-versions.js';

/** The proxies a policy object reaches: every proxy (`all`), or those of `identities` and those whose dependencies hold one of `services`. */
export interface AffectedSelector {
  readonly all: boolean;
  readonly identities: ReadonlySet<ServiceIdentity>;
  /** `<ns>/<svc>` keys. */
  readonly services: ReadonlySet<string>;
}

const NONE: AffectedSelector = { all: false, identities: new Set(), services: new Set() };
const ALL: AffectedSelector = { all: true, identities: new Set(), services: new Set() };

/** The identity of a ServiceAccount subject (namespace defaults to the policy's); undefined for another kind. */
function subjectIdentity(subject: IdentityBindingSubject | undefined, namespace: string): ServiceIdentity | undefined {
  if (!subject || subject.kind !== 'ServiceAccount' || typeof subject.name !== 'string') return undefined;
  return serviceIdentity(subject.namespace ?? namespace, subject.name);
}

/** The destination and source identities of a TrafficTarget: the destination's RBAC and the sources' outbound routes come from it. */
function trafficTargetIdentities(tt: TrafficTarget, into: Set<ServiceIdentity>): void {
  const ns = tt.metadata.namespace ?? 'default';
  const spec = tt.spec ?? {};
  const destination = subjectIdentity(spec.destination, ns);
  if (destination) into.add(destination);
  for (const s of spec.sources ?? []) {
    const id = subjectIdentity(s, ns);
    if (id) into.add(id);
  }
}

/** Egress policies of `namespace` whose `matches` name `kind`/`name`. */
function egressesMatching(store: StoreReader, namespace: string, kind: string, name: string): Egress[] {
  return store.list<Egress>('Egress', namespace).filter((e) => (e.spec?.matches ?? []).some((m) => m.kind === kind && m.name === name));
}

/** Adds the source identities of `egress`. */
function egressIdentities(egress: Egress, into: Set<ServiceIdentity>): void {
  const ns = egress.metadata.namespace ?? 'default';
  for (const s of egress.spec?.sources ?? []) {
    const id = subjectIdentity(s, ns);
    if (id) into.add(id);
  }
}

/**
 * The proxies `object` (of a policy kind, as in the store) reaches, following its semantics:
 * - TrafficTarget: the destination identity's proxies (RBAC) and its sources' (routes);
 * - HTTPRouteGroup, TCPRoute: through the TrafficTargets of its namespace whose rules name it
 *   (and, for an HTTPRouteGroup, the Egress policies whose matches name it);
 * - TrafficSplit: the proxies whose configuration depends on the apex service (those that may
 *   reach it, and the backends', whose virtual hosts carry the apex's names);
 * - IngressBackend: the proxies of the backends' services;
 * - Egress, Retry: the source identities';
 * - UpstreamTrafficSetting: the proxies that depend on its host service (its clients' clusters,
 *   its own proxies' rate limits), and the sources of the Egress policies naming it;
 * - MeshConfig: every proxy, for the one the controller reads (`mesh.meshConfig`); none for another.
 */
export function affectedSelector(kind: PolicyKind, object: KubeObject, mesh: MeshSnapshot, store: StoreReader, meshConfigName: string): AffectedSelector {
  const ns = object.metadata.namespace ?? 'default';
  const name = object.metadata.name;
  const identities = new Set<ServiceIdentity>();
  const services = new Set<string>();
  switch (kind) {
    case 'MeshConfig':
      return `${ns}/${name}` === meshConfigName ? ALL : NONE;
    case 'TrafficTarget':
      trafficTargetIdentities(object as TrafficTarget, identities);
      break;
    case 'HTTPRouteGroup':
    case 'TCPRoute':
      for (const tt of store.list<TrafficTarget>('TrafficTarget', ns)) {
        if ((tt.spec?.rules ?? []).some((r) => r.kind === kind && r.name === name)) trafficTargetIdentities(tt, identities);
      }
      if (kind === 'HTTPRouteGroup') for (const e of egressesMatching(store, ns, kind, name)) egressIdentities(e, identities);
      break;
    case 'TrafficSplit': {
      const apex = (object as TrafficSplit).spec?.service;
      if (typeof apex === 'string') services.add(`${ns}/${apex.split('.')[0]}`);
      break;
    }
    case 'IngressBackend':
      for (const b of (object as IngressBackend).spec?.backends ?? []) {
        for (const id of mesh.identitiesByService.get(`${ns}/${b.name}`) ?? []) identities.add(id);
      }
      break;
    case 'Egress':
      egressIdentities(object as Egress, identities);
      break;
    case 'Retry': {
      const id = subjectIdentity((object as Retry).spec?.source, ns);
      if (id) identities.add(id);
      break;
    }
    case 'UpstreamTrafficSetting': {
      const host = (object as UpstreamTrafficSetting).spec?.host;
      const fqdn = typeof host === 'string' ? /^([a-z0-9-]+)\.([a-z0-9-]+)\.svc\.cluster\.local$/.exec(host) : null;
      if (fqdn) services.add(`${fqdn[2]}/${fqdn[1]}`);
      for (const e of egressesMatching(store, ns, kind, name)) egressIdentities(e, identities);
      break;
    }
  }
  return { all: false, identities, services };
}
