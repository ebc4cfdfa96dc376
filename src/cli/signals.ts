/**
 * How a long-running command (`trellis controller`, `lab supervise`, `lab app`) ends on a signal.
 * Kept free of other imports: `bin/trellis-lab-tools.js` loads it in every lab pod.
 */

/**
 * On the first SIGINT or SIGTERM, calls `stop` with the signal's name and exits: 0 once the
 * promise it returns resolves, 1 when it rejects. Later SIGINTs and SIGTERMs are ignored while
 * `stop` runs (a second Ctrl-C or a supervisor's repeated TERM must not cut the ordered stop
 * short; `stop` itself is bounded in time), so the handlers stay installed until the exit.
 */
export function exitOnSignal(stop: (signal: NodeJS.Signals) => Promise<unknown>): void {
  let stopping = false;
  const shutdown = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    stop(signal).then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);
}
