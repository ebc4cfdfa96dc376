/**
 * Per connected proxy, which MeshSnapshot generations each of its recent snapshots is right for,
 * so that "the proxy ACKed snapshot S" can be read as "the proxy holds a configuration right
 * for generation G". Kept by the controller at each snapshot it sets and each configuration that
 * fails; bounded (the current snapshot and {@link MAX_RETIRED} before it per proxy).
 */

/** How many snapshots a proxy had before its current one are remembered. */
export const MAX_RETIRED = 4;

interface ProxyHistory<S extends object> {
  /**
   * The newest generation the current snapshot is known right for when a configuration after it
   * failed (validation, generation) or it is a partial first one (0): the proxy kept it. Undefined
   * while it is the proxy's whole configuration.
   */
  cap: number | undefined;
  /** Earlier snapshots, newest first, each with the newest generation it was right for. */
  readonly retired: { readonly snapshot: S; readonly through: number }[];
}

/** What the controller knows of a proxy's current snapshot, for {@link SnapshotHistory.through}. */
export interface CurrentConfiguration<S extends object> {
  /** The snapshot the proxy is served now. */
  readonly snapshot: S | undefined;
  /** The generation it was generated (or confirmed) at (the registry's `generation`). */
  readonly generation: number | undefined;
  /** The newest generation whose push is complete: a proxy it did not pick is unaffected up to it. */
  readonly settled: number;
}

/** See the module comment. `S` is the snapshot type (compared by identity). */
export class SnapshotHistory<S extends object> {
  private readonly byUuid = new Map<string, ProxyHistory<S>>();

  private entry(uuid: string): ProxyHistory<S> {
    let e = this.byUuid.get(uuid);
    if (!e) {
      e = { cap: undefined, retired: [] };
      this.byUuid.set(uuid, e);
    }
    return e;
  }

  /** The newest generation the current snapshot is right for (undefined: none yet). */
  private currentThrough(e: ProxyHistory<S> | undefined, current: CurrentConfiguration<S>): number | undefined {
    if (current.generation === undefined) return undefined;
    if (e?.cap !== undefined) return e.cap;
    return Math.max(current.generation, current.settled);
  }

  /** The proxy's snapshot `current.snapshot` is replaced by a newer one (call before its state is updated). */
  replaced(uuid: string, current: CurrentConfiguration<S>): void {
    const e = this.entry(uuid);
    const through = this.currentThrough(e, current);
    if (current.snapshot && through !== undefined) {
      e.retired.unshift({ snapshot: current.snapshot, through });
      if (e.retired.length > MAX_RETIRED) e.retired.pop();
    }
    e.cap = undefined;
  }

  /** Its configuration for `generation` failed: the snapshot it keeps is right up to the generation before, at most. */
  failed(uuid: string, generation: number): void {
    const e = this.entry(uuid);
    e.cap = Math.min(e.cap ?? Infinity, generation - 1);
  }

  /** Its current snapshot is a partial first configuration (some resources left out): right for no generation. */
  partial(uuid: string): void {
    this.entry(uuid).cap = 0;
  }

  /** Its current snapshot is its whole configuration for the generation it was made at. */
  complete(uuid: string): void {
    const e = this.byUuid.get(uuid);
    if (e) e.cap = undefined;
  }

  /** The proxy left: forget it. */
  forget(uuid: string): void {
    this.byUuid.delete(uuid);
  }

  /**
   * The newest generation `snapshot` (one the proxy was served) is right for, or undefined when it
   * is none of the proxy's remembered snapshots (or right for none).
   */
  through(uuid: string, snapshot: S, current: CurrentConfiguration<S>): number | undefined {
    const e = this.byUuid.get(uuid);
    if (snapshot === current.snapshot) return this.currentThrough(e, current);
    return e?.retired.find((r) => r.snapshot === snapshot)?.through;
  }
}
