/**
 * The bound on the injector's bootstrap Secret creations: whoever can reach the webhook's port
 * can post AdmissionReviews, and each admitted one costs a key pair, a certificate and a Secret
 * in the API server. {@link SecretCreationGate} lets one creation per proxy UUID run at a time
 * (a delivery of the same request again shares it), at most `maxConcurrent` at once and
 * `maxPerWindow` per `windowMs`; beyond that the caller refuses the pod (fail closed: the API
 * server's caller, e.g. the ReplicaSet controller, retries).
 */
import { RateLimiter } from '../util/rate-limit.js';

/** What a bootstrap Secret creation found: it created the Secret, or the Secret was there (the same request delivered again). */
export type SecretCreation = 'created' | 'exists';

/** The bounds of {@link SecretCreationGate}. */
export interface SecretCreationBounds {
  /** Creations started per window at most (a positive integer). */
  readonly maxPerWindow: number;
  /** The window, in ms. */
  readonly windowMs: number;
  /** Creations in progress at once at most (a positive integer). */
  readonly maxConcurrent: number;
}

/** 20 creations a second, 8 at once: a ReplicaSet scaled up by hundreds is admitted within seconds, retried by its controller beyond. */
export const DEFAULT_SECRET_CREATION_BOUNDS: SecretCreationBounds = { maxPerWindow: 20, windowMs: 1000, maxConcurrent: 8 };

/** The refusal of {@link SecretCreationGate.run} beyond its bounds: `message` says which bound. */
export interface GateRefusal {
  readonly refused: string;
}

/** See the module comment. */
export class SecretCreationGate {
  readonly #inFlight = new Map<string, Promise<SecretCreation>>();
  readonly #limiter: RateLimiter;

  /**
   * @param now the clock, in ms (default `Date.now`).
   * @throws Error when a bound is not a positive integer.
   */
  constructor(
    readonly bounds: SecretCreationBounds = DEFAULT_SECRET_CREATION_BOUNDS,
    now: () => number = Date.now,
  ) {
    for (const [name, value] of Object.entries(bounds)) {
      if (!Number.isInteger(value) || value <= 0) throw new Error(`secret creation bounds: ${name} must be a positive integer, got ${String(value)}`);
    }
    this.#limiter = new RateLimiter(bounds.maxPerWindow, bounds.windowMs, now, 1);
  }

  /** Creations in progress. */
  get inFlight(): number {
    return this.#inFlight.size;
  }

  /**
   * Runs `create` for `uuid`, or joins the run in progress for it.
   * @returns the creation's outcome, or a {@link GateRefusal} (nothing run) when `maxConcurrent`
   *   are in progress or `maxPerWindow` were started in this window.
   */
  run(uuid: string, create: () => Promise<SecretCreation>): Promise<SecretCreation> | GateRefusal {
    const running = this.#inFlight.get(uuid);
    if (running) return running;
    const { maxConcurrent, maxPerWindow, windowMs } = this.bounds;
    if (this.#inFlight.size >= maxConcurrent) return { refused: `${maxConcurrent} bootstrap Secret creations are in progress, the most at once` };
    if (this.#limiter.take('create') === undefined) return { refused: `${maxPerWindow} bootstrap Secrets were created in the last ${windowMs} ms, the most per window` };
    const run = create().finally(() => this.#inFlight.delete(uuid));
    this.#inFlight.set(uuid, run);
    return run;
  }
}
