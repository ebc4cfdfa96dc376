import type { MeshSnapshot } from '../catalog/types.js';
import { sameElements } from '../util/same.js';

/** One remembered resource and the inputs it was computed from. */
interface Entry {
  readonly inputs: readonly unknown[];
  readonly value: object;
}

/** The entries of one snapshot. */
interface Generation {
  readonly snapshot: MeshSnapshot;
  readonly entries: Map<string, Entry>;
}

/**
 * The entries of the latest snapshot asked about, and of the one before it: a new snapshot
 * takes over the previous one's entries whose inputs are unchanged, and the rest are dropped
 * with the older generation (memory stays bounded by what two snapshots use).
 */
let current: Generation | undefined;
let previous: Generation | undefined;

function generationOf(snapshot: MeshSnapshot): Generation {
  if (current?.snapshot === snapshot) return current;
  if (previous?.snapshot === snapshot) return previous;
  previous = current;
  current = { snapshot, entries: new Map() };
  return current;
}

/**
 * Resources that do not depend on the proxy asking, computed once and handed to every proxy
 * as the same object: the encoder and validator (`ResourceCheckCache`) then recognise them by
 * identity instead of by content, and every proxy's snapshot holds the same encoded bytes.
 *
 * Returns the resource remembered under `key` when it was computed from the very same
 * `inputs` (compared by identity: MeshSnapshot parts, which a rebuild keeps when unchanged),
 * in this snapshot or the previous one; else computes it with `compute`. `key` names the
 * resource (e.g. `ClusterLoadAssignment bookstore/bookstore-v1|14001`); `inputs` must hold
 * everything besides the key that the result depends on.
 * @throws whatever `compute` throws (nothing is remembered then).
 */
export function sharedResource<T extends object>(snapshot: MeshSnapshot, key: string, inputs: readonly unknown[], compute: () => T): T {
  const generation = generationOf(snapshot);
  let entry = generation.entries.get(key);
  if (!entry || !sameElements(entry.inputs, inputs)) {
    const carried = generation === current ? previous?.entries.get(key) : undefined;
    entry = carried && sameElements(carried.inputs, inputs) ? carried : { inputs, value: compute() };
    generation.entries.set(key, entry);
  }
  return entry.value as T;
}
