import type { Timers } from '../../messaging/debouncer.js';
import { REAL_TIMERS } from '../../messaging/debouncer.js';

/** Default of {@link SendBudget}'s `maxBytes`: 64 MiB of responses written but not yet flushed, all streams together. */
export const DEFAULT_MAX_BYTES_IN_FLIGHT = 64 * 1024 * 1024;

/**
 * Default of {@link SendBudget}'s `holdLimitMs`, in ms: a response not flushed after this long
 * (a proxy that stopped reading, or one too busy to read) stops counting against the budget of
 * bytes in flight, so one stuck proxy cannot stall every other stream; it still counts against
 * the budget of bytes held past the limit until it is flushed or its stream ends.
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
 * flushed (or its stream ends); streams wait in FIFO order.
 *
 * Two bounds: `maxBytes` in flight, and as many again held past `holdLimitMs`. A grant not given
 * back within `holdLimitMs` (its proxy reads slowly or not at all) stops counting in flight, so
 * the other streams go on, but counts as held past the limit until it is given back: the
 * serialized responses alive at once never exceed `2 × maxBytes` (plus one larger than the
 * budget, granted alone), however many proxies read slowly during a mass push. When that is full
 * and a write waits, the oldest grants held past the limit are evicted (their `evict` callback:
 * the stream closes, which gives the grant back) until the write fits: proxies that stopped
 * reading delay the others by at most `holdLimitMs`, not until the unread timeout closes them.
 *
 * A request larger than the whole budget is granted when nothing else is in flight or held (it
 * is never refused).
 */
export class SendBudget {
  private inFlight = 0;
  /** Bytes of grants held past the hold limit and not given back yet. */
  private overdue = 0;
  private readonly waiting: { bytes: number; evict: (() => void) | undefined; grant: (release: Release) => void }[] = [];
  /** Grants held past the hold limit, oldest first: bytes, and the evict callback (called at most once). */
  private readonly overdueGrants = new Map<Release, { readonly bytes: number; evict: (() => void) | undefined }>();
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

  /** Bytes granted, held past the hold limit and not given back yet (at most `maxBytes` but for one larger grant). */
  get bytesOverdue(): number {
    return this.overdue;
  }

  /** Streams waiting for a grant. */
  get waiters(): number {
    return this.waiting.length;
  }

  /**
   * Resolves with a {@link Release} once `bytes` fit in the budget (in the order asked).
   * @param bytes size of the response about to be written, in bytes.
   * @param evict called (once) when the grant, held past the hold limit, is evicted for a write
   *   that waits: the caller ends what holds it and gives it back. Without it the grant is
   *   never evicted.
   */
  acquire(bytes: number, evict?: () => void): Promise<Release> {
    const size = Math.max(0, Math.ceil(bytes));
    return new Promise((grant) => {
      this.waiting.push({ bytes: size, evict, grant });
      this.grantWaiting();
    });
  }

  private grantWaiting(): void {
    while (this.waiting.length > 0) {
      const next = this.waiting[0];
      const fitsInFlight = this.inFlight + next.bytes <= this.maxBytes || this.inFlight === 0;
      const held = this.inFlight + this.overdue;
      const fitsHeld = held + next.bytes <= 2 * this.maxBytes || held === 0;
      if (!fitsInFlight) return;
      if (!fitsHeld) {
        this.evictFor(held + next.bytes - 2 * this.maxBytes);
        return;
      }
      this.waiting.shift();
      this.inFlight += next.bytes;
      next.grant(this.releaser(next.bytes, next.evict));
    }
  }

  /** Evicts the oldest overdue grants (not evicted yet) whose bytes add up to `bytes` at least, or all. */
  private evictFor(bytes: number): void {
    const victims: (() => void)[] = [];
    let freed = 0;
    for (const grant of this.overdueGrants.values()) {
      if (freed >= bytes) break;
      if (!grant.evict) continue;
      victims.push(grant.evict);
      grant.evict = undefined;
      freed += grant.bytes;
    }
    // After the walk: an eviction gives its grant back, which grants again.
    for (const evict of victims) evict();
  }

  private releaser(bytes: number, evict: (() => void) | undefined): Release {
    let state: 'in flight' | 'overdue' | 'given back' = 'in flight';
    const release = (): void => {
      if (state === 'given back') return;
      if (state === 'in flight') {
        this.timers.clearTimeout(timer);
        this.inFlight -= bytes;
      } else {
        this.overdue -= bytes;
        this.overdueGrants.delete(release);
      }
      state = 'given back';
      this.grantWaiting();
    };
    const timer = this.timers.setTimeout(() => {
      if (state !== 'in flight') return;
      state = 'overdue';
      this.inFlight -= bytes;
      this.overdue += bytes;
      this.overdueGrants.set(release, { bytes, evict });
      this.grantWaiting();
    }, this.holdLimitMs);
    (timer as { unref?: () => void }).unref?.();
    return release;
  }
}
