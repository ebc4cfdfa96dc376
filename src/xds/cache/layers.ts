/**
 * Resource maps made of layers: a {@link SharedResourceMap} (one object for every proxy that
 * gets the same resources of a type, e.g. the upstream Clusters of one outbound view) and a
 * {@link LayeredResourceMap} (a shared layer plus the proxy's own resources). Both are
 * `ReadonlyMap<string, CachedResource>`s, so a stream reads them as any `ResourceMap`; what they
 * add is identity: a shared layer is the same object in every snapshot that has it, and in the
 * next generation's snapshots while its resources are unchanged, so work done once for it (its
 * version, its encodings, what a stream sent of it) holds for every proxy that has it.
 * Versions are those of `typeVersion` (a hash over the sorted `name:version` pairs) whatever
 * the layering: a layered map and a plain map of the same resources have the same version.
 */
import { hash } from 'node:crypto';
import type { TypeUrl } from '../../api/type-urls.js';
import type { CachedResource } from './types.js';

/** Length, in hex characters, of resource and type versions (64 bits of SHA-256). */
export const VERSION_LENGTH = 16;

/** The text `typeVersion` hashes for one resource: `name:version` and a newline. */
function pairLine(r: CachedResource): string {
  return `${r.name}:${r.version}\n`;
}

/** The version of a set of resources from their {@link pairLine}s, sorted and joined. */
function versionOfLines(text: string): string {
  return hash('sha256', text, 'hex').slice(0, VERSION_LENGTH);
}

/**
 * The version of a set of resources of one type (the SotW `version_info`): a hash over the
 * sorted `name:version` pairs, so it changes when any resource is added, removed or changed,
 * and does not depend on insertion order. The empty set has a version too (a hash of nothing).
 */
export function typeVersion(resources: Iterable<CachedResource>): string {
  const lines: string[] = [];
  for (const r of resources) lines.push(pairLine(r));
  lines.sort();
  return versionOfLines(lines.join(''));
}

/**
 * The resources of one type that many proxy snapshots hold alike (the Clusters or
 * ClusterLoadAssignments of every proxy with one outbound view), interned, with their
 * `typeVersion`. Immutable. Made by `ResourceInterner.sharedMap`, which gives the same object
 * for the same encoded layer: compare two of them by identity first (the same object: the same
 * resources), e.g. to skip a layer a delta stream already sent.
 */
export class SharedResourceMap implements ReadonlyMap<string, CachedResource> {
  readonly [Symbol.toStringTag] = 'SharedResourceMap';
  /** `typeVersion` of its resources. */
  readonly version: string;
  private readonly byName: ReadonlyMap<string, CachedResource>;
  /** The {@link pairLine}s of the resources, sorted, and where each starts in {@link text}. */
  private readonly lines: readonly string[];
  private readonly offsets: readonly number[];
  private readonly text: string;
  /** {@link sharedLayerChanges} from each layer before to this one, remembered weakly by the layer before. */
  private readonly changesFrom = new WeakMap<SharedResourceMap, LayerChanges>();

  /**
   * @param typeUrl the type of every resource.
   * @throws Error when a name appears twice (Envoy rejects duplicate names).
   */
  constructor(
    readonly typeUrl: TypeUrl,
    resources: Iterable<CachedResource>,
  ) {
    const byName = new Map<string, CachedResource>();
    for (const r of resources) {
      if (byName.has(r.name)) throw new Error(`snapshot: duplicate ${typeUrl} resource name "${r.name}"`);
      byName.set(r.name, r);
    }
    this.byName = byName;
    const lines = [...byName.values()].map(pairLine).sort();
    const offsets: number[] = [];
    let at = 0;
    for (const line of lines) {
      offsets.push(at);
      at += line.length;
    }
    offsets.push(at);
    this.lines = lines;
    this.offsets = offsets;
    this.text = lines.join('');
    this.version = versionOfLines(this.text);
  }

  get size(): number {
    return this.byName.size;
  }
  /** {@link sharedLayerChanges} from `before` to this layer, walked once per `before`. */
  changesSince(before: SharedResourceMap): LayerChanges {
    if (before === this) return NO_CHANGES;
    let found = this.changesFrom.get(before);
    if (!found) {
      const changed: CachedResource[] = [];
      for (const r of this.byName.values()) if (before.get(r.name)?.version !== r.version) changed.push(r);
      const removed: string[] = [];
      for (const name of before.keys()) if (!this.byName.has(name)) removed.push(name);
      found = Object.freeze({ changed, removed });
      this.changesFrom.set(before, found);
    }
    return found;
  }
  get(name: string): CachedResource | undefined {
    return this.byName.get(name);
  }
  has(name: string): boolean {
    return this.byName.has(name);
  }
  keys(): MapIterator<string> {
    return this.byName.keys();
  }
  values(): MapIterator<CachedResource> {
    return this.byName.values();
  }
  entries(): MapIterator<[string, CachedResource]> {
    return this.byName.entries();
  }
  [Symbol.iterator](): MapIterator<[string, CachedResource]> {
    return this.byName.entries();
  }
  forEach(callback: (value: CachedResource, key: string, map: ReadonlyMap<string, CachedResource>) => void, thisArg?: unknown): void {
    for (const [k, v] of this.byName) callback.call(thisArg, v, k, this);
  }

  /**
   * `typeVersion` of this map's resources and `own` together (`own`'s names not in this map),
   * without sorting this map's pairs again: `own`'s lines are placed among the sorted ones.
   */
  versionWith(own: Iterable<CachedResource>): string {
    const added = [...own].map(pairLine).sort();
    if (added.length === 0) return this.version;
    const pieces: string[] = [];
    let from = 0;
    for (const line of added) {
      // First of this map's lines sorting after `line`.
      let lo = from;
      let hi = this.lines.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (this.lines[mid]! < line) lo = mid + 1;
        else hi = mid;
      }
      pieces.push(this.text.slice(this.offsets[from], this.offsets[lo]), line);
      from = lo;
    }
    pieces.push(this.text.slice(this.offsets[from]));
    return versionOfLines(pieces.join(''));
  }
}

/**
 * A proxy's resources of one type: a {@link SharedResourceMap} and the proxy's own resources
 * (no name in both). Immutable. Iterates the shared resources, then the own ones.
 */
export class LayeredResourceMap implements ReadonlyMap<string, CachedResource> {
  readonly [Symbol.toStringTag] = 'LayeredResourceMap';

  /** @throws Error when a name of `own` is also in `shared`. */
  constructor(
    readonly shared: SharedResourceMap,
    readonly own: ReadonlyMap<string, CachedResource>,
  ) {
    for (const name of own.keys()) if (shared.has(name)) throw new Error(`snapshot: duplicate ${shared.typeUrl} resource name "${name}"`);
  }

  /** `typeVersion` of every resource of the map. */
  version(): string {
    return this.shared.versionWith(this.own.values());
  }

  get size(): number {
    return this.shared.size + this.own.size;
  }
  get(name: string): CachedResource | undefined {
    return this.own.get(name) ?? this.shared.get(name);
  }
  has(name: string): boolean {
    return this.own.has(name) || this.shared.has(name);
  }
  *keys(): MapIterator<string> {
    yield* this.shared.keys();
    yield* this.own.keys();
  }
  *values(): MapIterator<CachedResource> {
    yield* this.shared.values();
    yield* this.own.values();
  }
  *entries(): MapIterator<[string, CachedResource]> {
    yield* this.shared.entries();
    yield* this.own.entries();
  }
  [Symbol.iterator](): MapIterator<[string, CachedResource]> {
    return this.entries();
  }
  forEach(callback: (value: CachedResource, key: string, map: ReadonlyMap<string, CachedResource>) => void, thisArg?: unknown): void {
    for (const [k, v] of this.entries()) callback.call(thisArg, v, k, this);
  }
}

/** The shared layer of a resource map, when it has one (the map itself for a {@link SharedResourceMap}). */
export function sharedLayerOf(map: ReadonlyMap<string, CachedResource>): SharedResourceMap | undefined {
  if (map instanceof SharedResourceMap) return map;
  if (map instanceof LayeredResourceMap) return map.shared;
  return undefined;
}

/** What changed from one shared layer to another: resources added or with another version, and names gone. */
export interface LayerChanges {
  readonly changed: readonly CachedResource[];
  readonly removed: readonly string[];
}

/**
 * What a holder of every resource of `before` (at its versions) must be sent to hold `after`:
 * the resources of `after` it lacks or holds at another version, and the names of `before`
 * that `after` lacks. Computed once per pair of layers (remembered by `after`, weakly by
 * `before`), so the streams of every proxy moving from one shared layer to the next share one
 * walk of it; nothing when they are the same object. For a delta stream that knows it holds
 * `before` exactly (e.g. it recorded the layer it last sent in full, and its ACK).
 */
export function sharedLayerChanges(before: SharedResourceMap, after: SharedResourceMap): LayerChanges {
  return after.changesSince(before);
}

const NO_CHANGES: LayerChanges = Object.freeze({ changed: [], removed: [] });

/**
 * The resources of `after` that `before` lacks or holds at another version. When both maps have
 * a shared layer: that layer's changes ({@link sharedLayerChanges}, one walk per pair of layers
 * for every stream) and `after`'s own resources that differ; else a walk of `after`.
 */
export function resourcesChangedSince(before: ReadonlyMap<string, CachedResource>, after: ReadonlyMap<string, CachedResource>): CachedResource[] {
  const [beforeShared, afterShared] = [sharedLayerOf(before), sharedLayerOf(after)];
  const changed: CachedResource[] = [];
  const walked = beforeShared && afterShared ? (after instanceof LayeredResourceMap ? after.own : undefined) : after;
  if (beforeShared && afterShared) for (const r of afterShared.changesSince(beforeShared).changed) changed.push(r);
  for (const r of walked?.values() ?? []) if (before.get(r.name)?.version !== r.version) changed.push(r);
  return changed;
}
