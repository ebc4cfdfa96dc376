/** Node's system errors (a failed system call: `ENOENT`, `EACCES`, `ECONNREFUSED`, `EADDRINUSE`, …). */

/**
 * The `code` of a Node system error (an `Error` with a string `code` such as `ENOENT` and a
 * `syscall`), undefined for anything else. A system error is a condition of the environment (a
 * file removed, a port taken, a peer gone), logged with its message rather than its stack.
 */
export function systemErrorCode(err: unknown): string | undefined {
  if (!(err instanceof Error)) return undefined;
  const { code, syscall } = err as NodeJS.ErrnoException;
  return typeof code === 'string' && /^E[A-Z0-9]+$/.test(code) && typeof syscall === 'string' ? code : undefined;
}
