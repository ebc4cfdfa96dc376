import type { Logger } from 'pino';
import { OBJECT_KINDS, isNamespacedKind, objectKey, objectKeyOf } from './objects.js';
import type { KubeObject, ObjectKind } from './objects.js';
import type { ChangeListener, ObjectChange, StoreReader } from './store.js';
import { compareStrings } from '../util/order.js';

/** One stored object, who contributed it, and its content fingerprint. */
interface Entry {
  readonly object: KubeObject;
  readonly sourceId: string;
  /** {@link stableStringify} of the object: compared to tell "changed" from "unchanged". */
  readonly fingerprint: string;
}

/** Options of {@link ObjectStore}. */
export interface ObjectStoreOptions {
  /** Where a listener that throws is reported; without one the first listener error is rethrown. */
  logger?: Logger;
}

const KIND_ORDER: ReadonlyMap<string, number> = new Map(OBJECT_KINDS.map((k, i) => [k, i]));

/**
 * The in-memory object store every source writes into and the catalog reads from.
 *
 * - Objects are keyed by {@link objectKey} (`Kind/namespace/name`); cluster-scoped kinds
 *   (`Namespace`) have no namespace, and a namespace given on one is dropped.
 * - Each object remembers the source (`sourceId`, e.g. `manifests:examples/bookstore`) that
 *   contributed it. {@link ObjectStore.replaceAll} replaces a source's whole contribution;
 *   {@link ObjectStore.upsert} and {@link ObjectStore.delete} change one object (for
 *   Kubernetes informers). If two sources provide the same key, the latest write wins and the
 *   object then belongs to that source.
 * - Stored objects are deep-frozen: readers must not (and cannot) modify them.
 * - Every write emits at most ONE batch of {@link ObjectChange}s to the listeners, and none
 *   when nothing changed. An object counts as changed when its content differs
 *   (order-insensitive JSON comparison of the whole object).
 * - {@link ObjectStore.list} results are sorted by (namespace, name) and cached per kind
 *   until that kind changes, and per kind + namespace until that kind changes in that
 *   namespace; they are frozen arrays (the same array while unchanged).
 */
export class ObjectStore implements StoreReader {
  readonly #entries = new Map<string, Entry>();
  readonly #byKind = new Map<ObjectKind, Map<string, Entry>>();
  /** The same entries by kind, then namespace (`''` for cluster-scoped kinds). */
  readonly #byKindNamespace = new Map<ObjectKind, Map<string, Map<string, Entry>>>();
  readonly #listCache = new Map<string, readonly KubeObject[]>();
  readonly #listeners = new Set<ChangeListener>();
  readonly #logger: Logger | undefined;
  #revision = 0;

  /** Creates an empty store. */
  constructor(options: ObjectStoreOptions = {}) {
    this.#logger = options.logger;
  }

  /** Incremented by one for every batch of changes emitted; 0 for a store never changed. */
  get revision(): number {
    return this.#revision;
  }

  /** The number of objects in the store, all kinds and sources together. */
  get size(): number {
    return this.#entries.size;
  }

  /** {@inheritDoc StoreReader.get} */
  get<T extends KubeObject = KubeObject>(kind: ObjectKind, namespace: string | undefined, name: string): T | undefined {
    const ns = isNamespacedKind(kind) ? namespace : undefined;
    return this.#entries.get(objectKey(kind, ns, name))?.object as T | undefined;
  }

  /** {@inheritDoc StoreReader.list} The array is frozen and shared between callers until the kind changes. */
  list<T extends KubeObject = KubeObject>(kind: ObjectKind, namespace?: string): readonly T[] {
    const cacheKey = namespace === undefined ? kind : `${kind}/${namespace}`;
    const cached = this.#listCache.get(cacheKey);
    if (cached) return cached as readonly T[];
    // A namespace's list comes from its own entries, so that a change elsewhere neither
    // invalidates nor recomputes it (readers key derived data by its identity).
    const entries = namespace === undefined ? this.#byKind.get(kind) : this.#byKindNamespace.get(kind)?.get(namespace);
    const frozen = Object.freeze([...(entries?.values() ?? [])].map((e) => e.object).sort(compareObjects));
    this.#listCache.set(cacheKey, frozen);
    return frozen as readonly T[];
  }

  /** The id of the source that contributed the object, or undefined if there is no such object. */
  sourceOf(kind: ObjectKind, namespace: string | undefined, name: string): string | undefined {
    const ns = isNamespacedKind(kind) ? namespace : undefined;
    return this.#entries.get(objectKey(kind, ns, name))?.sourceId;
  }

  /**
   * Registers `listener` for every later batch of changes. Listeners are called synchronously,
   * in registration order, after the store has been updated (so they can read the new state).
   * @returns a function that unregisters the listener (idempotent).
   */
  onChange(listener: ChangeListener): () => void {
    // Wrap so the same function registered twice gets two independent subscriptions.
    const wrapped: ChangeListener = (changes) => listener(changes);
    this.#listeners.add(wrapped);
    return () => {
      this.#listeners.delete(wrapped);
    };
  }

  /**
   * Replaces everything `sourceId` contributed with `objects` (the source's complete current
   * set): objects not in the set are deleted, new ones added, and ones whose content differs
   * replaced. Emits one batch with all the changes (sorted by kind, namespace, name), or
   * nothing if the set is unchanged.
   * @param objects the full set; if it holds the same key twice, the last one wins.
   * @returns the changes applied (empty if none).
   */
  replaceAll(sourceId: string, objects: readonly KubeObject[]): readonly ObjectChange[] {
    const incoming = new Map<string, KubeObject>();
    for (const object of objects) {
      const normalized = normalize(object);
      incoming.set(keyOf(normalized), normalized);
    }
    const changes: ObjectChange[] = [];
    for (const [key, entry] of this.#entries) {
      if (entry.sourceId === sourceId && !incoming.has(key)) {
        changes.push(this.#remove(key, entry));
      }
    }
    for (const [key, object] of incoming) {
      const change = this.#put(key, sourceId, object);
      if (change) changes.push(change);
    }
    changes.sort(compareChanges);
    this.#emit(changes);
    return changes;
  }

  /**
   * Adds or replaces one object on behalf of `sourceId` (an informer's add/update event).
   * Emits a one-change batch unless the content is unchanged.
   * @returns the change, or undefined if nothing changed.
   */
  upsert(sourceId: string, object: KubeObject): ObjectChange | undefined {
    const normalized = normalize(object);
    const change = this.#put(keyOf(normalized), sourceId, normalized);
    if (change) this.#emit([change]);
    return change;
  }

  /**
   * Deletes one object (an informer's delete event), whichever source contributed it.
   * @returns the change, or undefined if there was no such object.
   */
  delete(kind: ObjectKind, namespace: string | undefined, name: string): ObjectChange | undefined {
    const key = objectKey(kind, isNamespacedKind(kind) ? namespace : undefined, name);
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    const change = this.#remove(key, entry);
    this.#emit([change]);
    return change;
  }

  #put(key: string, sourceId: string, object: KubeObject): ObjectChange | undefined {
    const previous = this.#entries.get(key);
    // The very object stored before (a source re-sending what it did not re-read): stored
    // objects are frozen, so it cannot have changed.
    if (previous && previous.object === object && previous.sourceId === sourceId) return undefined;
    const fingerprint = stableStringify(object);
    if (previous && previous.fingerprint === fingerprint) {
      if (previous.sourceId !== sourceId) {
        const moved: Entry = { ...previous, sourceId };
        this.#entries.set(key, moved);
        this.#index(key, moved);
      }
      return undefined;
    }
    const entry: Entry = { object: deepFreeze(object), sourceId, fingerprint };
    this.#entries.set(key, entry);
    this.#index(key, entry);
    this.#invalidate(object.kind, object.metadata.namespace);
    return {
      kind: object.kind,
      namespace: object.metadata.namespace,
      name: object.metadata.name,
      oldObject: previous?.object,
      newObject: entry.object,
    };
  }

  #remove(key: string, entry: Entry): ObjectChange {
    this.#entries.delete(key);
    this.#byKind.get(entry.object.kind)?.delete(key);
    this.#byKindNamespace.get(entry.object.kind)?.get(entry.object.metadata.namespace ?? '')?.delete(key);
    this.#invalidate(entry.object.kind, entry.object.metadata.namespace);
    return {
      kind: entry.object.kind,
      namespace: entry.object.metadata.namespace,
      name: entry.object.metadata.name,
      oldObject: entry.object,
      newObject: undefined,
    };
  }

  /** Files `entry` under its kind and its kind + namespace. */
  #index(key: string, entry: Entry): void {
    const { kind, metadata } = entry.object;
    let kindMap = this.#byKind.get(kind);
    if (!kindMap) {
      kindMap = new Map();
      this.#byKind.set(kind, kindMap);
    }
    kindMap.set(key, entry);
    let namespaces = this.#byKindNamespace.get(kind);
    if (!namespaces) {
      namespaces = new Map();
      this.#byKindNamespace.set(kind, namespaces);
    }
    let nsMap = namespaces.get(metadata.namespace ?? '');
    if (!nsMap) {
      nsMap = new Map();
      namespaces.set(metadata.namespace ?? '', nsMap);
    }
    nsMap.set(key, entry);
  }

  /** Forgets the cached lists a change of `kind` in `namespace` makes stale. */
  #invalidate(kind: ObjectKind, namespace: string | undefined): void {
    this.#listCache.delete(kind);
    if (namespace !== undefined) this.#listCache.delete(`${kind}/${namespace}`);
  }

  #emit(changes: readonly ObjectChange[]): void {
    if (changes.length === 0) return;
    this.#revision++;
    const batch = Object.freeze([...changes]);
    let firstError: unknown;
    for (const listener of [...this.#listeners]) {
      try {
        listener(batch);
      } catch (err) {
        if (this.#logger) this.#logger.error({ err }, 'object store listener failed');
        else firstError ??= err;
      }
    }
    if (firstError !== undefined) throw firstError;
  }
}

/** Drops a namespace given on a cluster-scoped object, so keys and reads agree. */
function normalize(object: KubeObject): KubeObject {
  if (isNamespacedKind(object.kind) || object.metadata.namespace === undefined) return object;
  const { namespace: _dropped, ...metadata } = object.metadata;
  return { ...object, metadata };
}

function keyOf(object: KubeObject): string {
  return objectKeyOf(object);
}

function compareObjects(a: KubeObject, b: KubeObject): number {
  return compareStrings(a.metadata.namespace ?? '', b.metadata.namespace ?? '') || compareStrings(a.metadata.name, b.metadata.name);
}

function compareChanges(a: ObjectChange, b: ObjectChange): number {
  return (
    (KIND_ORDER.get(a.kind) ?? 0) - (KIND_ORDER.get(b.kind) ?? 0) ||
    compareStrings(a.namespace ?? '', b.namespace ?? '') ||
    compareStrings(a.name, b.name)
  );
}


/**
 * JSON text of `value` with object keys sorted, so two objects with the same content give the
 * same string whatever their key order. `undefined` fields are left out, as in JSON.
 */
export function stableStringify(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map((v) => stableStringify(v)).join(',')}]`;
  const record = value as Record<string, unknown>;
  const parts: string[] = [];
  for (const key of Object.keys(record).sort()) {
    const v = record[key];
    if (v === undefined || typeof v === 'function') continue;
    parts.push(`${JSON.stringify(key)}:${stableStringify(v)}`);
  }
  return `{${parts.join(',')}}`;
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value as Record<string, unknown>)) deepFreeze(v);
  }
  return value;
}
