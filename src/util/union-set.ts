/**
 * A read-only set that is the union of two others, without copying them: a large set many
 * owners share (e.g. the services of one outbound view) and a small one of each owner's own.
 */
export class UnionSet<T> implements ReadonlySet<T> {
  readonly [Symbol.toStringTag] = 'UnionSet';

  /**
   * @param shared the set several unions hold (not copied: it must not change afterwards).
   * @param own members of this union alone; those also in `shared` count once.
   */
  constructor(
    readonly shared: ReadonlySet<T>,
    own: Iterable<T>,
  ) {
    const extra = new Set<T>();
    for (const x of own) if (!shared.has(x)) extra.add(x);
    this.own = extra;
  }

  /** The members not in {@link shared}. */
  readonly own: ReadonlySet<T>;

  get size(): number {
    return this.shared.size + this.own.size;
  }
  has(value: T): boolean {
    return this.own.has(value) || this.shared.has(value);
  }
  *values(): SetIterator<T> {
    yield* this.shared;
    yield* this.own;
  }
  keys(): SetIterator<T> {
    return this.values();
  }
  *entries(): SetIterator<[T, T]> {
    for (const x of this.values()) yield [x, x];
  }
  [Symbol.iterator](): SetIterator<T> {
    return this.values();
  }
  forEach(callback: (value: T, key: T, set: ReadonlySet<T>) => void, thisArg?: unknown): void {
    for (const x of this.values()) callback.call(thisArg, x, x, this);
  }
}
