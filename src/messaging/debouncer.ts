/** Timer functions, injectable for tests (the shape of Node's `setTimeout`/`clearTimeout`). */
export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
  /** Current time in ms. */
  now(): number;
}

/** Node's real timers. */
export const REAL_TIMERS: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
  now: () => Date.now(),
};

/** Options of {@link Debouncer}. */
export interface DebounceOptions {
  /** Quiet period: flush when no event came for this long, in ms. */
  readonly quietMs: number;
  /** Upper bound on how long the first pending event may wait, in ms. */
  readonly maxDelayMs: number;
  readonly timers?: Timers;
}

/**
 * Coalesces events into batches: events are merged with `merge` and `flush` is called with
 * the merged value once no event arrived for `quietMs`, or `maxDelayMs` after the first
 * pending event, whichever comes first. Events are never dropped: an event that arrives
 * while `flush` runs starts the next batch. `flush` runs one at a time (an async flush is
 * awaited before the next one starts).
 */
export class Debouncer<T> {
  private pending: T | undefined;
  private hasPending = false;
  private firstAt = 0;
  private timer: unknown;
  private flushing: Promise<void> | undefined;
  private readonly timers: Timers;

  /**
   * @param merge combines the pending value with a new event (pending is undefined for the first).
   * @param flush receives each merged batch; errors it throws are passed to `onError`.
   */
  constructor(
    private readonly options: DebounceOptions,
    private readonly merge: (pending: T | undefined, event: T) => T,
    private readonly flush: (batch: T) => void | Promise<void>,
    private readonly onError: (err: unknown) => void = () => {},
  ) {
    this.timers = options.timers ?? REAL_TIMERS;
  }

  /** Adds an event to the pending batch and (re)arms the timer. */
  push(event: T): void {
    const now = this.timers.now();
    if (!this.hasPending) this.firstAt = now;
    this.pending = this.merge(this.pending, event);
    this.hasPending = true;
    this.arm(now);
  }

  private arm(now: number): void {
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    const wait = Math.max(0, Math.min(this.options.quietMs, this.firstAt + this.options.maxDelayMs - now));
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      void this.run();
    }, wait);
  }

  private async run(): Promise<void> {
    if (this.flushing) {
      // A flush is in progress: the pending batch goes right after it.
      await this.flushing;
      if (this.timer !== undefined || !this.hasPending) return;
    }
    if (!this.hasPending) return;
    const batch = this.pending as T;
    this.pending = undefined;
    this.hasPending = false;
    this.flushing = (async () => {
      try {
        await this.flush(batch);
      } catch (err) {
        this.onError(err);
      }
    })();
    await this.flushing;
    this.flushing = undefined;
  }

  /** Flushes the pending batch now (if any) and waits for it. */
  async flushNow(): Promise<void> {
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    this.timer = undefined;
    await this.run();
  }

  /** Drops the timer; pending events are discarded. */
  stop(): void {
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    this.timer = undefined;
    this.pending = undefined;
    this.hasPending = false;
  }
}
