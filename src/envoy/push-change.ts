/**
 * What a push changes for one proxy, as the per-type "needs push" predicates read it (Istio's
 * `cdsNeedsPush` idea): each resource type's module says which changes make its resources
 * regenerate, next to its generator (`clustersNeedPush` in `cds/cds.ts`, …), and
 * `typesToRegenerate` (`generate.ts`) collects them. Pure: no I/O.
 */
import { isDeepStrictEqual } from 'node:util';
import { diffMeshSnapshots, onlyEndpointsChanged, onlySplitWeightsChanged, type MeshChange } from '../catalog/snapshot-diff.js';
import type { MeshSettings, MeshSnapshot } from '../catalog/types.js';
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
  /** `meshChangeKind` of this change, when the caller has it already (see {@link withMeshChangeKind}). */
  readonly kind?: MeshChangeKind;
}

/**
 * What a push's mesh change is, for the predicates:
 * - `none`: nothing of the mesh that this proxy's resources depend on (a certificate rotation alone);
 * - `endpoints`: only endpoints of services changed (`onlyEndpointsChanged`): only ClusterLoadAssignments differ;
 * - `split-weights`: only TrafficSplit weights changed (`onlySplitWeightsChanged`): only RouteConfigurations differ;
 * - `tls-settings`: only the sidecars' TLS settings of MeshConfig changed ({@link onlyTlsSettingsChanged}):
 *   only the resources carrying a TLS context differ (Clusters, Listeners);
 * - `other`: anything else (every type may differ).
 */
export type MeshChangeKind = 'none' | 'endpoints' | 'split-weights' | 'tls-settings' | 'other';

/** The {@link MeshChangeKind} of `change.change` (`change.kind` when given). */
export function meshChangeKind(change: PushChange): MeshChangeKind {
  if (change.kind !== undefined) return change.kind;
  const c = change.change;
  if (c === 'all') return onlyTlsSettingsChanged(change.before, change.after) ? 'tls-settings' : 'other';
  if (c.services.size === 0 && c.identities.size === 0 && !c.servicesChanged) return 'none';
  if (onlyEndpointsChanged(change.before, change.after, c)) return 'endpoints';
  if (onlySplitWeightsChanged(change.before, change.after, c)) return 'split-weights';
  return 'other';
}

/** `change` with its {@link MeshChangeKind} found once, for the predicates that each ask for it. */
export function withMeshChangeKind(change: PushChange): PushChange {
  return change.kind !== undefined ? change : { ...change, kind: meshChangeKind(change) };
}

/** The MeshConfig settings the sidecars' TLS contexts are made of (`tlsParams` in `tls.ts`), and nothing else is. */
const TLS_SETTINGS: ReadonlySet<keyof MeshSettings> = new Set<keyof MeshSettings>(['tlsMinProtocolVersion', 'tlsMaxProtocolVersion', 'cipherSuites', 'ecdhCurves']);

/**
 * True when `before` and `after` differ only in the sidecars' TLS settings (MeshConfig
 * `sidecar.tlsMinProtocolVersion`, `tlsMaxProtocolVersion`, `cipherSuites`, `ecdhCurves`): every
 * other setting equal, and the snapshots equal apart from the settings (`diffMeshSnapshots` names
 * nothing). Then only the TLS contexts differ in any proxy's configuration: those of the upstream
 * Clusters and of the Listeners (the inbound listener's mesh chains, ingress HTTPS chains).
 */
export function onlyTlsSettingsChanged(before: MeshSnapshot, after: MeshSnapshot): boolean {
  const [a, b] = [before.settings, after.settings];
  if (a === b) return false;
  for (const key of new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof MeshSettings>) {
    if (!TLS_SETTINGS.has(key) && !isDeepStrictEqual(a[key], b[key])) return false;
  }
  const rest = diffMeshSnapshots(before, { ...after, settings: a });
  return rest !== 'all' && rest.services.size === 0 && rest.identities.size === 0 && !rest.servicesChanged;
}
