/**
 * Waiting in tests: {@link Waiters} for state that says when it changes (a test client's
 * responses and status), {@link eventually} for state that does not (the server's).
 */

/** The waiters of one changing state: {@link until} waits for a condition, {@link wake} re-checks every wait. */
export class Waiters {
  private waiters: Array<() => void> = [];

  /** The state changed: every pending {@link until} checks its condition again. */
  wake(): void {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  /**
   * Resolves once `cond` holds, checking it now and after each {@link wake}.
   * @param ended says why waiting longer is pointless (e.g. `stream ended (1 Cancelled)`), or
   *   undefined while it is not; omitted, waiting goes on until the time runs out.
   * @throws Error `<ended> before <what>`, or after `timeoutMs` milliseconds.
   */
  async until(cond: () => boolean, timeoutMs: number, what: string, ended?: () => string | undefined): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!cond()) {
      const why = ended?.();
      if (why !== undefined) throw new Error(`${why} before ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }
}

/**
 * Waits until `cond` holds, polling every `intervalMs` (for state that has no event to wait on:
 * a server's, an HTTP endpoint's).
 * @throws Error `timed out waiting for <what>` after `timeoutMs` milliseconds.
 */
export async function eventually(
  cond: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5000,
  intervalMs = 5,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
