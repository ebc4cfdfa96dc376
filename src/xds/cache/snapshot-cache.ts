import { hash } from 'node:crypto';
import type { EncodedAny } from '../../api/codec.js';
import type { TypeUrl } from '../../api/type-urls.js';
import { LayeredResourceMap, SharedResourceMap, VERSION_LENGTH, typeVersion } from './layers.js';
import type { CachedResource, ProxySnapshot, ResourceMap, ResourceName } from './types.js';

/** A resource to put in a snapshot: its xDS name (e.g. a Cluster's `name`) and its encoded `Any`. */
export interface NamedResource {
  readonly name: string;
  readonly resource: EncodedAny;
  /** See {@link CachedResource.references}. */
  readonly references?: readonly ResourceName[];
}

export { VERSION_LENGTH, typeVersion, SharedResourceMap, LayeredResourceMap, sharedLayerOf, sharedLayerChanges, type LayerChanges } from './layers.js';

/**
 * The version of one encoded resource: the first {@link VERSION_LENGTH} hex characters of the
 * SHA-256 of its bytes (one-shot `crypto.hash`: half the cost of a `Hash` object for messages
 * this small). Equal bytes give equal versions, on every controller replica and across
 * restarts, so a reconnecting proxy's `version_info` stays meaningful. Versions are compared
 * within one type and name only, so the type URL is not hashed. Not memoized: a
 * {@link ResourceInterner} remembers the versions of the Buffers it interned.
 */
export function resourceVersion(resource: EncodedAny): string {
  return hash('sha256', resource.value, 'hex').slice(0, VERSION_LENGTH);
}

/**
 * Interns {@link CachedResource}s by type URL, name and version, so a resource that is the same
 * for many proxies (a service's Cluster or ClusterLoadAssignment) is held once, whatever number
 * of snapshots refer to it. Bounded: least recently used entries are forgotten beyond
 * `maxEntries` (forgetting only costs sharing, never correctness). Its owner (the controller,
 * the bench's floor server, a test) creates it and passes it to {@link buildProxySnapshot} and
 * {@link replaceResources}: no module holds one, so two owners in one process share nothing.
 */
export class ResourceInterner {
  private readonly entries = new Map<string, CachedResource>();
  /** The fast path: a resource whose bytes are the very Buffer interned before (shared encodings). */
  private readonly byValue = new WeakMap<Buffer, CachedResource>();
  /** The version of each Buffer hashed ({@link resourceVersion}), so a Buffer shared by many snapshots is hashed once. */
  private readonly versionOfBuffer = new WeakMap<Buffer, string>();
  /** Shared layers by the encoded array they were made from ({@link sharedMap}). */
  private readonly sharedMaps = new WeakMap<readonly NamedResource[], SharedResourceMap>();
  /** Shared layers with some resources replaced, by the layer and the replacements ({@link replacedShared}). */
  private readonly replaced = new WeakMap<SharedResourceMap, Map<string, SharedResourceMap>>();

  /** @param maxEntries how many distinct resources to remember (default 100 000). */
  constructor(private readonly maxEntries = 100_000) {}

  /**
   * Returns the interned resource for `name` and these bytes, creating it if needed (with
   * `references`, which follow from the bytes: the first given for them are kept).
   */
  intern(name: string, resource: EncodedAny, references?: readonly ResourceName[]): CachedResource {
    const known = this.byValue.get(resource.value);
    if (known && known.name === name && known.resource.type_url === resource.type_url) return known;
    const interned = this.internByVersion(name, resource, references);
    this.byValue.set(resource.value, interned);
    return interned;
  }

  /** {@link resourceVersion} of `resource`, remembered by its Buffer (encoded Buffers are never written to). */
  version(resource: EncodedAny): string {
    let version = this.versionOfBuffer.get(resource.value);
    if (version === undefined) {
      version = resourceVersion(resource);
      this.versionOfBuffer.set(resource.value, version);
    }
    return version;
  }

  private internByVersion(name: string, resource: EncodedAny, references: readonly ResourceName[] | undefined): CachedResource {
    const version = this.version(resource);
    const key = `${resource.type_url}\0${name}\0${version}`;
    const found = this.entries.get(key);
    if (found) {
      // Refresh the entry's position: Map keeps insertion order, the first key is the oldest.
      this.entries.delete(key);
      this.entries.set(key, found);
      return found;
    }
    const created: CachedResource = Object.freeze(references === undefined ? { name, version, resource } : { name, version, resource, references });
    this.entries.set(key, created);
    if (this.entries.size > this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    return created;
  }

  /**
   * The {@link SharedResourceMap} of `resources`, one encoded layer (e.g. the upstream Clusters
   * of one outbound view, as `ResourceCheckCache.encodeLayer` gives them): made once per array
   * object (remembered weakly by it), so every snapshot given the same array holds the same map.
   * @throws Error when a resource's `type_url` is not `typeUrl`, or a name appears twice.
   */
  sharedMap(typeUrl: TypeUrl, resources: readonly NamedResource[]): SharedResourceMap {
    let map = this.sharedMaps.get(resources);
    if (!map) {
      map = new SharedResourceMap(typeUrl, resources.map(({ name, resource, references }) => this.internOfType(typeUrl, name, resource, references)));
      this.sharedMaps.set(resources, map);
    }
    if (map.typeUrl !== typeUrl) throw new Error(`snapshot: a shared layer of ${map.typeUrl} listed under ${typeUrl}`);
    return map;
  }

  /**
   * `shared` with `replacements` (interned resources of names it has, each with another
   * version), made once per map and replacements: every proxy whose layer gets the same
   * replacements then holds the same new map.
   */
  replacedShared(shared: SharedResourceMap, replacements: readonly CachedResource[]): SharedResourceMap {
    let byKey = this.replaced.get(shared);
    if (!byKey) this.replaced.set(shared, (byKey = new Map()));
    const key = replacements.map((r) => `${r.name}\0${r.version}`).sort().join('\0');
    let map = byKey.get(key);
    if (!map) {
      map = new SharedResourceMap(shared.typeUrl, withReplacements(shared, replacements).values());
      // Bounded: a map is replaced by few distinct sets (one per push that changes it).
      if (byKey.size >= MAX_REPLACED_PER_MAP) byKey.delete(byKey.keys().next().value!);
      byKey.set(key, map);
    }
    return map;
  }

  /** {@link intern}, checking that the resource is of `typeUrl`. */
  internOfType(typeUrl: TypeUrl, name: string, resource: EncodedAny, references?: readonly ResourceName[]): CachedResource {
    if (resource.type_url !== typeUrl) throw new Error(`snapshot: resource "${name}" has type ${resource.type_url}, listed under ${typeUrl}`);
    return this.intern(name, resource, references);
  }

  /** Number of resources currently remembered. */
  get size(): number {
    return this.entries.size;
  }
}

/** How many replaced versions of one shared map {@link ResourceInterner.replacedShared} remembers. */
const MAX_REPLACED_PER_MAP = 8;

/**
 * Builds an immutable {@link ProxySnapshot} from encoded resources, by type URL.
 * Each resource gets a version (hash of its bytes, {@link resourceVersion}); each type gets a
 * version over its resources ({@link typeVersion}). A type given with an empty list is present
 * with no resources and a version; a type not given at all is absent, which the ADS server
 * treats the same as empty (for LDS/CDS, an empty set tells the proxy to delete them all).
 * A type in `shared` is that shared layer ({@link ResourceInterner.sharedMap}: the same map
 * object in every snapshot given the same layer) with the type's resources of `input` as the
 * proxy's own ({@link LayeredResourceMap}; the shared map itself when it has none).
 * @param interner where identical resources are shared, and their versions remembered (the
 *   caller's: one per controller).
 * @param shared per type, an encoded layer the proxy has in common with others (its resources
 *   are not repeated in `input`).
 * @throws Error when a resource's `type_url` is not the type it is listed under, or a name
 *   appears twice in one type (Envoy rejects duplicate names), own and shared ones together.
 */
export function buildProxySnapshot(
  input: ReadonlyMap<TypeUrl, readonly NamedResource[]>,
  interner: ResourceInterner,
  shared?: ReadonlyMap<TypeUrl, readonly NamedResource[]>,
): ProxySnapshot {
  const resources = new Map<TypeUrl, ResourceMap>();
  const versions = new Map<TypeUrl, string>();
  for (const typeUrl of new Set([...input.keys(), ...(shared?.keys() ?? [])])) {
    const byName = new Map<string, CachedResource>();
    for (const { name, resource, references } of input.get(typeUrl) ?? []) {
      if (byName.has(name)) throw new Error(`snapshot: duplicate ${typeUrl} resource name "${name}"`);
      byName.set(name, interner.internOfType(typeUrl, name, resource, references));
    }
    const layer = shared?.get(typeUrl);
    const map = layer === undefined ? byName : interner.sharedMap(typeUrl, layer);
    const typeMap = map instanceof SharedResourceMap && byName.size > 0 ? new LayeredResourceMap(map, byName) : map;
    resources.set(typeUrl, typeMap);
    versions.set(typeUrl, mapVersion(typeMap));
  }
  return Object.freeze({ resources, versions });
}

/** The version of a resource map ({@link typeVersion}), from its layers when it has some. */
function mapVersion(map: ResourceMap): string {
  if (map instanceof SharedResourceMap) return map.version;
  if (map instanceof LayeredResourceMap) return map.version();
  return typeVersion(map.values());
}

/**
 * `map` with `replacements` (interned, of names it has, with other versions): a shared layer's
 * replaced once for every proxy that has it ({@link ResourceInterner.replacedShared}), own
 * resources in a copy of the own map.
 */
function replacedMap(map: ResourceMap, replacements: readonly CachedResource[], interner: ResourceInterner): ResourceMap {
  if (map instanceof SharedResourceMap) return interner.replacedShared(map, replacements);
  if (map instanceof LayeredResourceMap) {
    const inShared = replacements.filter((r) => map.shared.has(r.name));
    const inOwn = replacements.filter((r) => !map.shared.has(r.name));
    const own = inOwn.length > 0 ? withReplacements(map.own, inOwn) : map.own;
    return new LayeredResourceMap(inShared.length > 0 ? interner.replacedShared(map.shared, inShared) : map.shared, own);
  }
  return withReplacements(map, replacements);
}

/** A copy of `map` with each of `replacements` set under its name. */
function withReplacements(map: ResourceMap, replacements: readonly CachedResource[]): Map<string, CachedResource> {
  const copy = new Map(map);
  for (const r of replacements) copy.set(r.name, r);
  return copy;
}

/**
 * `snapshot` with some resources of one type replaced by new encodings of the same names (a
 * name the snapshot does not have is left out: this never adds a resource). Every other type
 * keeps its resource map and version as they are; `typeUrl`'s version is computed again. A
 * shared layer keeps being shared: its replacement is made once for every proxy that has it.
 * Returns `snapshot` itself when nothing differs.
 * @param interner where identical resources are shared (the caller's, as for {@link buildProxySnapshot}).
 * @throws Error when a replacement's `type_url` is not `typeUrl`.
 */
export function replaceResources(snapshot: ProxySnapshot, typeUrl: TypeUrl, replacements: readonly NamedResource[], interner: ResourceInterner): ProxySnapshot {
  const current = snapshot.resources.get(typeUrl);
  if (!current) return snapshot;
  const changed: CachedResource[] = [];
  for (const { name, resource, references } of replacements) {
    if (resource.type_url !== typeUrl) throw new Error(`snapshot: resource "${name}" has type ${resource.type_url}, replaced under ${typeUrl}`);
    const old = current.get(name);
    if (!old) continue;
    const cached = interner.intern(name, resource, references);
    if (cached.version !== old.version) changed.push(cached);
  }
  if (changed.length === 0) return snapshot;
  const next = replacedMap(current, changed, interner);
  const resources = new Map(snapshot.resources);
  resources.set(typeUrl, next);
  const versions = new Map(snapshot.versions);
  versions.set(typeUrl, mapVersion(next));
  return Object.freeze({ resources, versions });
}

/**
 * Called with a proxy's new snapshot each time one is set. Must not throw and should return
 * quickly (queue work, don't do it): it runs inside {@link SnapshotCache.setSnapshot}.
 */
export type SnapshotListener = (snapshot: ProxySnapshot) => void;

/**
 * What the ADS server needs from a cache (go-control-plane's `ConfigWatcher` idea): read a
 * proxy's current snapshot, and be told when it changes. The server depends on this, never on
 * {@link SnapshotCache}, so tests and other caches can stand in.
 */
export interface SnapshotWatcher {
  /** The current snapshot of the proxy with this UUID, or `undefined` when none was set yet. */
  getSnapshot(proxyUuid: string): ProxySnapshot | undefined;
  /**
   * Calls `listener` with every snapshot set for this proxy from now on (not with the current
   * one: read that with {@link SnapshotWatcher.getSnapshot} after watching, so no update is
   * missed in between).
   * @returns a function that cancels the watch (idempotent).
   */
  watch(proxyUuid: string, listener: SnapshotListener): () => void;
}

/** Proxy snapshots by proxy UUID, with watches. Implements {@link SnapshotWatcher}. */
export class SnapshotCache implements SnapshotWatcher {
  private readonly snapshots = new Map<string, ProxySnapshot>();
  private readonly listeners = new Map<string, Set<SnapshotListener>>();

  /**
   * Stores the proxy's snapshot and calls its watchers, synchronously, with it (also when it is
   * the same as before: watchers compare versions themselves).
   * @throws AggregateError of the listeners' errors, after every listener was called.
   */
  setSnapshot(proxyUuid: string, snapshot: ProxySnapshot): void {
    this.snapshots.set(proxyUuid, snapshot);
    const set = this.listeners.get(proxyUuid);
    if (!set) return;
    const errors: unknown[] = [];
    for (const listener of [...set]) {
      try {
        listener(snapshot);
      } catch (err) {
        errors.push(err);
      }
    }
    if (errors.length > 0) throw new AggregateError(errors, `snapshot listener failed for proxy ${proxyUuid}`);
  }

  /** {@inheritDoc SnapshotWatcher.getSnapshot} */
  getSnapshot(proxyUuid: string): ProxySnapshot | undefined {
    return this.snapshots.get(proxyUuid);
  }

  /** Forgets the proxy's snapshot (e.g. when it disconnects). Watches stay in place. */
  clearSnapshot(proxyUuid: string): void {
    this.snapshots.delete(proxyUuid);
  }

  /** {@inheritDoc SnapshotWatcher.watch} */
  watch(proxyUuid: string, listener: SnapshotListener): () => void {
    let set = this.listeners.get(proxyUuid);
    if (!set) {
      set = new Set();
      this.listeners.set(proxyUuid, set);
    }
    // Wrap so the same function can watch twice and each cancel removes only its own watch.
    const entry: SnapshotListener = (s) => listener(s);
    set.add(entry);
    return () => {
      const current = this.listeners.get(proxyUuid);
      if (!current) return;
      current.delete(entry);
      if (current.size === 0) this.listeners.delete(proxyUuid);
    };
  }

  /** UUIDs of the proxies that have a snapshot. */
  proxyUuids(): string[] {
    return [...this.snapshots.keys()];
  }
}
