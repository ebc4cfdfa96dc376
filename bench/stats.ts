/** Order statistics of the benchmark's samples. */

/** Nearest-rank percentile of sorted values; null when empty. */
export function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** The median of `values`, in any order: their nearest-rank 50th percentile (the lower middle one for an even count); null when empty. */
export function median(values: readonly number[]): number | null {
  return percentile([...values].sort((a, b) => a - b), 50);
}
