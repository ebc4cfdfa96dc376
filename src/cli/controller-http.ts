/**
 * The one way the operator's commands (`trellis status`, `wait`, `proxies`, `proxy config`,
 * `explain`) ask the controller's operations server: a GET whose whole exchange (connection,
 * headers and body) is bounded in time, and whose body is bounded in size, so a controller that
 * hangs or answers without end makes the command fail with a message instead of hanging or
 * filling its memory.
 */

/** Default bound on one request to the controller, in ms. */
export const CONTROLLER_REQUEST_TIMEOUT_MS = 30_000;

/** The largest answer read from the controller, in bytes (`/debug/policies` of a mesh of thousands of objects is a few MiB). */
export const MAX_CONTROLLER_ANSWER_BYTES = 64 * 1024 * 1024;

/** What the controller answered: the HTTP status and the body as text. */
export interface ControllerAnswer {
  readonly status: number;
  readonly text: string;
}

/** Options of {@link getFromController}. */
export interface ControllerRequestOptions {
  /** Bound on the whole request, in ms (default {@link CONTROLLER_REQUEST_TIMEOUT_MS}). */
  readonly timeoutMs?: number;
  /** Bound on the body, in bytes (default {@link MAX_CONTROLLER_ANSWER_BYTES}). */
  readonly maxBytes?: number;
  /** Appended to the "cannot reach" message (e.g. a hint to work offline). */
  readonly unreachableHint?: string;
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

/**
 * GETs `path` (with its query) from the controller's operations server at `controllerUrl`.
 * @returns the status and body text (any status: the caller judges it).
 * @throws Error `cannot reach the controller at URL: …` when it refuses or fails the connection,
 *   `the controller at URL did not answer within N s` when the exchange passes `timeoutMs`,
 *   `the controller at URL: its answer is larger than N MiB` past `maxBytes`.
 */
export async function getFromController(controllerUrl: string, path: string, options: ControllerRequestOptions = {}): Promise<ControllerAnswer> {
  const timeoutMs = Math.max(1, options.timeoutMs ?? CONTROLLER_REQUEST_TIMEOUT_MS);
  const maxBytes = options.maxBytes ?? MAX_CONTROLLER_ANSWER_BYTES;
  const signal = AbortSignal.timeout(timeoutMs);
  const timedOut = () => new Error(`the controller at ${controllerUrl} did not answer within ${seconds(timeoutMs)}`);
  let response: Response;
  try {
    response = await fetch(new URL(path, controllerUrl), { signal });
  } catch (err) {
    if (signal.aborted) throw timedOut();
    const cause = err instanceof Error ? (err.cause instanceof Error ? err.cause.message : err.message) : String(err);
    throw new Error(`cannot reach the controller at ${controllerUrl}: ${cause}${options.unreachableHint ?? ''}`);
  }
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  try {
    if (response.body) {
      for await (const chunk of response.body) {
        bytes += chunk.byteLength;
        if (bytes > maxBytes) {
          await response.body.cancel().catch(() => {});
          throw new Error(`the controller at ${controllerUrl}: its answer is larger than ${Math.floor(maxBytes / (1024 * 1024))} MiB (not read)`);
        }
        chunks.push(chunk);
      }
    }
  } catch (err) {
    if (signal.aborted) throw timedOut();
    throw err;
  }
  return { status: response.status, text: Buffer.concat(chunks).toString('utf8') };
}
