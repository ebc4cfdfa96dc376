/** Code-unit order of two strings (what `<` does), as a `sort` comparator: -1, 0 or 1. */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * The index of the first element of `sorted` (ascending, as `<` orders its elements) that is not
 * below `value` (`sorted.length` when none): binary search, O(log n).
 */
export function lowerBound<T extends number | string>(sorted: readonly T[], value: T): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Sorts objects by their `name` ({@link compareStrings}). */
export function byName(a: { readonly name: string }, b: { readonly name: string }): number {
  return compareStrings(a.name, b.name);
}

/** Sorts `[key, value]` entries (of a Map or `Object.entries`) by key ({@link compareStrings}). */
export function byKey(a: readonly [string, unknown], b: readonly [string, unknown]): number {
  return compareStrings(a[0], b[0]);
}
