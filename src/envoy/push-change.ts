/**
 * What a push changes for one proxy, as the per-type "needs push" predicates read it (Istio's
 * `cdsNeedsPush` idea): each resource type's module says which changes make its resources
 * regenerate, next to its generator (`clustersNeedPush` in `cds/cds.ts`, …), and
 * `typesToRegenerate` (`generate.ts`) collects them. Pure: no I/O.
 */
import { onlyEndpointsChanged, onlySplitWeightsChanged, type MeshChange } from '../catalog/snapshot-diff.js';
import type { MeshSnapshot } from '../catalog/types.js';
import type { XdsClientType } from '../proxy/types.js';

/** One push, as far as one proxy's resources are concerned. */
export interface PushChange {
  /** The MeshSnapshot the proxy's current resources came from (what a generation from it would give). */
  readonly before: MeshSnapshot;
  readonly after: MeshSnapshot;
  /**
   * `diffMeshSnapshots(before, after)`; a MeshChange naming nothing when the diff cannot alter
   * this proxy's resources (`affectedBy`), e.g. when only its certificate rotated.
   */
  readonly change: 'all' | MeshChange;
  /** The proxy's identity's service certificate rotated. */
  readonly certificateRotated: boolean;
  /** The proxy's client software (absent: `envoy`); a proxyless client has its own rules for some types. */
  readonly clientType?: XdsClientType;
}

/**
 * What a push's mesh change is, for the predicates:
 * - `none`: nothing of the mesh that this proxy's resources depend on (a certificate rotation alone);
 * - `endpoints`: only endpoints of services changed (`onlyEndpointsChanged`): only ClusterLoadAssignments differ;
 * - `split-weights`: only TrafficSplit weights changed (`onlySplitWeightsChanged`): only RouteConfigurations differ;
 * - `other`: anything else (every type may differ).
 */
export type MeshChangeKind = 'none' | 'endpoints' | 'split-weights' | 'other';

/** The {@link MeshChangeKind} of `change.change`. */
export function meshChangeKind(change: PushChange): MeshChangeKind {
  const c = change.change;
  if (c === 'all') return 'other';
  if (c.services.size === 0 && c.identities.size === 0 && !c.servicesChanged) return 'none';
  if (onlyEndpointsChanged(change.before, change.after, c)) return 'endpoints';
  if (onlySplitWeightsChanged(change.before, change.after, c)) return 'split-weights';
  return 'other';
}
