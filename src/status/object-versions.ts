/**
 * The content versions of the policy objects and the MeshSnapshot generation at which each
 * version entered the mesh: what "the object's current generation is programmed" is measured
 * against. Fed by the store's change batches and by each MeshSnapshot build; holds one entry per
 * policy object changed since the controller started (bounded by the store).
 */
import type { KubeObject, ObjectKind } from '../store/objects.js';
import { objectKey } from '../store/objects.js';
import { stableStringify } from '../store/object-store.js';
import type { ObjectChange } from '../store/store.js';

/** The kinds that get a policy status (issue 16 item 1). */
export const POLICY_KINDS = ['TrafficTarget', 'HTTPRouteGroup', 'TCPRoute', 'TrafficSplit', 'IngressBackend', 'Egress', 'Retry', 'UpstreamTrafficSetting', 'MeshConfig'] as const;

/** One of {@link POLICY_KINDS}. */
export type PolicyKind = (typeof POLICY_KINDS)[number];

const POLICY_KIND_SET: ReadonlySet<string> = new Set(POLICY_KINDS);

/** Whether `kind` is one of {@link POLICY_KINDS}. */
export function isPolicyKind(kind: string): kind is PolicyKind {
  return POLICY_KIND_SET.has(kind);
}

/** The generation of the first MeshSnapshot a controller builds (objects it started with entered there). */
export const FIRST_GENERATION = 1;

/** What an object's status is measured against. */
export interface ObjectVersion {
  /**
   * The object's generation: `metadata.generation` when the source sets it (Kubernetes), else
   * the controller's count of its content versions since it started (1 = as first loaded; the
   * manifests source gives no generation: each change of the content but `metadata` and
   * `status` counts one).
   */
  readonly generation: number;
  /** The MeshSnapshot generation its current content entered at; undefined while no MeshSnapshot was built from it yet. */
  readonly enteredAt: number | undefined;
}

interface Entry {
  /** Content versions counted (see {@link ObjectVersion.generation}). */
  count: number;
  enteredAt: number | undefined;
}

/** The content of an object that decides what it does: everything but `metadata` and `status`. */
function content(object: KubeObject): string {
  const { metadata: _metadata, status: _status, ...rest } = object;
  return stableStringify(rest);
}

/**
 * Tracks, per policy object, its content version and the MeshSnapshot generation that version
 * entered at: {@link changed} with every store batch, {@link built} after every MeshSnapshot
 * build. An object not changed since the controller started entered at {@link FIRST_GENERATION}.
 */
export class ObjectVersions {
  private readonly entries = new Map<string, Entry>();
  /** Entries whose content changed since the last build. */
  private readonly pending = new Set<Entry>();

  /** Records a batch of store changes (only policy kinds, and only content changes, count). */
  changed(changes: readonly ObjectChange[]): void {
    for (const change of changes) {
      if (!isPolicyKind(change.kind)) continue;
      const key = objectKey(change.kind, change.namespace, change.name);
      if (!change.newObject) {
        const entry = this.entries.get(key);
        if (entry) this.pending.delete(entry);
        this.entries.delete(key);
        continue;
      }
      if (change.oldObject && content(change.oldObject) === content(change.newObject)) continue;
      let entry = this.entries.get(key);
      if (!entry) {
        entry = { count: change.oldObject ? 1 : 0, enteredAt: undefined };
        this.entries.set(key, entry);
      }
      entry.count++;
      entry.enteredAt = undefined;
      this.pending.add(entry);
    }
  }

  /** A MeshSnapshot of `generation` was built from the store as it is now: pending versions entered there. */
  built(generation: number): void {
    for (const entry of this.pending) entry.enteredAt = generation;
    this.pending.clear();
  }

  /** The version of `object` (the store's current one) and where it entered. */
  versionOf(object: KubeObject): ObjectVersion {
    const entry = this.entries.get(objectKey(object.kind as ObjectKind, object.metadata.namespace, object.metadata.name));
    const fromMetadata = (object.metadata as { generation?: unknown }).generation;
    const count = entry?.count ?? 1;
    return {
      generation: typeof fromMetadata === 'number' && Number.isInteger(fromMetadata) ? fromMetadata : count,
      enteredAt: entry ? entry.enteredAt : FIRST_GENERATION,
    };
  }
}
