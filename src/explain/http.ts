import type { MeshSnapshot } from '../catalog/types.js';
import type { StoreReader } from '../store/store.js';
import { ExplainError, explainRequest, type ExplainQuery } from './explain.js';

/** Most `header` parameters a query may carry. */
const MAX_HEADERS = 32;

/**
 * The URL query of `/debug/explain` for `query`: `from` or `fromPod`, `to`, `path`, `method`,
 * and one `header=NAME=VALUE` per header.
 */
export function explainQueryParams(query: ExplainQuery): URLSearchParams {
  const params = new URLSearchParams();
  if (query.from !== undefined) params.set('from', query.from);
  if (query.fromPod !== undefined) params.set('fromPod', query.fromPod);
  params.set('to', query.to);
  if (query.path !== undefined) params.set('path', query.path);
  if (query.method !== undefined) params.set('method', query.method);
  for (const [k, v] of Object.entries(query.headers ?? {})) params.append('header', `${k}=${v}`);
  return params;
}

/**
 * `NAME=VALUE` header arguments (`--header`, the `header` parameter) as a record.
 * @throws ExplainError (`invalid`) for one without `=` or with an empty name, or more than 32.
 */
export function parseHeaderArguments(values: readonly string[]): Record<string, string> {
  if (values.length > MAX_HEADERS) throw new ExplainError('invalid', `at most ${MAX_HEADERS} headers`);
  const headers: Record<string, string> = {};
  for (const value of values) {
    const i = value.indexOf('=');
    if (i <= 0) throw new ExplainError('invalid', `header "${value}" is not NAME=VALUE`);
    headers[value.slice(0, i).trim().toLowerCase()] = value.slice(i + 1);
  }
  return headers;
}

/** The {@link ExplainQuery} of `/debug/explain`'s URL query ({@link explainQueryParams}). @throws ExplainError (`invalid`) without `to` or with a malformed header. */
export function explainQueryFromParams(params: URLSearchParams): ExplainQuery {
  const to = params.get('to');
  if (!to) throw new ExplainError('invalid', 'query parameter "to" (SERVICE.NAMESPACE:PORT) is required');
  const optional = (name: string) => params.get(name) ?? undefined;
  return { from: optional('from'), fromPod: optional('fromPod'), to, path: optional('path'), method: optional('method'), headers: parseHeaderArguments(params.getAll('header')) };
}

/**
 * The `/debug/explain` answer for a URL query: 200 with the Explanation, 400 `{ error }` for a
 * malformed query, 404 `{ error }` for an identity, pod, service or port the mesh does not have.
 */
export function explainResponse(snapshot: MeshSnapshot, store: StoreReader, params: URLSearchParams): { status: 200 | 400 | 404; body: unknown } {
  try {
    return { status: 200, body: explainRequest(snapshot, store, explainQueryFromParams(params)) };
  } catch (err) {
    if (err instanceof ExplainError) return { status: err.kind === 'unknown' ? 404 : 400, body: { error: err.message } };
    throw err;
  }
}
