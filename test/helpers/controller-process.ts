import type { ChildProcess } from 'node:child_process';

/** A spawned `trellis controller` as {@link watchController} follows it. */
export interface WatchedController {
  /** The operations (`--http-address`) port its `controller started` log line names. */
  readonly httpPort: Promise<number>;
  /** Everything it has written so far, stdout and stderr. */
  output(): string;
}

/**
 * Collects the output of a spawned `trellis controller` (stdout and stderr piped) and waits for
 * its `controller started` line (JSON, with `httpPort`).
 * @param timeoutMs how long `httpPort` waits before it rejects.
 * @returns `httpPort` rejects with the output so far when the process exits before that line or
 *   `timeoutMs` passes.
 */
export function watchController(child: ChildProcess, timeoutMs = 60_000): WatchedController {
  let output = '';
  const httpPort = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the controller did not start within ${timeoutMs} ms:\n${output}`)), timeoutMs);
    child.stdout?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const started = /"httpPort":(\d+).*"msg":"controller started"/.exec(output);
      if (started) {
        clearTimeout(timer);
        resolve(Number(started[1]));
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the controller exited (${code ?? signal}):\n${output}`));
    });
  });
  return { httpPort, output: () => output };
}
