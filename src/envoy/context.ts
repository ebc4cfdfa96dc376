/**
 * The generation context: what the generators of one MeshSnapshot generation share (Istio
 * calls it PushContext). The controller makes one per MeshSnapshot it builds, passing the one
 * before; every generator takes it with the {@link ProxyProfile} it generates for. Nothing here
 * is module-level: two controllers (or a test's reference controller) share nothing.
 */
import { serviceKey } from '../catalog/names.js';
import { diffMeshSnapshots } from '../catalog/snapshot-diff.js';
import type { MeshService, MeshSnapshot } from '../catalog/types.js';
import type { Proxy, ServiceIdentity, XdsClientType } from '../proxy/types.js';
import { sameElements } from '../util/same.js';
import { computeOutboundView, outboundViewKey, sameOutboundView, sameOutboundViewInputs, type OutboundView } from './outbound.js';
import type { NamedResource } from './resource.js';

/**
 * Resources of one type that many proxies get alike (e.g. the upstream Clusters of every proxy
 * with one outbound view), from {@link GenerationContext.layer}: one object per generation,
 * and the very object of the generation before while its resources are the same. What is done
 * for a layer once (checks, encodings, a snapshot's shared map) holds for every proxy given it.
 */
export interface ResourceLayer {
  readonly resources: readonly NamedResource[];
  /** The names of {@link resources}. */
  readonly names: ReadonlySet<string>;
}

/** What generators read of a proxy: its identity and the kind of xDS client it is. */
export interface ProxyProfile {
  readonly identity: ServiceIdentity;
  /** `grpc`: a proxyless gRPC client (gRFC A27 resources); `envoy`: a sidecar. */
  readonly clientType: XdsClientType;
}

/** The profile of `proxy`: its identity and client type (`envoy` when unset). */
export function proxyProfile(proxy: Pick<Proxy, 'identity' | 'clientType'>): ProxyProfile {
  return { identity: proxy.identity, clientType: proxy.clientType ?? 'envoy' };
}

/**
 * How many generations an entry nobody asked for is carried (a shared object, an outbound
 * view, a layer): a push that regenerates only some types (endpoints only, weights only) asks
 * for nothing of the others, whose objects must still be there for the next push that does.
 * Only what left the mesh stays that long for nothing.
 */
export const MAX_IDLE_GENERATIONS = 256;

/**
 * How many identities' views one view epoch keeps (see `GenerationContext.outboundView`): past
 * it, what the epoch remembered is dropped and views are computed again (identities that left
 * are not kept for ever while nothing else changes).
 */
export const MAX_EPOCH_VIEWS = 65_536;

/** One shared object and the inputs it was built from. */
interface SharedEntry {
  readonly inputs: readonly unknown[];
  readonly value: object;
  /** The sequence number of the last context that returned it. */
  usedAt: number;
}

/** An outbound view and the number naming it (kept with the view from one generation to the next). */
interface ViewEntry {
  readonly view: OutboundView;
  readonly id: number;
  usedAt: number;
}

/** A layer and the last context that returned it. */
interface LayerEntry {
  readonly layer: ResourceLayer;
  usedAt: number;
}

/** `from`'s entries used within {@link MAX_IDLE_GENERATIONS} of `sequence`, then `over`'s (which win). */
function carry<K, E extends { usedAt: number }>(sequence: number, from: ReadonlyMap<K, E> | undefined, over?: ReadonlyMap<K, E>): Map<K, E> {
  const out = new Map<K, E>();
  for (const source of [from, over]) for (const [k, e] of source ?? []) if (sequence - e.usedAt <= MAX_IDLE_GENERATIONS) out.set(k, e);
  return out;
}

/**
 * What one MeshSnapshot generation's generators share: the MeshSnapshot, one outbound view per
 * identity, the resources that do not depend on the proxy asking ({@link shared}) and the layers
 * of resources many proxies get ({@link layer}); with what the generations before had of
 * these, carried for {@link MAX_IDLE_GENERATIONS} generations once nobody asks for it (a new
 * context drops its predecessor: memory holds what is carried, not a chain of contexts).
 */
export class GenerationContext {
  /** The MeshSnapshot every generator given this context reads. */
  readonly snapshot: MeshSnapshot;
  private previousContext: GenerationContext | undefined;
  /** Numbers the contexts of one chain, one more each generation (for {@link MAX_IDLE_GENERATIONS}). */
  private readonly sequence: number;
  /** By kind, then name (no key string to build per lookup): this generation's, and those carried. */
  private readonly entries = new Map<string, Map<string, SharedEntry>>();
  private readonly viewsByIdentity = new Map<ServiceIdentity, ViewEntry>();
  /** The views of the generations before, by identity (what this one may keep). */
  private readonly carriedViews: ReadonlyMap<ServiceIdentity, ViewEntry>;
  /**
   * By {@link outboundViewKey}: identities reaching the same destinations the same way share one
   * view. One map per view epoch: the generations of one epoch share it.
   */
  private readonly viewsByContent: Map<string, ViewEntry>;
  /**
   * The views computed (or kept after a comparison) by identity since what views read last
   * changed (`sameOutboundViewInputs`): one map shared by the generations of that epoch, whose
   * views are every one of them's.
   */
  private readonly epochViews: Map<ServiceIdentity, ViewEntry>;
  private readonly viewIds = new WeakMap<OutboundView, number>();
  /** Layers by kind and key ({@link layer}): this generation's. */
  private readonly layers = new Map<string, LayerEntry>();
  /** Those of the generations before. */
  private readonly carriedLayers: ReadonlyMap<string, LayerEntry>;
  /** The last view number given, shared along the chain of contexts (numbers are never reused). */
  private readonly viewCounter: { last: number };
  private computedViews = 0;

  /**
   * @param snapshot the MeshSnapshot of this generation.
   * @param previous the context of the generation before: its shared entries, outbound views
   *   and layers (and what it carried) carry over when their inputs are the same objects. It
   *   loses its own predecessor.
   */
  constructor(snapshot: MeshSnapshot, previous?: GenerationContext) {
    this.snapshot = snapshot;
    if (previous) previous.previousContext = undefined;
    this.previousContext = previous;
    this.viewCounter = previous?.viewCounter ?? { last: 0 };
    this.sequence = (previous?.sequence ?? 0) + 1;
    for (const [kind, ofKind] of previous?.entries ?? []) this.entries.set(kind, carry(this.sequence, ofKind));
    this.carriedViews = carry(this.sequence, previous?.carriedViews, previous?.viewsByIdentity);
    this.carriedLayers = carry(this.sequence, previous?.carriedLayers, previous?.layers);
    // What the views read is what the generation before read: the views of its epoch are this one's.
    const sameViews = previous !== undefined && sameOutboundViewInputs(previous.snapshot, snapshot);
    this.epochViews = sameViews ? previous.epochViews : GenerationContext.keptViews(previous, snapshot);
    this.viewsByContent = sameViews ? previous.viewsByContent : new Map();
  }

  /**
   * The views of `previous`'s epoch that a change to `snapshot` cannot alter, by identity: those of
   * identities the change does not name (`diffMeshSnapshots`: a TrafficTarget from or to them, a
   * service of theirs or of an identity they may reach that appeared, went or changed), reaching no
   * service it names (endpoints aside: a view holds none). None for a mesh-wide change, or a change
   * of the permissive mode.
   */
  private static keptViews(previous: GenerationContext | undefined, snapshot: MeshSnapshot): Map<ServiceIdentity, ViewEntry> {
    const kept = new Map<ServiceIdentity, ViewEntry>();
    const before = previous?.snapshot;
    if (!previous || !before || before.settings.permissiveTrafficPolicyMode !== snapshot.settings.permissiveTrafficPolicyMode) return kept;
    const change = diffMeshSnapshots(before, snapshot);
    if (change === 'all') return kept;
    const touched = (svc: MeshService): boolean => change.services.has(serviceKey(svc));
    for (const [identity, entry] of previous.epochViews) {
      if (change.identities.has(identity) || entry.view.upstreams.some(touched) || entry.view.destinations.some((d) => touched(d.service))) continue;
      kept.set(identity, entry);
    }
    return kept;
  }

  /** How many outbound views this context computed (`computeOutboundView`), not kept from the generation before. */
  get outboundViewsComputed(): number {
    return this.computedViews;
  }

  /** The context of the generation before, while this one is the newest (undefined after). */
  get previous(): GenerationContext | undefined {
    return this.previousContext;
  }

  /**
   * A resource that does not depend on the proxy asking, built once and handed to every proxy
   * as the same object (the encoder and validator then recognise it by identity, and every
   * proxy snapshot holds the same encoded bytes).
   *
   * Returns the object remembered under (`kind`, `name`) when it was built from the very same
   * `inputs` (compared element by element by identity: MeshSnapshot parts, which a rebuild
   * keeps when unchanged, and primitives), in this generation or one before (see
   * {@link MAX_IDLE_GENERATIONS}); else
   * `build(...inputs)`. `build` receives nothing but `inputs`: it must read nothing else (no
   * closure over the snapshot or the proxy), so the inputs are all it depends on.
   * @param kind the resource's type, e.g. `ClusterLoadAssignment`.
   * @param name what tells it from the others of its kind, e.g. `bookstore/bookstore-v1|14001`.
   * @throws whatever `build` throws (nothing is remembered then).
   */
  shared<const I extends readonly unknown[], T extends object>(kind: string, name: string, inputs: I, build: (...inputs: I) => T): T {
    let ofKind = this.entries.get(kind);
    if (!ofKind) {
      ofKind = new Map();
      this.entries.set(kind, ofKind);
    }
    let entry = ofKind.get(name);
    if (!entry || !sameElements(entry.inputs, inputs)) {
      entry = { inputs, value: build(...inputs), usedAt: this.sequence };
      ofKind.set(name, entry);
    }
    entry.usedAt = this.sequence;
    return entry.value as T;
  }

  /**
   * The layer of `kind` and `key` (e.g. `Cluster` and an outbound view's number): built once per
   * generation by `build`, and when its resources are those of the layer of the same kind and
   * key a generation before had (the same names, resource objects and parts, in the same
   * order), that layer object itself, so that what was derived from it carries over. `build` may read
   * the context (unlike {@link shared}'s): the layer is built again in every generation.
   * @throws whatever `build` throws (nothing is remembered then).
   */
  layer(kind: string, key: string, build: () => readonly NamedResource[]): ResourceLayer {
    const id = `${kind}\0${key}`;
    let found = this.layers.get(id);
    if (!found) {
      const resources = build();
      const before = this.carriedLayers.get(id);
      found = before && sameResources(before.layer.resources, resources) ? before : { layer: Object.freeze({ resources, names: new Set(resources.map((r) => r.name)) }), usedAt: this.sequence };
      found.usedAt = this.sequence;
      this.layers.set(id, found);
    }
    return found.layer;
  }

  /**
   * The outbound view of proxies of `identity` (`computeOutboundView`), computed once per
   * identity and generation. Identities that reach the same destinations the same way (every
   * identity in permissive mode) get one view object, so what is derived from the view alone
   * can be shared; and the view the generation before had for `identity`, when it reaches the
   * very same services the same way, is kept (what is derived from it alone then carries over).
   * In permissive mode the view is computed once per generation, for the first identity asked.
   * While what views read stays the same from one generation to the next (`sameOutboundViewInputs`:
   * a change of endpoints, of MeshConfig's TLS or telemetry settings), a view computed in one of
   * those generations is kept as it is, not computed again.
   */
  outboundView(identity: ServiceIdentity): OutboundView {
    let entry = this.viewsByIdentity.get(identity);
    // Permissive mode: every identity reaches every service the same way (the view reads the
    // identity only through TrafficTargets), so the first identity's view is everyone's.
    const permissive = this.snapshot.settings.permissiveTrafficPolicyMode;
    if (!entry && permissive) {
      entry = this.viewsByIdentity.values().next().value;
      if (entry) this.viewsByIdentity.set(identity, entry);
    }
    if (!entry) {
      entry = this.epochViews.get(identity) ?? (permissive ? this.epochViews.values().next().value : undefined);
      if (!entry) {
        const computed = computeOutboundView(this.snapshot, identity);
        this.computedViews++;
        const key = outboundViewKey(computed);
        entry = this.viewsByContent.get(key);
        if (!entry) {
          const previous = this.carriedViews;
          const before = previous.get(identity) ?? (permissive ? previous.values().next().value : undefined);
          entry = before && sameOutboundView(before.view, computed) ? before : { view: computed, id: ++this.viewCounter.last, usedAt: this.sequence };
          this.viewsByContent.set(key, entry);
        }
        if (this.epochViews.size >= MAX_EPOCH_VIEWS) {
          this.epochViews.clear();
          this.viewsByContent.clear();
          this.viewsByContent.set(key, entry);
        }
        this.epochViews.set(identity, entry);
      }
      this.viewIds.set(entry.view, entry.id);
      this.viewsByIdentity.set(identity, entry);
    }
    entry.usedAt = this.sequence;
    return entry.view;
  }

  /**
   * A number naming `view` (the object, from {@link outboundView}): the same in every
   * generation that keeps the view, never another view's; for the names of {@link shared}
   * resources derived from the view alone.
   * @throws Error when `view` did not come from this context's {@link outboundView}.
   */
  outboundViewId(view: OutboundView): number {
    const id = this.viewIds.get(view);
    if (id === undefined) throw new Error('outboundViewId: the view was not made by this generation context');
    return id;
  }
}

/** Whether two lists hold the same resources: names, resource objects and parts, in the same order. */
function sameResources(a: readonly NamedResource[], b: readonly NamedResource[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const [x, y] = [a[i]!, b[i]!];
    if (x.name !== y.name || x.resource !== y.resource || !sameElements(x.parts ?? [], y.parts ?? [])) return false;
  }
  return true;
}
