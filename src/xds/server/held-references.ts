/**
 * The xDS resources a Listener or Cluster makes its client fetch over ADS, as a real Envoy does
 * (xDS protocol, "Resource warming": a listener warms until the route configurations its HTTP
 * connection managers name and the secrets its TLS contexts name arrive; a cluster until its
 * ClusterLoadAssignment, for an EDS cluster, and its secrets arrive; gRFC A27/A28 clients the
 * same for RDS and EDS). A stream counts a snapshot as held only when these are ACKed too.
 *
 * Taken from the resource's `references` when its generator gave them (the controller does),
 * else read from the encoded resource, decoded once per {@link CachedResource} object by the
 * {@link HeldReferences} that a server's streams share (resources are interned across snapshots
 * and streams, so a push decodes only what changed).
 */
import { decodeAny } from '../../api/codec.js';
import { TypeUrl } from '../../api/type-urls.js';
import { resourcesChangedSince } from '../cache/layers.js';
import type { CachedResource, ProxySnapshot, ResourceMap, ResourceName } from '../cache/types.js';

/** A resource of another type that a Listener or Cluster names: its type URL and name. */
export type HeldReference = ResourceName;

/**
 * What `resource` (a Listener or a Cluster) makes its client fetch: the `route_config_name` of
 * every `rds` (HttpConnectionManager), the name of every `SdsSecretConfig` (an object with
 * `name` and `sds_config`: TLS certificates, validation contexts), and, for a cluster of type
 * EDS, its ClusterLoadAssignment (`eds_cluster_config.service_name`, else the cluster's name).
 * Resources of other types, and a resource that does not decode, name nothing.
 */
export function heldReferences(typeUrl: TypeUrl, resource: CachedResource, read: (typeUrl: TypeUrl, resource: CachedResource) => readonly HeldReference[] = referencesInBytes): readonly HeldReference[] {
  if (typeUrl !== TypeUrl.Listener && typeUrl !== TypeUrl.Cluster) return [];
  // Said by the generator (the controller's snapshots): no decoding.
  if (resource.references !== undefined) return resource.references;
  return read(typeUrl, resource);
}

/** What a Listener or Cluster without `references` names, read from its encoded bytes (see {@link heldReferences}). */
function referencesInBytes(typeUrl: TypeUrl, resource: CachedResource): readonly HeldReference[] {
  let decoded: Record<string, unknown>;
  try {
    decoded = decodeAny(resource.resource);
  } catch {
    decoded = {};
  }
  const out = new Map<string, HeldReference>();
  const add = (t: TypeUrl, name: unknown): void => {
    if (typeof name === 'string' && name !== '') out.set(`${t} ${name}`, { typeUrl: t, name });
  };
  if (typeUrl === TypeUrl.Cluster && decoded['type'] === 'EDS') {
    const eds = decoded['eds_cluster_config'] as { service_name?: unknown } | undefined;
    add(TypeUrl.ClusterLoadAssignment, typeof eds?.service_name === 'string' && eds.service_name !== '' ? eds.service_name : decoded['name']);
  }
  const pending: unknown[] = [decoded];
  while (pending.length > 0) {
    const value = pending.pop();
    if (Array.isArray(value)) {
      pending.push(...(value as unknown[]));
      continue;
    }
    if (!value || typeof value !== 'object') continue;
    const o = value as Record<string, unknown>;
    const rds = o['rds'] as { route_config_name?: unknown } | undefined;
    if (rds && typeof rds === 'object') add(TypeUrl.RouteConfiguration, rds.route_config_name);
    if ('sds_config' in o) add(TypeUrl.Secret, o['name']);
    for (const v of Object.values(o)) if (v && typeof v === 'object') pending.push(v);
  }
  return [...out.values()];
}

/** {@link heldReferences}, those read from the bytes remembered per encoded resource object (immutable, shared by snapshots and streams), held weakly. */
export class HeldReferences {
  readonly #decoded = new WeakMap<CachedResource, readonly HeldReference[]>();
  readonly #read = (typeUrl: TypeUrl, resource: CachedResource): readonly HeldReference[] => {
    let found = this.#decoded.get(resource);
    if (!found) this.#decoded.set(resource, (found = referencesInBytes(typeUrl, resource)));
    return found;
  };

  /** {@link heldReferences} of `resource`, decoded once per object when it carries no `references`. */
  of(typeUrl: TypeUrl, resource: CachedResource): readonly HeldReference[] {
    return heldReferences(typeUrl, resource, this.#read);
  }
}

/** A stream's subscription to one type: every resource of it (`wildcard`) or the `names`. */
export interface SubscriptionView {
  readonly wildcard: boolean;
  readonly names: ReadonlySet<string>;
}

/** How many references a held snapshot may lack for the next one to be checked against it (beyond: the next is checked whole). */
const MAX_ABSENT_REFERENCES = 256;

/**
 * Whether a stream holds what a snapshot's Listeners and Clusters make its client fetch: every
 * reference ({@link heldReferences}) of each Listener and Cluster it subscribes to is subscribed
 * to as well, wherever the snapshot has that resource (one it lacks: nothing to hold yet).
 *
 * A push changes few of a snapshot's resources, so each check after one that found a snapshot
 * held looks only at the Listeners and Clusters that differ from that snapshot's (through the
 * shared layers' changes, one walk per pair of layers for every stream) and at the references
 * it lacked. That holds while no subscription narrowed and those to Listeners and Clusters did
 * not change: the caller counts such changes in the `epoch` it passes; another epoch than the
 * last held snapshot's makes a whole check. One per stream.
 */
export class HeldSnapshotCheck {
  #since?: { readonly snapshot: ProxySnapshot; readonly epoch: number; readonly absent: readonly HeldReference[] };

  constructor(private readonly references: HeldReferences) {}

  /**
   * Whether `subscriptions` hold `snapshot`'s references (see the class).
   * @param epoch the caller's count of narrowed subscriptions and changed Listener or Cluster ones.
   */
  holds(snapshot: ProxySnapshot, subscriptions: ReadonlyMap<TypeUrl, SubscriptionView>, epoch: number): boolean {
    const since = this.#since?.epoch === epoch ? this.#since : undefined;
    const absent: HeldReference[] = [];
    if (!this.subscribed(snapshot, since?.snapshot, subscriptions, absent)) return false;
    for (const ref of since?.absent ?? []) {
      if (!snapshot.resources.get(ref.typeUrl)?.has(ref.name)) absent.push(ref);
      else if (!subscribes(subscriptions, ref)) {
        // Perhaps named only by a resource no longer held: the whole snapshot tells.
        absent.length = 0;
        if (!this.subscribed(snapshot, undefined, subscriptions, absent)) return false;
        break;
      }
    }
    this.#since = absent.length <= MAX_ABSENT_REFERENCES ? { snapshot, epoch, absent } : undefined;
    return true;
  }

  /**
   * Whether the references that `snapshot` has, of its subscribed Listeners and Clusters (those
   * that differ from `since`'s, when given), are subscribed to; those it lacks go to `absent`.
   */
  private subscribed(snapshot: ProxySnapshot, since: ProxySnapshot | undefined, subscriptions: ReadonlyMap<TypeUrl, SubscriptionView>, absent: HeldReference[]): boolean {
    for (const type of [TypeUrl.Listener, TypeUrl.Cluster]) {
      const subscription = subscriptions.get(type);
      const resources = snapshot.resources.get(type);
      if (!subscription || !resources) continue;
      const before = since?.resources.get(type);
      let held: Iterable<CachedResource>;
      if (!subscription.wildcard) held = namedChangedSince(subscription.names, resources, before);
      else held = before ? resourcesChangedSince(before, resources) : resources.values();
      for (const resource of held) {
        for (const ref of this.references.of(type, resource)) {
          if (!snapshot.resources.get(ref.typeUrl)?.has(ref.name)) absent.push(ref);
          else if (!subscribes(subscriptions, ref)) return false;
        }
      }
    }
    return true;
  }
}

/** Whether `subscriptions` cover `ref` (its type as wildcard, or its name). */
function subscribes(subscriptions: ReadonlyMap<TypeUrl, SubscriptionView>, ref: HeldReference): boolean {
  const wanted = subscriptions.get(ref.typeUrl);
  return wanted !== undefined && (wanted.wildcard || wanted.names.has(ref.name));
}

/** The resources of `resources` named in `names` that `before` lacks or holds at another version (all of them without `before`). */
function* namedChangedSince(names: ReadonlySet<string>, resources: ResourceMap, before: ResourceMap | undefined): Generator<CachedResource> {
  for (const name of names) {
    const r = resources.get(name);
    if (r && (before === undefined || before.get(name)?.version !== r.version)) yield r;
  }
}
