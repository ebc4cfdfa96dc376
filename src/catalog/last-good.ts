import type { PolicyProblem } from './problems.js';
import { byName as byPolicyName } from '../util/order.js';

/** Appended to the message of a problem whose policy keeps its last valid version. */
export const KEPT_NOTE = '; its last valid version stays in force';

/**
 * Keep-last-good for resolved policies: a policy object that still exists but now has a
 * problem (its own, or one of an object it references, named by `dependsOn`) keeps the
 * version resolved in the previous snapshot, if it had one, so a typo in a policy never
 * takes away traffic that was working. The problems stay reported, with {@link KEPT_NOTE}
 * added to their messages.
 * @param kind the policy kind, e.g. `TrafficTarget`.
 * @param current the policies resolved now (`name` = `<namespace>/<name>`).
 * @param previous the same kind's policies in the previous snapshot.
 * @param existing names (`<namespace>/<name>`) of the policy objects in the store now.
 * @param dependsOn for a policy name, the `Kind <namespace>/<name>` keys of objects it refers to.
 * @param problems all problems of this build; updated in place.
 * @returns `current` with kept versions put in place of (or beside) the failed ones, sorted by name.
 */
export function keepLastGood<T extends { readonly name: string }>(
  kind: string,
  current: readonly T[],
  previous: readonly T[] | undefined,
  existing: ReadonlySet<string>,
  dependsOn: (name: string) => readonly string[],
  problems: PolicyProblem[],
): T[] {
  if (!previous || previous.length === 0) return [...current];
  const byName = new Map(current.map((p) => [p.name, p]));
  const problemKey = (p: PolicyProblem) => `${p.kind} ${p.namespace ?? ''}/${p.name}`;
  for (const old of previous) {
    if (!existing.has(old.name)) continue;
    const keys = new Set([`${kind} ${old.name}`, ...dependsOn(old.name)]);
    const indexes = problems.flatMap((p, i) => (keys.has(problemKey(p)) ? [i] : []));
    if (indexes.length === 0) continue;
    byName.set(old.name, old);
    for (const i of indexes) {
      if (!problems[i].message.endsWith(KEPT_NOTE)) problems[i] = { ...problems[i], message: `${problems[i].message}${KEPT_NOTE}` };
    }
  }
  return [...byName.values()].sort(byPolicyName);
}
