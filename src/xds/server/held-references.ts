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
import type { CachedResource, ResourceName } from '../cache/types.js';

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
