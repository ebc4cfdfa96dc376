/**
 * The policy objects the status covers, with their problems, versions and affected proxies:
 * every object of a policy kind in the store, and those a manifest error names that never
 * loaded. Pure.
 */
import { formatProblem, type PolicyProblem } from '../catalog/problems.js';
import type { MeshSnapshot } from '../catalog/types.js';
import { objectKey, type ObjectKind } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { affectedSelector } from './affected.js';
import { isPolicyKind, POLICY_KINDS, type ObjectVersions, type PolicyKind } from './object-versions.js';
import type { PolicyObjectState } from './policy-status.js';

/** A problem the source found in an object's document (a manifest error), formatted. */
export interface ObjectError {
  readonly kind: string | undefined;
  readonly namespace: string | undefined;
  readonly name: string | undefined;
  readonly text: string;
}

/** What {@link policyObjects} reads. */
export interface PolicyObjectsInput {
  readonly store: StoreReader;
  readonly mesh: MeshSnapshot;
  /** The controller's policy problems of `mesh`. */
  readonly problems: readonly PolicyProblem[];
  /** The source's errors (manifests mode): an object whose latest document is invalid keeps its previous version, and is not accepted. */
  readonly errors: readonly ObjectError[];
  readonly versions: ObjectVersions;
  /** `<namespace>/<name>` of the MeshConfig the controller reads. */
  readonly meshConfigName: string;
  /** Only these kinds (default: every policy kind). */
  readonly kinds?: ReadonlySet<PolicyKind>;
}

/** Every policy object, sorted by kind (in `POLICY_KINDS` order), namespace and name. */
export function policyObjects(input: PolicyObjectsInput): PolicyObjectState[] {
  const problems = new Map<string, string[]>();
  const warnings = new Map<string, string[]>();
  const documentErrors = new Map<string, string[]>();
  const add = (to: Map<string, string[]>, key: string, text: string) => {
    const list = to.get(key);
    if (list) list.push(text);
    else to.set(key, [text]);
  };
  // A warning (the object applies as written: a ServiceAccount that exists nowhere yet) does not make it not accepted.
  for (const p of input.problems) if (isPolicyKind(p.kind)) add(p.severity === 'warning' ? warnings : problems, objectKey(p.kind, p.namespace, p.name), formatProblem(p));
  // An object's latest document that did not load: its version in force stays (and keeps its own problems).
  for (const e of input.errors) if (e.kind && e.name && isPolicyKind(e.kind)) add(documentErrors, objectKey(e.kind, e.namespace, e.name), e.text);
  const out: PolicyObjectState[] = [];
  const seen = new Set<string>();
  const kinds = POLICY_KINDS.filter((k) => !input.kinds || input.kinds.has(k));
  for (const kind of kinds) {
    for (const object of input.store.list(kind as ObjectKind)) {
      const namespace = object.metadata.namespace ?? 'default';
      const key = objectKey(kind, object.metadata.namespace, object.metadata.name);
      seen.add(key);
      const version = input.versions.versionOf(object);
      out.push({
        kind,
        namespace,
        name: object.metadata.name,
        generation: version.generation,
        enteredAt: version.enteredAt,
        problems: problems.get(key) ?? [],
        warnings: warnings.get(key) ?? [],
        ...(documentErrors.has(key) ? { documentErrors: documentErrors.get(key) } : {}),
        selector: affectedSelector(kind, object, input.mesh, input.store, input.meshConfigName),
      });
    }
  }
  // Documents that never loaded: not accepted, nothing in force.
  for (const e of input.errors) {
    if (!e.kind || !e.name || !isPolicyKind(e.kind) || !kinds.includes(e.kind)) continue;
    const key = objectKey(e.kind, e.namespace, e.name);
    if (seen.has(key)) continue;
    seen.add(key);
    out.push({
      kind: e.kind,
      namespace: e.namespace ?? 'default',
      name: e.name,
      generation: 0,
      enteredAt: undefined,
      problems: documentErrors.get(key) ?? [],
      selector: { all: false, identities: new Set(), services: new Set() },
    });
  }
  return out;
}
