import type { Timers } from '../../messaging/debouncer.js';
import { REAL_TIMERS } from '../../messaging/debouncer.js';

/** Default of {@link SendBudget}'s `maxBytes`: 64 MiB of responses written but not yet flushed, all streams together. */
export const DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024;

/**
 * Default of {@link SendBudget}'s `holdLimitMs`, in ms: a response not flushed after this long
 * (a proxy that stopped reading) stops counting against the budget, so one stuck proxy cannot
 * stall every other stream.
 */
export const DEFAULT_HOLD_LIMIT_MS = 10_000;

/** Gives back what {@link SendBudget.acquire} granted; calling it again does nothing. */
export type Release = () => void;

/**
 * Bounds the bytes of DiscoveryResponses written to streams but not yet flushed to their
 * connections, across every stream of a server. Each stream has at most one response in flight
 * (it writes the next once the previous is flushed); without a shared bound, a push to N proxies
 * still holds N serialized responses in memory until the slowest client reads them (with large
 * configurations, gigabytes). A stream asks before it writes and gives back once the write is
 * flushed; streams wait in FIFO order.
 *
 * A request larger than the whole budget is granted when nothing else is in flight (it is never
 * refused). A grant not given back within `holdLimitMs` is given back then.
 */
export class SendBudget {
  private inFlight = 0;
  private readonly waiting: { bytes: number; grant: (release: Release) => void }[] = [];
  private readonly timers: Timers;

  /**
   * @param maxBytes bytes that may be in flight at once (default {@link DEFAULT_MAX_BYTES_IN_FLIGHT}).
   * @param holdLimitMs longest a grant counts, in ms (default {@link DEFAULT_HOLD_LIMIT_MS}).
   * @throws Error when `maxBytes` is not a positive integer.
   */
  constructor(
    readonly maxBytes = DEFAULT_MAX_BYTES_IN_FLIGHT,
    private readonly holdLimitMs = DEFAULT_HOLD_LIMIT_MS,
    timers: Timers = REAL_TIMERS,
  ) {
    if (!Number.isInteger(maxBytes) || maxBytes <= 0) throw new Error(`SendBudget: maxBytes must be a positive integer, got ${maxBytes}`);
    this.timers = timers;
  }

  /** Bytes granted and not given back yet. */
  get bytesInFlight(): number {
    return this.inFlight;
  }

  /** Streams waiting for a grant. */
  get waiters(): number {
    return this.waiting.length;
  }

  /**
   * Resolves with a {@link Release} once `bytes` fit in the budget (in the order asked).
   * @param bytes size of the response about to be written, in bytes.
   */
  acquire(bytes: number): Promise<Release> {
    const size = Math.max(0, Math.ceil(bytes));
    return new Promise((grant) => {
      this.waiting.push({ bytes: size, grant });
      this.grantWaiting();
    });
  }

  private grantWaiting(): void {
    while (this.waiting.length > 0) {
      const next = this.waiting[0];
      const fits = this.inFlight + next.bytes <= this.maxBytes || this.inFlight === 0;
      if (!fits) return;
      this.waiting.shift();
      this.inFlight += next.bytes;
      next.grant(this.releaser(next.bytes));
    }
  }

  private releaser(bytes: number): Release {
    let done = false;
    const timer = this.timers.setTimeout(() => release(), this.holdLimitMs);
    (timer as { unref?: () => void }).unref?.();
    const release = (): void => {
      if (done) return;
      done = true;
      this.timers.clearTimeout(timer);
      this.inFlight -= bytes;
      this.grantWaiting();
    };
    return release;
  }
}
