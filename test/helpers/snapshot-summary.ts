import type { ProxySnapshot } from '../../src/xds/cache/types.js';
import type { MeshSnapshot } from '../../src/catalog/types.js';

export interface Summary {
  versions: Record<string, string>;
  resources: Record<string, Record<string, { v: string; b: string }>>;
}

export function summarize(s: ProxySnapshot): Summary {
  const versions: Record<string, string> = {};
  const resources: Record<string, Record<string, { v: string; b: string }>> = {};
  for (const [t, v] of s.versions) versions[t] = v;
  for (const [t, m] of s.resources) {
    const r: Record<string, { v: string; b: string }> = {};
    for (const [name, c] of m) r[name] = { v: c.version, b: Buffer.from(c.resource.value).toString('base64') };
    resources[t] = r;
  }
  return { versions, resources };
}

/** MeshSnapshot as JSON (Maps as entry lists, Sets sorted), without the generation and the index (derived from the rest). */
export function meshJson(m: MeshSnapshot): string {
  return JSON.stringify({ ...m, generation: 0, index: undefined }, (_k, v) => {
    if (v instanceof Map) return { __map: [...v.entries()] };
    if (v instanceof Set) return { __set: [...v].sort() };
    return v;
  });
}
