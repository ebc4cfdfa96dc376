/**
 * A bound on how much of the event loop one kind of request may take: the time spent serving it
 * in the last {@link TimeBudgetOptions.windowMs} is summed (in buckets of a tenth of the window);
 * once it passes {@link TimeBudgetOptions.budgetMs}, further requests are refused until the
 * window moves on. Used by `/debug/explain`, which generates configuration on the controller's
 * event loop per call: a burst of calls must not starve the xDS streams.
 */

/** Options of {@link TimeBudget}; durations in ms. */
export interface TimeBudgetOptions {
  /** The sliding window (default 1000). */
  readonly windowMs?: number;
  /** The most time spent within one window (default 250: a quarter of the event loop). */
  readonly budgetMs?: number;
}

const BUCKETS = 10;

/** See the module comment. O(1) memory: {@link BUCKETS} numbers. */
export class TimeBudget {
  private readonly bucketMs: number;
  private readonly budgetMs: number;
  private readonly spent = new Array<number>(BUCKETS).fill(0);
  /** The bucket index (time / bucketMs) the ring was last moved to. */
  private current = 0;

  constructor(options: TimeBudgetOptions = {}, private readonly now: () => number = () => performance.now()) {
    this.bucketMs = (options.windowMs ?? 1000) / BUCKETS;
    this.budgetMs = options.budgetMs ?? 250;
  }

  private advance(): void {
    const index = Math.floor(this.now() / this.bucketMs);
    for (let i = this.current + 1; i <= index && i <= this.current + BUCKETS; i++) this.spent[i % BUCKETS] = 0;
    if (index > this.current) this.current = index;
  }

  /** Whether a request may be served now (the window's time is under the budget). */
  available(): boolean {
    this.advance();
    return this.spent.reduce((a, b) => a + b, 0) < this.budgetMs;
  }

  /** Seconds until a refused request should be tried again (the window's length, rounded up). */
  get retryAfterSeconds(): number {
    return Math.max(1, Math.ceil((this.bucketMs * BUCKETS) / 1000));
  }

  /** Runs `work` and counts the time it took. */
  run<T>(work: () => T): T {
    const start = this.now();
    try {
      return work();
    } finally {
      this.advance();
      this.spent[this.current % BUCKETS] += this.now() - start;
    }
  }
}
