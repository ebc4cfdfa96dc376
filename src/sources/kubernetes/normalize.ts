import type { KubeObject } from '../../store/objects.js';
import { apiVersionOf, type WatchedResource } from './resources.js';

/**
 * A JSON-like copy of `value`: `Date`s become RFC 3339 strings (what the API server sent
 * before a typed client parsed them), `undefined` members are dropped, and anything that is not
 * plain data (functions, symbols) is left out.
 */
export function toPlainJson(value: unknown): unknown {
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString().replace(/\.000Z$/, 'Z');
  if (Array.isArray(value)) return value.map((v) => (v === undefined ? null : toPlainJson(v)));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) {
      if (v === undefined || typeof v === 'function' || typeof v === 'symbol') continue;
      out[k] = toPlainJson(v);
    }
    return out;
  }
  if (typeof value === 'bigint') return Number(value);
  return value;
}

/**
 * The one shape every object has in the store, whether it came from a list (where the API
 * server leaves out `apiVersion` and `kind` of built-in types) or from a watch event:
 * plain JSON, `apiVersion` and `kind` of the watched resource, no `metadata.managedFields`,
 * no namespace on cluster-scoped kinds.
 * @returns undefined when the value is not an object with `metadata.name`.
 */
export function normalizeObject(resource: WatchedResource, raw: unknown): KubeObject | undefined {
  const plain = toPlainJson(raw);
  if (plain === null || typeof plain !== 'object' || Array.isArray(plain)) return undefined;
  const record = plain as Record<string, unknown>;
  const metadata = record.metadata as Record<string, unknown> | undefined;
  if (!metadata || typeof metadata.name !== 'string' || metadata.name === '') return undefined;
  const { managedFields: _managed, ...meta } = metadata;
  if (!resource.namespaced) delete meta.namespace;
  return { ...record, apiVersion: apiVersionOf(resource), kind: resource.kind, metadata: meta as unknown as KubeObject['metadata'] };
}
