/**
 * How a long-running command (`trellis controller`, `lab supervise`, `lab app`) ends on a signal.
 * Kept free of other imports: `bin/trellis-lab-tools.js` loads it in every lab pod.
 */

/**
 * On the first SIGINT or SIGTERM, calls `stop` with the signal's name and exits: 0 once the
 * promise it returns resolves, 1 when it rejects.
 */
export function exitOnSignal(stop: (signal: NodeJS.Signals) => Promise<unknown>): void {
  const shutdown = (signal: NodeJS.Signals): void => {
    stop(signal).then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.once('SIGINT', shutdown);
  process.once('SIGTERM', shutdown);
}
