/**
 * A bound on how often something is done per key (e.g. one kind of log line): at most `limit`
 * times per `windowMs` window; the rest are counted, and the next one allowed says how many
 * were left out. Windows are fixed (they start at the first event after the previous one ended).
 */
export class RateLimiter {
  private readonly windows = new Map<string, { start: number; used: number; suppressed: number }>();

  /**
   * @param limit events allowed per window and key (a positive integer).
   * @param windowMs window length, in ms.
   * @param now the clock, in ms (default `Date.now`).
   * @param maxKeys keys remembered at most; past it, the oldest window is forgotten (default 1000).
   */
  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly now: () => number = Date.now,
    private readonly maxKeys = 1000,
  ) {}

  /**
   * Takes one event of `key`.
   * @returns undefined when it is over the limit (suppressed); else how many events of `key` were
   *   suppressed since the last allowed one (0 usually).
   */
  take(key: string): number | undefined {
    const now = this.now();
    let w = this.windows.get(key);
    if (!w || now - w.start >= this.windowMs) {
      const suppressed = w?.suppressed ?? 0;
      this.windows.delete(key);
      if (this.windows.size >= this.maxKeys) this.windows.delete(this.windows.keys().next().value!);
      w = { start: now, used: 0, suppressed };
      this.windows.set(key, w);
    }
    if (w.used >= this.limit) {
      w.suppressed++;
      return undefined;
    }
    w.used++;
    const suppressed = w.suppressed;
    w.suppressed = 0;
    return suppressed;
  }

  /** Events taken and suppressed since the last allowed one of their key, over every key remembered. */
  suppressedSinceAllowed(): number {
    let n = 0;
    for (const w of this.windows.values()) n += w.suppressed;
    return n;
  }
}
