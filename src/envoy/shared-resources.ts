import type { MeshSnapshot } from '../catalog/types.js';

/**
 * Resources that depend only on the MeshSnapshot (not on the proxy asking), computed once per
 * snapshot and handed to every proxy as the same object. Sharing the object is what lets the
 * encoder and validator (`ResourceCheckCache`) recognise it by identity instead of by content,
 * and lets every proxy's snapshot hold the same encoded bytes.
 */
const shared = new WeakMap<MeshSnapshot, Map<string, object>>();

/**
 * Returns the resource remembered for `snapshot` under `key`, computing it with `compute` the
 * first time. `key` must name everything besides the snapshot that the result depends on
 * (e.g. `ClusterLoadAssignment bookstore/bookstore-v1|14001`). The entries go with the snapshot.
 * @throws whatever `compute` throws (nothing is remembered then).
 */
export function sharedResource<T extends object>(snapshot: MeshSnapshot, key: string, compute: () => T): T {
  let entries = shared.get(snapshot);
  if (!entries) {
    entries = new Map();
    shared.set(snapshot, entries);
  }
  let found = entries.get(key) as T | undefined;
  if (!found) {
    found = compute();
    entries.set(key, found);
  }
  return found;
}
