import type { KubeObject, ObjectKind } from './objects.js';

/**
 * The read side of the object store, all the catalog may see (the shape of
 * `@kubernetes/client-node`'s `ObjectCache`: `get` and `list`).
 */
export interface StoreReader {
  /** The object of `kind` named `name` in `namespace` (omit for cluster-scoped kinds), or undefined. */
  get<T extends KubeObject = KubeObject>(kind: ObjectKind, namespace: string | undefined, name: string): T | undefined;
  /** Every object of `kind`, optionally only in `namespace`, in a stable order (by namespace, then name). */
  list<T extends KubeObject = KubeObject>(kind: ObjectKind, namespace?: string): readonly T[];
}

/** One change to the store: the object before (undefined if added) and after (undefined if deleted). */
export interface ObjectChange {
  kind: ObjectKind;
  namespace: string | undefined;
  name: string;
  oldObject: KubeObject | undefined;
  newObject: KubeObject | undefined;
}

/** Called with each batch of changes a source applied, in the order they were applied. */
export type ChangeListener = (changes: readonly ObjectChange[]) => void;

/**
 * The write side a source needs: replace everything it contributed with its new full set,
 * emitting one batch of changes (see `ObjectStore.replaceAll`).
 */
export interface StoreWriter {
  /** Replaces `sourceId`'s objects with `objects`; returns the changes applied (empty if none). */
  replaceAll(sourceId: string, objects: readonly KubeObject[]): readonly ObjectChange[];
}
