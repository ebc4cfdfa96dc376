/**
 * Policy status that means "programmed" (issue 16 item 1): for each policy object, whether it
 * was accepted and how many of the proxies it affects hold (ACKed) a configuration that is known
 * right for the MeshSnapshot generation its current content entered at, and how many NACKed one.
 * Pure: computed on request from the controller's records (per proxy: the newest generation its
 * ACKed configuration is right for, its newest NACK, its dependencies), in O(proxies) plus, per
 * object, O(kinds of proxy) — never O(objects × proxies).
 */
import type { ServiceIdentity, XdsClientType } from '../proxy/types.js';
import { lowerBound } from '../util/order.js';
import type { AffectedSelector } from './affected.js';
import type { PolicyKind } from './object-versions.js';

/** A NACK as the status shows it. */
export interface StatusNack {
  /** The proxy's UUID. */
  readonly proxy: string;
  readonly identity: string;
  /** `CDS`, `EDS`, `LDS`, `RDS` or `SDS`. */
  readonly type: string;
  /** The proxy's `error_detail.message` (cut and cleaned as the ADS server keeps it). */
  readonly message: string;
}

/** The status of one policy object (the `/debug/policies` `status` entries; the shape shared with the page). */
export interface PolicyStatus {
  readonly kind: PolicyKind;
  readonly namespace: string;
  readonly name: string;
  /** See `ObjectVersion.generation`. */
  readonly generation: number;
  /** No problem was found in it (its problems are in `problems`). */
  readonly accepted: boolean;
  /**
   * The policy problems of the version in force, formatted as the controller logs them; of an
   * object none of whose documents ever loaded (generation 0), its manifest errors.
   */
  readonly problems: readonly string[];
  /**
   * The manifest errors of the object's latest document, which did not load (manifests mode):
   * the version in force, `generation`, stays, and `accepted` is of it. Absent: none.
   */
  readonly documentErrors?: readonly string[];
  /** Its policy warnings (e.g. a ServiceAccount that exists nowhere yet): it is accepted with them. */
  readonly warnings?: readonly string[];
  /** Connected proxies it affects. */
  readonly affected: number;
  /** Of those, the ones that ACKed a configuration right for its current generation. */
  readonly programmed: number;
  /** Of the others, the ones that NACKed a configuration made for its current generation (or a later one). */
  readonly nacked: number;
  /** The earliest of those NACKs, or null. */
  readonly firstNack: StatusNack | null;
}

/** What the controller knows of one connected proxy, for the status. */
export interface ProxyProgress {
  readonly uuid: string;
  readonly identity: ServiceIdentity;
  readonly clientType: XdsClientType;
  /**
   * The newest MeshSnapshot generation that the configuration the proxy ACKed in full is right
   * for (it was generated at it or later, or confirmed unaffected by every push up to it);
   * undefined when it ACKed none.
   */
  readonly programmedThrough: number | undefined;
  /** Its newest NACK, with the newest generation the rejected configuration was made for; undefined when none is known. */
  readonly nack: { readonly through: number; readonly type: string; readonly message: string; readonly at: Date } | undefined;
  /** Why its configuration may be behind besides waiting for an ACK (a configuration that failed validation or generation), for `waiting`. */
  readonly behind?: string;
}

/** A policy object as the status computation takes it. */
export interface PolicyObjectState {
  readonly kind: PolicyKind;
  readonly namespace: string;
  readonly name: string;
  readonly generation: number;
  /** The MeshSnapshot generation its current content entered at; undefined while none was built from it. */
  readonly enteredAt: number | undefined;
  readonly problems: readonly string[];
  /** See {@link PolicyStatus.documentErrors}. */
  readonly documentErrors?: readonly string[];
  /** Its policy warnings (`PolicyProblem.severity` `'warning'`): listed, not counted against acceptance. */
  readonly warnings?: readonly string[];
  readonly selector: AffectedSelector;
}

/** A proxy an object is not programmed on yet, and why (`/debug/policy-status`). */
export interface WaitingProxy {
  readonly proxy: string;
  readonly identity: string;
  readonly reason: string;
}

/** {@link PolicyStatus} with the first proxies it waits for. */
export interface PolicyStatusDetail extends PolicyStatus {
  /** MeshSnapshot generation the object's current content entered at (null: not built yet). */
  readonly meshGeneration: number | null;
  /** The first {@link MAX_WAITING} affected proxies that are not programmed, by UUID. */
  readonly waiting: readonly WaitingProxy[];
}

/** How many not-programmed proxies {@link PolicyStatusDetail.waiting} lists. */
export const MAX_WAITING = 20;

/** The proxies of one identity and client type: one dependency set, their progress sorted. */
interface ProxyGroup {
  readonly identity: ServiceIdentity;
  readonly clientType: XdsClientType;
  readonly proxies: ProxyProgress[];
  /** `programmedThrough` of {@link proxies}, ascending (none: -1). */
  throughs: number[];
  /** Proxies of the group with a NACK. */
  readonly nacking: ProxyProgress[];
  dependencies?: ReadonlySet<string>;
}

/** The services (`<ns>/<svc>`) a proxy's configuration of this identity and client type is generated from (`proxyDependencies`). */
export type DependenciesOf = (identity: ServiceIdentity, clientType: XdsClientType) => ReadonlySet<string>;

/**
 * Computes policy statuses over one set of proxies: build once per request ({@link ProgressIndex}),
 * then ask per object.
 */
export class ProgressIndex {
  private readonly groups: ProxyGroup[];

  constructor(
    proxies: readonly ProxyProgress[],
    private readonly dependenciesOf: DependenciesOf,
  ) {
    const byKey = new Map<string, ProxyGroup>();
    for (const p of proxies) {
      const key = `${p.clientType}|${p.identity}`;
      let group = byKey.get(key);
      if (!group) {
        group = { identity: p.identity, clientType: p.clientType, proxies: [], throughs: [], nacking: [] };
        byKey.set(key, group);
      }
      group.proxies.push(p);
      if (p.nack) group.nacking.push(p);
    }
    this.groups = [...byKey.values()];
    for (const g of this.groups) g.throughs = g.proxies.map((p) => p.programmedThrough ?? -1).sort((a, b) => a - b);
  }

  /** The groups `selector` reaches. */
  private affectedGroups(selector: AffectedSelector): ProxyGroup[] {
    if (selector.all) return this.groups;
    return this.groups.filter((g) => {
      if (selector.identities.has(g.identity)) return true;
      if (selector.services.size === 0) return false;
      const deps = (g.dependencies ??= this.dependenciesOf(g.identity, g.clientType));
      for (const s of selector.services) if (deps.has(s)) return true;
      return false;
    });
  }

  /** The status of `object`. */
  status(object: PolicyObjectState): PolicyStatus {
    return this.compute(object, 0).status;
  }

  /** The status of `object` with the first proxies it waits for. */
  detail(object: PolicyObjectState): PolicyStatusDetail {
    const { status, waiting } = this.compute(object, MAX_WAITING);
    return { ...status, meshGeneration: object.enteredAt ?? null, waiting };
  }

  private compute(object: PolicyObjectState, maxWaiting: number): { status: PolicyStatus; waiting: WaitingProxy[] } {
    const entered = object.enteredAt;
    let affected = 0;
    let programmed = 0;
    let nacked = 0;
    let first: { p: ProxyProgress; at: Date } | undefined;
    const waiting: WaitingProxy[] = [];
    for (const g of this.affectedGroups(object.selector)) {
      affected += g.proxies.length;
      if (entered !== undefined) programmed += g.throughs.length - lowerBound(g.throughs, entered);
      for (const p of g.nacking) {
        if (!isNacked(p, entered)) continue;
        nacked++;
        if (!first || p.nack!.at < first.at) first = { p, at: p.nack!.at };
      }
      if (maxWaiting > 0) {
        for (const p of g.proxies) {
          if (entered !== undefined && (p.programmedThrough ?? -1) >= entered) continue;
          waiting.push({ proxy: p.uuid, identity: p.identity, reason: waitingReason(p, entered) });
        }
      }
    }
    waiting.sort((a, b) => (a.proxy < b.proxy ? -1 : a.proxy > b.proxy ? 1 : 0));
    const firstNack = first ? { proxy: first.p.uuid, identity: first.p.identity, type: first.p.nack!.type, message: first.p.nack!.message } : null;
    const status: PolicyStatus = {
      kind: object.kind,
      namespace: object.namespace,
      name: object.name,
      generation: object.generation,
      accepted: object.problems.length === 0,
      problems: object.problems,
      ...(object.documentErrors && object.documentErrors.length > 0 ? { documentErrors: object.documentErrors } : {}),
      ...(object.warnings && object.warnings.length > 0 ? { warnings: object.warnings } : {}),
      affected,
      programmed,
      nacked,
      firstNack,
    };
    return { status, waiting: waiting.slice(0, maxWaiting) };
  }
}

/** Whether `p` is not programmed for content entered at `entered` and NACKed a configuration made for it (or later). */
function isNacked(p: ProxyProgress, entered: number | undefined): boolean {
  if (entered === undefined || !p.nack) return false;
  return (p.programmedThrough ?? -1) < entered && p.nack.through >= entered;
}

/** Why `p` is not programmed for content entered at `entered`. */
function waitingReason(p: ProxyProgress, entered: number | undefined): string {
  if (entered === undefined) return 'no configuration built from this version yet';
  if (isNacked(p, entered)) return `NACKed ${p.nack!.type}: ${p.nack!.message}`;
  return p.behind ?? 'not ACKed yet';
}

/** Whether `status` is programmed: accepted and ACKed by every affected proxy. */
export function isProgrammed(status: PolicyStatus): boolean {
  return status.accepted && status.programmed === status.affected;
}

/** `reached N of M affected proxies, K NACKed (first NACK's reason)`: the one-line summary of the status. */
export function programmedSummary(status: PolicyStatus): string {
  const nack = status.firstNack ? `, ${status.nacked} NACKed (${status.firstNack.type} from ${status.firstNack.identity} ${status.firstNack.proxy}: ${status.firstNack.message})` : '';
  return `reached ${status.programmed} of ${status.affected} affected proxies${nack}`;
}
