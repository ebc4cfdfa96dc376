/**
 * The ordered start and stop of the controller's parts (the composition root's lifecycle): each
 * part that started registers its stop; a part that fails to start unwinds, in reverse order,
 * the parts started before it; stopping stops every started part in reverse order, once, each
 * within a time bound, and a stop that fails does not keep the others from stopping.
 */

/** Longest a part's stop is waited for by default, in ms. */
export const DEFAULT_STOP_TIMEOUT_MS = 5_000;

/** A part that failed to start: `part` names it, `cause` is what its start threw. */
export class StartError extends Error {
  /** The name of the part that failed to start (e.g. `operations server`). */
  readonly part: string;

  /** `message` is `<part>: <cause's message>`. */
  constructor(part: string, cause: unknown) {
    super(`${part}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StartError';
    this.part = part;
  }
}

/** Stopping did not go cleanly: `errors` holds one error per part that failed or timed out, each naming it. */
export class StopError extends AggregateError {
  /** The parts that failed to stop, in the order they were stopped. */
  readonly parts: readonly string[];

  /** `failures`: the part names and what their stops threw, in stop order. */
  constructor(failures: readonly { part: string; error: Error }[]) {
    super(
      failures.map((f) => f.error),
      `${failures.length === 1 ? 'a part' : `${failures.length} parts`} did not stop cleanly: ${failures.map((f) => `${f.part}: ${f.error.message}`).join('; ')}`,
    );
    this.name = 'StopError';
    this.parts = failures.map((f) => f.part);
  }
}

/** Options of {@link Lifecycle}. */
export interface LifecycleOptions {
  /** Longest one part's stop is waited for, in ms (default {@link DEFAULT_STOP_TIMEOUT_MS}); then the next part stops. */
  readonly stopTimeoutMs?: number;
  /** Called for each part whose stop threw or timed out (stopping goes on), e.g. to log it. */
  readonly onStopError?: (part: string, error: Error) => void;
}

/**
 * Starts parts one after the other and stops them in reverse order. Not reusable: once
 * {@link Lifecycle.stop} was called, starting another part fails.
 */
export class Lifecycle {
  readonly #started: { part: string; stop: () => unknown }[] = [];
  readonly #stopTimeoutMs: number;
  readonly #onStopError: (part: string, error: Error) => void;
  #stopping: Promise<void> | undefined;
  /** True while {@link Lifecycle.stop} goes through the started parts. */
  #draining = false;

  /** A lifecycle with nothing started. */
  constructor(options: LifecycleOptions = {}) {
    this.#stopTimeoutMs = options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS;
    this.#onStopError = options.onStopError ?? (() => undefined);
  }

  /** True once {@link Lifecycle.stop} was called (also while a failed start unwinds). */
  get stopping(): boolean {
    return this.#stopping !== undefined;
  }

  /** The names of the parts started and not stopped yet, in start order. */
  get started(): readonly string[] {
    return this.#started.map((s) => s.part);
  }

  /**
   * Starts one part: runs `start`, then registers `stop` (called with what `start` returned)
   * to run when the lifecycle stops. When `start` throws, every part started before is stopped
   * (in reverse order) before this rejects; a part that finishes starting after stopping
   * began is stopped at once.
   * @returns what `start` returned.
   * @throws StartError naming `part`, its `cause` what `start` threw (or that the lifecycle is stopping).
   */
  async start<T>(part: string, start: () => T | Promise<T>, stop?: (value: T) => unknown): Promise<T> {
    if (this.#stopping) throw new StartError(part, new Error('not started: the others are stopping'));
    let value: T;
    try {
      value = await start();
    } catch (err) {
      await this.stop().catch(() => undefined);
      throw new StartError(part, err);
    }
    const stopping = this.#stopping as Promise<void> | undefined; // it may have begun meanwhile
    if (!stopping) {
      if (stop) this.#started.push({ part, stop: () => stop(value) });
      return value;
    }
    // Stopping began while this part started: it stops too (it started last, so it stops next).
    if (stop) {
      if (this.#draining) this.#started.push({ part, stop: () => stop(value) });
      else {
        const error = await this.#stopOne(() => stop(value));
        if (error) this.#onStopError(part, error);
      }
    }
    await stopping.catch(() => undefined);
    throw new StartError(part, new Error('stopped while starting'));
  }

  /**
   * Stops every started part, last started first, each once. A part's stop that throws or
   * takes longer than the stop time-out is reported (`onStopError`) and the next part stops all
   * the same. Later calls return the same promise (also after a failed start unwound).
   * @throws StopError naming every part that did not stop cleanly, after all were stopped.
   */
  stop(): Promise<void> {
    this.#stopping ??= this.#stopAll();
    return this.#stopping;
  }

  async #stopAll(): Promise<void> {
    this.#draining = true;
    const failures: { part: string; error: Error }[] = [];
    try {
      for (let next = this.#started.pop(); next !== undefined; next = this.#started.pop()) {
        const error = await this.#stopOne(next.stop);
        if (error) {
          failures.push({ part: next.part, error });
          this.#onStopError(next.part, error);
        }
      }
    } finally {
      this.#draining = false;
    }
    if (failures.length > 0) throw new StopError(failures);
  }

  /** Runs one stop within the time-out; resolves with its error (a time-out is one), else undefined. */
  async #stopOne(stop: () => unknown): Promise<Error | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<Error>((resolve) => {
      timer = setTimeout(() => resolve(new Error(`did not stop within ${this.#stopTimeoutMs} ms`)), this.#stopTimeoutMs);
    });
    const stopped = (async () => {
      await stop();
      return undefined;
    })().catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
    try {
      return await Promise.race([stopped, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }
}
