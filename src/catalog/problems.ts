/**
 * A policy or object the catalog could not use, reported with the object and field
 * (for logs, `/debug/policies` and the `trellis_policy_problems` metric).
 */
export interface PolicyProblem {
  /** Kind of the object, e.g. `TrafficSplit`. */
  readonly kind: string;
  readonly namespace: string | undefined;
  readonly name: string;
  /** Field path in the object, e.g. `spec.backends[1].service`. */
  readonly field: string;
  readonly message: string;
  /**
   * `'warning'`: the object applies as written and may be right as it is (a ServiceAccount that
   * exists nowhere yet, a sidecar port, an unused mesh name); absent: an error (what the message
   * says was skipped or kept).
   */
  readonly severity?: 'warning';
}

/** Formats a problem as `Kind ns/name: field: message`. */
export function formatProblem(p: PolicyProblem): string {
  return `${p.kind} ${p.namespace ? `${p.namespace}/` : ''}${p.name}: ${p.field}: ${p.message}`;
}
