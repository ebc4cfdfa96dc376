import type { ResourceMap } from '../cache/types.js';

/** Marks a name of the base map the client does not hold. */
const NOT_HELD = Symbol('not held');

/**
 * Name → version of what an incremental (delta) ADS client holds of one type, stored as the
 * resource map it was last brought up to date with (the base: the client holds each of its
 * resources that `covers` accepts, at the map's version) and the differences since. After every
 * push the stream calls {@link rebase} with the map it planned, so between pushes the
 * differences are only what a request changed (a subscribe, an unsubscribe, a NACK sends
 * nothing): a thousand streams holding a thousand clusters each share the maps their snapshots
 * already hold instead of keeping a million entries of their own.
 *
 * `covers(name)` is the stream's current subscription (the wildcard, or the names subscribed);
 * the stream keeps the differences exact when it changes (it calls {@link delete} for a name
 * it starts or stops covering that the client does not hold), so the base is read through it
 * only for names whose coverage did not change since the rebase.
 */
export class KnownVersions {
  private base: ResourceMap | undefined;
  private readonly differences = new Map<string, string | typeof NOT_HELD>();

  constructor(private readonly covers: (name: string) => boolean) {}

  /** The version the client holds of `name`; undefined when it holds none. */
  get(name: string): string | undefined {
    const difference = this.differences.get(name);
    if (difference !== undefined) return difference === NOT_HELD ? undefined : difference;
    return this.base !== undefined && this.covers(name) ? this.base.get(name)?.version : undefined;
  }

  /** Whether the client holds a version of `name`. */
  has(name: string): boolean {
    return this.get(name) !== undefined;
  }

  /** The client holds `name` at `version`. */
  set(name: string, version: string): void {
    if (this.base !== undefined && this.covers(name) && this.base.get(name)?.version === version) this.differences.delete(name);
    else this.differences.set(name, version);
  }

  /** The client holds no version of `name`. */
  delete(name: string): void {
    if (this.base?.has(name)) this.differences.set(name, NOT_HELD);
    else this.differences.delete(name);
  }

  /** The names the client holds (each once). */
  *keys(): Generator<string> {
    for (const [name, version] of this.differences) if (version !== NOT_HELD) yield name;
    if (this.base === undefined) return;
    for (const name of this.base.keys()) if (!this.differences.has(name) && this.covers(name)) yield name;
  }

  /** The client now holds exactly the resources of `resources` that `covers` accepts. */
  rebase(resources: ResourceMap): void {
    this.base = resources;
    this.differences.clear();
  }

  /** How many names differ from the base (what this object holds of its own). */
  get differenceCount(): number {
    return this.differences.size;
  }
}
