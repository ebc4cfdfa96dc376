/**
 * Small helpers around `@kubernetes/client-node` errors, shared by the modules that call the
 * Kubernetes API (the CA Secret, leader election, the CLI).
 */

/**
 * The HTTP status of a failed Kubernetes API call: `ApiException.code` (client-node 1.x), or
 * `statusCode` / `response.statusCode` of older shapes; undefined for a transport error
 * (refused connection, DNS, TLS), which has no status.
 */
export function apiStatusCode(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { code?: unknown; statusCode?: unknown; response?: { statusCode?: unknown } };
  for (const candidate of [e.code, e.statusCode, e.response?.statusCode]) {
    if (typeof candidate === 'number' && candidate >= 100 && candidate < 600) return candidate;
  }
  return undefined;
}

/** A short, one-line description of a failed Kubernetes API call (the Status `message` when there is one). */
export function apiErrorMessage(err: unknown): string {
  const status = apiStatusCode(err);
  const body = (err as { body?: unknown } | null)?.body;
  let message: string | undefined;
  if (typeof body === 'string') {
    try {
      message = (JSON.parse(body) as { message?: string }).message;
    } catch {
      message = body;
    }
  } else if (typeof body === 'object' && body !== null) {
    message = (body as { message?: string }).message;
  }
  if (message === undefined) message = err instanceof Error ? err.message.split('\n')[0] : String(err);
  return status === undefined ? message : `${status}: ${message}`;
}
