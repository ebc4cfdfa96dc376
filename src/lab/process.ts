/** Small process helpers of the lab: waiting, and whether a PID is (still) a process. */
import { readFile } from 'node:fs/promises';

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether a process with this PID exists (signal 0; EPERM: it exists but is not ours to signal). */
export function processAlive(pid: number | undefined): boolean {
  if (pid === undefined || !Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The command line of a process (`/proc/<pid>/cmdline`, NULs as spaces), or undefined when it is gone. */
export async function processCommandLine(pid: number): Promise<string | undefined> {
  try {
    return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').join(' ').trim();
  } catch {
    return undefined;
  }
}

/**
 * The `err` (else `msg`) of the last pino JSON line at level error (50) or above in `log`
 * (a process's own reason for failing, e.g. `cannot listen on --http-address …: EADDRINUSE`),
 * or undefined when there is none.
 */
export function lastLoggedError(log: string): string | undefined {
  let found: string | undefined;
  for (const line of log.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      const entry = JSON.parse(line) as { level?: unknown; err?: unknown; msg?: unknown };
      if (typeof entry.level !== 'number' || entry.level < 50) continue;
      const err = typeof entry.err === 'string' ? entry.err : (entry.err as { message?: unknown } | undefined)?.message;
      found = typeof err === 'string' ? err : typeof entry.msg === 'string' ? entry.msg : found;
    } catch {
      // not a JSON line: skipped
    }
  }
  return found;
}

/**
 * Why a process failed, from its `log`: its own last error line ({@link lastLoggedError}), else
 * the last `tailChars` characters of the log, else `it logged nothing`.
 */
export function loggedFailure(log: string, tailChars: number): string {
  return lastLoggedError(log) ?? (log.slice(-tailChars).trim() || 'it logged nothing');
}
