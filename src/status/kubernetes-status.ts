/**
 * The `status` the controller writes on a policy object in Kubernetes mode (issue 16 item 1):
 * OSM's `currentStatus` and `reason`, and the conditions `Accepted` and `Programmed` (shaped as
 * `metav1.Condition`, with `observedGeneration`). Pure.
 */
import { isProgrammed, programmedSummary, type PolicyStatus } from './policy-status.js';
import type { PolicyKind } from './object-versions.js';

/** The kinds whose CRD (deploy/crds) has a status subresource, with their API group, version and plural. */
export const STATUS_SUBRESOURCE_KINDS: ReadonlyMap<PolicyKind, { readonly group: string; readonly version: string; readonly plural: string }> = new Map([
  ['IngressBackend', { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'ingressbackends' }],
  ['UpstreamTrafficSetting', { group: 'policy.openservicemesh.io', version: 'v1alpha1', plural: 'upstreamtrafficsettings' }],
]);

/** One condition (`metav1.Condition`). */
export interface StatusCondition {
  readonly type: 'Accepted' | 'Programmed';
  readonly status: 'True' | 'False';
  readonly observedGeneration: number;
  /** RFC 3339, when `status` last changed. */
  readonly lastTransitionTime: string;
  readonly reason: string;
  readonly message: string;
}

/** The `status` of a policy object. */
export interface KubernetesPolicyStatus {
  /** OSM's: `committed` (programmed), `pending` (accepted, not on every affected proxy yet) or `error` (not accepted, or NACKed). */
  readonly currentStatus: 'committed' | 'pending' | 'error';
  readonly reason: string;
  readonly conditions: readonly StatusCondition[];
}

/** The longest condition message written (the CRD allows 32 768 characters; problems can be many). */
export const MAX_CONDITION_MESSAGE = 4096;

function bounded(text: string): string {
  return text.length <= MAX_CONDITION_MESSAGE ? text : `${text.slice(0, MAX_CONDITION_MESSAGE - 1)}…`;
}

/**
 * The status to write for `status`, keeping each condition's `lastTransitionTime` from
 * `previous` (the object's status as stored) while its `status` is the same.
 * @param now RFC 3339 time of this evaluation.
 */
export function kubernetesStatus(status: PolicyStatus, previous: unknown, now: string): KubernetesPolicyStatus {
  const before = new Map<string, { status?: unknown; lastTransitionTime?: unknown }>();
  const list = (previous as { conditions?: unknown } | undefined)?.conditions;
  if (Array.isArray(list)) for (const c of list as { type?: unknown; status?: unknown; lastTransitionTime?: unknown }[]) if (typeof c?.type === 'string') before.set(c.type, c);
  const condition = (type: StatusCondition['type'], ok: boolean, reason: string, message: string): StatusCondition => {
    const prior = before.get(type);
    const value = ok ? 'True' : 'False';
    const since = prior?.status === value && typeof prior.lastTransitionTime === 'string' ? prior.lastTransitionTime : now;
    return { type, status: value, observedGeneration: status.generation, lastTransitionTime: since, reason, message: bounded(message) };
  };
  const summary = programmedSummary(status);
  const programmed = isProgrammed(status);
  const accepted = condition('Accepted', status.accepted, status.accepted ? 'Accepted' : 'Invalid', status.accepted ? 'no problem found' : status.problems.join('\n'));
  const programmedCondition = !status.accepted
    ? condition('Programmed', false, 'Invalid', `not accepted; the version in force ${summary}`)
    : condition('Programmed', programmed, programmed ? 'Programmed' : status.nacked > 0 ? 'Rejected' : 'Pending', summary);
  const currentStatus = !status.accepted || status.nacked > 0 ? 'error' : programmed ? 'committed' : 'pending';
  const reason = !status.accepted ? bounded(status.problems.join('\n')) : currentStatus === 'committed' ? `successfully committed: ${summary}` : summary;
  return { currentStatus, reason, conditions: [accepted, programmedCondition] };
}

/** Whether `next` says the same as `stored` (a status read back): the same fields, `lastTransitionTime` aside only where `next` kept it. */
export function sameStatus(next: KubernetesPolicyStatus, stored: unknown): boolean {
  if (stored === null || typeof stored !== 'object') return false;
  const s = stored as { currentStatus?: unknown; reason?: unknown; conditions?: unknown };
  if (s.currentStatus !== next.currentStatus || s.reason !== next.reason || !Array.isArray(s.conditions) || s.conditions.length !== next.conditions.length) return false;
  return next.conditions.every((c, i) => {
    const o = (s.conditions as Record<string, unknown>[])[i];
    return o?.type === c.type && o.status === c.status && o.observedGeneration === c.observedGeneration && o.reason === c.reason && o.message === c.message && o.lastTransitionTime === c.lastTransitionTime;
  });
}
