import type { KubeObject, ObjectKind } from '../../src/store/objects.js';
import type { StoreReader } from '../../src/store/store.js';

/** A StoreReader over a fixed list of objects, for generator and catalog tests. */
export function memoryStore(objects: readonly KubeObject[]): StoreReader {
  const sorted = [...objects].sort((a, b) => {
    const ka = `${a.metadata.namespace ?? ''}/${a.metadata.name}`;
    const kb = `${b.metadata.namespace ?? ''}/${b.metadata.name}`;
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  });
  return {
    get<T extends KubeObject>(kind: ObjectKind, namespace: string | undefined, name: string): T | undefined {
      return sorted.find((o) => o.kind === kind && (o.metadata.namespace ?? undefined) === namespace && o.metadata.name === name) as T | undefined;
    },
    list<T extends KubeObject>(kind: ObjectKind, namespace?: string): readonly T[] {
      return sorted.filter((o) => o.kind === kind && (namespace === undefined || o.metadata.namespace === namespace)) as T[];
    },
  };
}
