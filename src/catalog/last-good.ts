import type { PolicyProblem } from './problems.js';
import { byName as byPolicyName } from '../util/order.js';

/** Appended to the message of a problem whose policy keeps its last valid version. */
export const KEPT_NOTE = '; its last valid version stays in force';
/** Appended to the message of a problem whose policy keeps a previous version that had problems too (it was applied in part). */
export const PREVIOUS_NOTE = '; its previous version, applied in part, stays in force';
/** Appended to the message of a problem whose policy is left out and had no version in force before. */
export const NOT_IN_FORCE_NOTE = '; it is not in force';

const NOTES = [KEPT_NOTE, PREVIOUS_NOTE, NOT_IN_FORCE_NOTE];
/** The end of a message saying what the policy applies without (`; the TrafficTarget applies without match "X"`). */
const APPLIES_WITHOUT = /; the \w+ applies without [^;]*$/;

/** What {@link keepLastGood} resolved. */
export interface KeptPolicies<T> {
  /** The policies in force, sorted by name. */
  readonly policies: T[];
  /**
   * `Kind <namespace>/<name>` of the policies in force with problems of their own (applied in
   * part, e.g. without a match that does not exist): none of their versions is a valid one.
   */
  readonly partial: ReadonlySet<string>;
}

/**
 * Keep-last-good for resolved policies: a policy object that still exists but now has a
 * problem (its own, or one of an object it references, named by `dependsOn`) keeps the
 * version resolved in the previous snapshot when that version was valid (not in
 * `previousPartial`), so a typo in a policy never takes away traffic that was working. A policy
 * whose previous version was itself applied in part gets its current version when it has one
 * (an edit of a partly applied policy applies), else keeps the previous one. The problems stay
 * reported, each with what is in force: {@link KEPT_NOTE}, {@link PREVIOUS_NOTE}, or, for a
 * policy of `kind` left out that had no version in force, {@link NOT_IN_FORCE_NOTE}.
 * @param kind the policy kind, e.g. `TrafficTarget`.
 * @param current the policies resolved now (`name` = `<namespace>/<name>`), some applied in part.
 * @param previous the same kind's policies in the previous snapshot.
 * @param previousPartial the previous build's {@link KeptPolicies.partial}.
 * @param existing names (`<namespace>/<name>`) of the policy objects in the store now.
 * @param dependsOn for a policy name, the `Kind <namespace>/<name>` keys of objects it refers to.
 * @param problems all problems of this build; updated in place.
 */
export function keepLastGood<T extends { readonly name: string }>(
  kind: string,
  current: readonly T[],
  previous: readonly T[] | undefined,
  previousPartial: ReadonlySet<string>,
  existing: ReadonlySet<string>,
  dependsOn: (name: string) => readonly string[],
  problems: PolicyProblem[],
): KeptPolicies<T> {
  const byName = new Map(current.map((p) => [p.name, p]));
  const problemKey = (p: PolicyProblem) => `${p.kind} ${p.namespace ?? ''}/${p.name}`;
  const problemsOf = (name: string): number[] => {
    const keys = new Set([`${kind} ${name}`, ...dependsOn(name)]);
    return problems.flatMap((p, i) => (keys.has(problemKey(p)) ? [i] : []));
  };
  const note = (indexes: readonly number[], text: string): void => {
    for (const i of indexes) {
      // What this version would apply without is moot when an earlier version stays in force.
      const message = text === NOT_IN_FORCE_NOTE ? problems[i].message : problems[i].message.replace(APPLIES_WITHOUT, '');
      if (!NOTES.some((n) => message.endsWith(n))) problems[i] = { ...problems[i], message: `${message}${text}` };
    }
  };
  const partial = new Set<string>();
  const kept = new Set<string>();
  for (const old of previous ?? []) {
    if (!existing.has(old.name)) continue;
    const indexes = problemsOf(old.name);
    if (indexes.length === 0) continue;
    const wasPartial = previousPartial.has(`${kind} ${old.name}`);
    if (wasPartial && byName.has(old.name)) continue;
    byName.set(old.name, old);
    kept.add(old.name);
    if (wasPartial) partial.add(`${kind} ${old.name}`);
    note(indexes, wasPartial ? PREVIOUS_NOTE : KEPT_NOTE);
  }
  for (const name of byName.keys()) if (!kept.has(name) && problemsOf(name).length > 0) partial.add(`${kind} ${name}`);
  note(
    problems.flatMap((p, i) => (p.kind === kind && !byName.has(`${p.namespace ?? ''}/${p.name}`) ? [i] : [])),
    NOT_IN_FORCE_NOTE,
  );
  return { policies: [...byName.values()].sort(byPolicyName), partial };
}
