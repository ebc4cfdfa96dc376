import { PUSH_ORDER, TYPE_SHORT_NAME, TypeUrl } from '../../api/type-urls.js';
import { LayeredResourceMap, sharedLayerChanges, sharedLayerOf, typeVersion } from '../cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot, ResourceMap } from '../cache/types.js';
import type { DeltaDiscoveryRequest__Output, DeltaDiscoveryResponse } from './discovery-types.js';
import { KnownVersions } from './known-versions.js';
import { StreamBase, isCompleteSetType, type DeltaAdsCall, type StreamContext, type TypeStateBase } from './stream-common.js';

/**
 * How many responses of one type may wait for their ACK/NACK before the oldest is forgotten
 * (a forgotten nonce is then answered like an unknown one: its subscription changes are
 * applied, its ACK/NACK is not recorded).
 */
export const MAX_OUTSTANDING_NONCES = 32;

/** What the server gives each {@link DeltaStream} (the same as a SotW stream gets). */
export type DeltaStreamContext = StreamContext;

const EMPTY: ReadonlyMap<string, CachedResource> = new Map();
const NO_NAMES: ReadonlySet<string> = new Set();

/** Per stream, per type: the subscription and what the client holds, was sent, acked and nacked. */
interface DeltaTypeState extends TypeStateBase {
  /** Subscribed to every resource of the type (LDS/CDS only): `*`, or a first request with no names. */
  wildcard: boolean;
  /**
   * Name → version of every resource the client holds as far as we know: what we sent it (also
   * when it NACKed: clients apply the valid part of a response), or what it said it had in
   * `initial_resource_versions`. Only names the subscription covers. Rebased on the map planned
   * at every push, so it holds of its own only what changed since.
   */
  readonly known: KnownVersions;
  /** Names subscribed since the last response: answered in the next one, even if unchanged, or in `removed_resources` if they don't exist. */
  pending: Set<string>;
  /** `*` was subscribed on a running stream: answer every resource of the type again. */
  resendAll: boolean;
  /** The first request of the type is not answered yet (e.g. no snapshot yet). */
  needsAnswer: boolean;
  /** Responses sent and not yet ACKed or NACKed: nonce → `system_version_info`, oldest first. */
  outstanding: Map<string, string>;
  /**
   * The resource map of the type the stream was last brought up to date with (planned and
   * sent): while the snapshot's map is this same object and no name was subscribed since (an
   * unsubscribe sends nothing), there is nothing to send and the type is not walked again; and
   * when both maps have a shared layer, only what differs between them is (`namesToReconsider`).
   * `undefined`: plan it in full (a first request).
   */
  planned?: ResourceMap;
}

/** What one type has to send in a push: resources to add or update, names to remove. */
interface TypePlan {
  readonly type: TypeUrl;
  readonly st: DeltaTypeState;
  readonly updates: readonly CachedResource[];
  readonly removals: readonly string[];
  /** Send a response even when both lists are empty (the first wildcard request of the type). */
  readonly force: boolean;
}

/** CDS and EDS: their removals go last in a push (after LDS/RDS stopped referring to them). */
function removalsGoLast(type: TypeUrl): boolean {
  return type === TypeUrl.Cluster || type === TypeUrl.ClusterLoadAssignment;
}

/**
 * One incremental ADS stream (`DeltaAggregatedResources`), following Envoy's `xds_protocol`
 * section "Incremental xDS": per-resource versions, subscribe/unsubscribe, `removed_resources`,
 * `initial_resource_versions` on reconnect. Requests and pushes are run one job at a time.
 *
 * - Subscriptions (section "Incremental xDS", and the note on `resource_names_subscribe` in
 *   `discovery.proto`): a first request of LDS or CDS with no names, or `*` among the names
 *   subscribed, is a wildcard subscription, ended only by unsubscribing `*`. Every name
 *   subscribed is answered in the next response even if the client already has it; a name
 *   that doesn't exist is answered in `removed_resources` ("Knowing When a Requested Resource
 *   Does Not Exist"), and sent when it appears.
 * - Versions: a resource's `version` is the snapshot's (a hash of its bytes, stable across
 *   controller restarts, so `initial_resource_versions` of a reconnecting client are
 *   comparable); `system_version_info` is the snapshot's version of the type.
 * - Nonces: every response has a fresh one. Subscription changes are applied whatever the
 *   nonce (a delta request is never stale for them); the nonce only decides ACK/NACK: a
 *   request with the nonce of a response not yet ACKed and no `error_detail` ACKs it, with
 *   `error_detail` NACKs it (recorded, not resent: what was sent counts as held, so only a
 *   change sends again). Unknown or already-answered nonces record nothing. ACKs and NACKs
 *   are recorded as requests arrive; their subscription changes queue, merged per type while
 *   they wait (in order: the net change), so a client sending faster than it is answered holds
 *   at most two queued requests per type.
 * - Pushes send only what changed, in make-before-break order: CDS, EDS, LDS, RDS, SDS
 *   updates, then CDS and EDS removals last; after a cluster is added or changed its
 *   ClusterLoadAssignment (the EDS resource of the same name) is sent again even if unchanged,
 *   since Envoy keeps the cluster warming until it gets one ("Resource warming").
 *
 * The stream plumbing (job queue, authentication on the first request, backpressure, close) is
 * {@link StreamBase}'s.
 */
export class DeltaStream extends StreamBase<DeltaDiscoveryRequest__Output, DeltaDiscoveryResponse, DeltaTypeState> {
  /**
   * Names of clusters sent (added or changed) whose ClusterLoadAssignment was not sent since:
   * EDS sends them even if unchanged as soon as its subscription covers them, also when EDS is
   * requested only after CDS (a reconnecting client whose `initial_resource_versions` say it
   * already holds them).
   */
  private readonly warm = new Set<string>();
  /** Types a request arrived for (the first request of a type takes no merges). */
  private readonly requested = new Set<TypeUrl>();
  /** The subscription changes of each queued merged request, as sets, with the characters of the names subscribed. */
  private readonly mergedChanges = new WeakMap<DeltaDiscoveryRequest__Output, { subscribe: Set<string>; unsubscribe: Set<string>; subscribeChars: number }>();
  /**
   * Per type whose first request is queued and not handled yet: the names it subscribes to (an
   * unsubscribe merged meanwhile must be kept for them, though the stream does not have them yet).
   */
  private readonly firstSubscribes = new Map<TypeUrl, Set<string>>();

  /** Starts serving `call`: the first request authenticates the proxy. */
  constructor(streamId: number, call: DeltaAdsCall, ctx: DeltaStreamContext) {
    super(streamId, call, ctx, 'delta');
  }

  /**
   * A request's ACK or NACK is recorded as it arrives (its nonce names a response already
   * written, whatever is still queued); what is queued is its subscription change, with no
   * nonce. The first request of a type takes no merges (its empty subscribe list is the legacy
   * wildcard, its `initial_resource_versions` count only there).
   */
  protected override arrive(type: TypeUrl, req: DeltaDiscoveryRequest__Output): { req: DeltaDiscoveryRequest__Output; mergeable: boolean } | undefined {
    const nonce = req.response_nonce ?? '';
    const st = this.types.get(type);
    if (nonce !== '') {
      if (st) this.ackOrNack(type, st, nonce, req);
      else this.log.debug({ type: TYPE_SHORT_NAME[type], nonce }, 'nonce of a type not requested yet: no ACK/NACK recorded');
    }
    if (this.endIfBadNames(type, req.resource_names_subscribe ?? [], true)) return undefined;
    if (this.endIfBadNames(type, req.resource_names_unsubscribe ?? [], false)) return undefined;
    const first = !this.requested.has(type);
    if (first && this.endIfBadNames(type, Object.keys(req.initial_resource_versions ?? {}), false)) return undefined;
    this.requested.add(type);
    if (first) this.firstSubscribes.set(type, new Set(req.resource_names_subscribe ?? []));
    return { req: { ...req, response_nonce: '', error_detail: undefined }, mergeable: !first };
  }

  /**
   * Subscription changes add up in order: a name subscribed then unsubscribed is unsubscribed,
   * and the other way round (`*` alike). An unsubscribe is kept only for a name the stream may
   * hold when the merged request is handled: `*`, or a name it subscribes to now or in its
   * first request still queued. Any other is a no-op (xds_protocol "Incremental xDS": the
   * client drops what it unsubscribes; a name not subscribed is held, if at all, through the
   * wildcard, which keeps it), so what a merge keeps is bounded by the subscription. Ends the
   * stream when the names subscribed add up to more than `MAX_RESOURCE_NAMES_PER_TYPE`
   * or `MAX_SUBSCRIBED_NAME_CHARS` characters (applying them would exceed it too).
   */
  protected mergeRequests(older: DeltaDiscoveryRequest__Output, newer: DeltaDiscoveryRequest__Output): DeltaDiscoveryRequest__Output {
    let merged = older;
    let changes = this.mergedChanges.get(older);
    if (!changes) {
      const subscribe = new Set(older.resource_names_subscribe ?? []);
      const sets = { subscribe, unsubscribe: new Set<string>(), subscribeChars: 0 };
      for (const name of subscribe) sets.subscribeChars += name.length;
      // Within a request, unsubscribes apply after subscribes (as in applySubscription).
      for (const name of older.resource_names_unsubscribe ?? []) {
        if (sets.subscribe.delete(name)) sets.subscribeChars -= name.length;
        if (this.mayHold(older, name)) sets.unsubscribe.add(name);
      }
      // Lists made once, when the merged request is handled: a merge costs the newer request's names only.
      merged = {
        ...older,
        get resource_names_subscribe() {
          return [...sets.subscribe];
        },
        get resource_names_unsubscribe() {
          return [...sets.unsubscribe];
        },
      };
      changes = sets;
      this.mergedChanges.set(merged, changes);
    }
    for (const name of newer.resource_names_subscribe ?? []) {
      changes.unsubscribe.delete(name);
      if (changes.subscribe.has(name)) continue;
      changes.subscribe.add(name);
      changes.subscribeChars += name.length;
    }
    for (const name of newer.resource_names_unsubscribe ?? []) {
      if (changes.subscribe.delete(name)) changes.subscribeChars -= name.length;
      if (this.mayHold(older, name)) changes.unsubscribe.add(name);
    }
    const type = (older.type_url ?? '') as TypeUrl;
    if (!this.endIfTooManyNames(type, changes.subscribe.size)) this.endIfNameCharsOver(type, changes.subscribeChars);
    return merged;
  }

  /** Whether an unsubscribe of `name` in a request merged into `queued` may change anything when it is handled (see {@link mergeRequests}). */
  private mayHold(queued: DeltaDiscoveryRequest__Output, name: string): boolean {
    const type = (queued.type_url ?? '') as TypeUrl;
    return name === '*' || this.types.get(type)?.names.has(name) === true || this.firstSubscribes.get(type)?.has(name) === true;
  }

  protected async handleRequest(type: TypeUrl, req: DeltaDiscoveryRequest__Output): Promise<void> {
    this.firstSubscribes.delete(type);
    let st = this.types.get(type);
    const first = st === undefined;
    if (!st) {
      st = newTypeState();
      this.types.set(type, st);
    }
    // Subscription changes count whatever the nonce (its ACK/NACK was recorded on arrival):
    // unlike SotW, a delta request carries only changes, so ignoring an "old" one would lose
    // them for good.
    this.applySubscription(type, st, req, first);
    if (this.endIfTooManyNames(type, st.names.size) || this.endIfNameCharsOver(type)) return;
    await this.sync();
  }

  /** Records the ACK or NACK of the response with `nonce`, if it is one still waiting for it. */
  private ackOrNack(type: TypeUrl, st: DeltaTypeState, nonce: string, req: DeltaDiscoveryRequest__Output): void {
    const version = st.outstanding.get(nonce);
    if (version === undefined) {
      // Not a response of this stream waiting for an answer (another stream's or process's
      // nonce, or one already superseded by a later ACK): nothing to record.
      this.log.debug({ type: TYPE_SHORT_NAME[type], nonce }, 'unknown or already answered nonce: no ACK/NACK recorded');
      return;
    }
    // Responses are answered in order: this answer settles the older ones too.
    for (const n of [...st.outstanding.keys()]) {
      st.outstanding.delete(n);
      if (n === nonce) break;
    }
    if (req.error_detail) {
      // NACK: the client keeps its last good resources (gRPC clients also apply the valid part).
      // Do not resend (xds_protocol "ACK and NACK semantics summary"): `known` already holds the
      // sent versions, so only a later change to a resource sends it again.
      this.recordNack(type, st, version, req.error_detail);
    } else {
      this.recordAck(type, st, version);
    }
  }

  /**
   * Applies `resource_names_subscribe`/`_unsubscribe` and, on the first request of the type,
   * the legacy wildcard and `initial_resource_versions` (xds_protocol "Incremental xDS").
   */
  private applySubscription(type: TypeUrl, st: DeltaTypeState, req: DeltaDiscoveryRequest__Output, first: boolean): void {
    const subscribe = req.resource_names_subscribe ?? [];
    const unsubscribe = req.resource_names_unsubscribe ?? [];
    const wildcardType = isCompleteSetType(type);
    // A first request (what the client holds is what it says): the next sync walks the type again.
    // Later ones keep what was planned: a name subscribed is pending (sent, or removed, next), one
    // unsubscribed leaves `known` with what the stream covers, so the client still holds exactly
    // what `planned` has of its subscription.
    if (first) st.planned = undefined;
    if (first && subscribe.length === 0 && wildcardType) this.setWildcard(st, true); // legacy wildcard
    // Names are kept as the snapshot's own strings where it has them (one copy for every stream).
    const resources = this.snapshot?.resources.get(type);
    for (const requested of subscribe) {
      if (requested === '*') {
        if (!wildcardType) continue; // only LDS and CDS are served as wildcard
        // `*` on a running stream is a subscribe like any other: answer every resource again.
        if (!first) st.resendAll = true;
        // Names held only through the wildcard are not held yet.
        if (!st.wildcard) for (const name of st.planned?.keys() ?? []) if (!st.names.has(name)) st.known.delete(name);
        this.setWildcard(st, true);
        continue;
      }
      const name = resources?.get(requested)?.name ?? requested;
      // A name the stream starts to cover is not held yet (until it is sent).
      if (!st.wildcard && !st.names.has(name)) st.known.delete(name);
      this.addName(st, name);
      st.pending.add(name);
    }
    for (const name of unsubscribe) {
      if (name === '*') {
        if (!st.wildcard) continue;
        this.setWildcard(st, false);
        st.resendAll = false;
        // The client drops what it had only through the wildcard.
        for (const held of [...st.known.keys()]) if (!st.names.has(held)) st.known.delete(held);
        continue;
      }
      this.deleteName(st, name);
      st.pending.delete(name);
      // Still covered by the wildcard: the client keeps it. Otherwise it drops it, so a later
      // subscribe must send it again and a change meanwhile must send nothing.
      if (!st.wildcard) st.known.delete(name);
    }
    if (first) {
      // A reconnecting client says what it holds: send only what differs, and remove what is gone.
      for (const [name, version] of Object.entries(req.initial_resource_versions ?? {})) {
        if (!st.wildcard && !st.names.has(name)) continue;
        st.known.set(name, version);
        st.pending.delete(name);
      }
      st.needsAnswer = true;
    }
  }

  /** Delta: a response of the type waits for its answer while a nonce of it is outstanding. */
  protected override awaitsAnswer(st: DeltaTypeState): boolean {
    return st.outstanding.size > 0;
  }

  /** Sends the latest snapshot's changes (the push of a new snapshot). @returns whether any response was written. */
  protected pushSnapshot(): Promise<boolean> {
    return this.sync();
  }

  /**
   * Brings every subscribed type up to date with the current snapshot: computes what each type
   * must send, then sends in make-before-break order (xds_protocol "Eventual consistency
   * considerations"): CDS, EDS, LDS, RDS, SDS (LDS/RDS/SDS with their removals), then CDS and
   * EDS removals, so no listener or route refers to a cluster that is already gone. Without a
   * snapshot, does nothing (first requests stay unanswered until one arrives).
   * @returns whether any response was written.
   */
  private async sync(): Promise<boolean> {
    const snapshot = this.snapshot;
    if (!snapshot || this.closed) return false;
    const plans: TypePlan[] = [];
    for (const type of PUSH_ORDER) {
      const st = this.types.get(type);
      if (!st) continue;
      const resources = snapshot.resources.get(type) ?? EMPTY;
      const isEds = type === TypeUrl.ClusterLoadAssignment;
      if (upToDate(st, resources, isEds ? this.warm : NO_NAMES)) continue;
      const plan = planType(type, st, resources, isEds ? this.warm : NO_NAMES);
      if (type === TypeUrl.Cluster) for (const r of plan.updates) this.warm.add(r.name);
      if (isEds) {
        // Warmed now, or with no CLA to send: done. Names EDS doesn't cover yet wait for their subscribe.
        for (const name of [...this.warm]) if (st.wildcard || st.names.has(name) || !resources.has(name)) this.warm.delete(name);
      }
      plans.push(plan);
      // Answered by this sync (the sends below run without another job in between).
      st.pending.clear();
      st.resendAll = false;
      st.needsAnswer = false;
      st.planned = resources;
      // What the sends below leave the client holding: every covered resource of `resources`.
      st.known.rebase(resources);
    }
    let sent = false;
    for (const plan of plans) {
      const removals = removalsGoLast(plan.type) ? [] : plan.removals;
      const removalsLater = removalsGoLast(plan.type) && plan.removals.length > 0;
      if (plan.updates.length > 0 || removals.length > 0 || (plan.force && !removalsLater)) {
        sent = (await this.send(plan.type, plan.st, snapshot, plan.updates, removals)) || sent;
      }
    }
    for (const plan of plans) {
      if (removalsGoLast(plan.type) && plan.removals.length > 0) {
        sent = (await this.send(plan.type, plan.st, snapshot, [], plan.removals)) || sent;
      }
    }
    return sent;
  }

  /** Writes one `DeltaDiscoveryResponse` and records what the client now holds. @returns whether it was written. */
  private async send(
    type: TypeUrl,
    st: DeltaTypeState,
    snapshot: ProxySnapshot,
    updates: readonly CachedResource[],
    removals: readonly string[],
  ): Promise<boolean> {
    if (this.closed) return false;
    const version = snapshot.versions.get(type) ?? typeVersion([]);
    const nonce = this.nextNonce();
    const response: DeltaDiscoveryResponse = {
      system_version_info: version,
      type_url: type,
      nonce,
      // The cached resources themselves: the server's encoder frames each once, for every stream that sends it.
      resources: updates as DeltaDiscoveryResponse['resources'],
      removed_resources: [...removals],
    };
    for (const r of updates) st.known.set(r.name, r.version);
    for (const name of removals) st.known.delete(name);
    st.lastNonceSent = nonce;
    st.lastVersionSent = version;
    st.outstanding.set(nonce, version);
    if (st.outstanding.size > MAX_OUTSTANDING_NONCES) st.outstanding.delete(st.outstanding.keys().next().value!);

    let bytes = 0;
    for (const r of updates) bytes += r.resource.value.length;
    await this.write(type, response, bytes, { version, nonce, resources: updates.length, removed: removals.length });
    return true;
  }
}

function newTypeState(): DeltaTypeState {
  const st: DeltaTypeState = {
    wildcard: false,
    names: new Set(),
    known: new KnownVersions((name) => st.wildcard || st.names.has(name)),
    pending: new Set(),
    resendAll: false,
    needsAnswer: false,
    outstanding: new Map(),
  };
  return st;
}

/**
 * Whether `type` has nothing to send for the stream to hold `resources`, known without walking
 * them: it was brought up to date with this very map (object identity: a snapshot keeps the map
 * of a type it does not change), its subscription did not change since (nothing pending, no `*`
 * to answer, no first request), and no cluster in `warm` (EDS) is one it covers.
 */
function upToDate(st: DeltaTypeState, resources: ResourceMap, warm: ReadonlySet<string>): boolean {
  if (st.planned !== resources || st.pending.size > 0 || st.resendAll || st.needsAnswer) return false;
  for (const name of warm) if (st.wildcard || st.names.has(name)) return false;
  return true;
}

/**
 * What `type` must send for the stream to hold `resources` (as far as its subscription covers
 * them): every covered resource the client doesn't hold at this version, or subscribed since the
 * last response, or in `warm` (EDS of clusters just sent); and in removals, every name it holds
 * that is gone, and every name subscribed since the last response that doesn't exist.
 */
function planType(type: TypeUrl, st: DeltaTypeState, resources: ResourceMap, warm: ReadonlySet<string>): TypePlan {
  const updates: CachedResource[] = [];
  const consider = (r: CachedResource): void => {
    if (st.resendAll || st.pending.has(r.name) || warm.has(r.name) || st.known.get(r.name) !== r.version) updates.push(r);
  };
  const removals: string[] = [];
  const candidates = namesToReconsider(st, resources);
  if (candidates) {
    // Only what differs from the map last planned (the client holds exactly that map's covered
    // resources), and the clusters just sent (EDS).
    for (const name of candidates) {
      const r = resources.get(name);
      if (r) {
        if (st.wildcard || st.names.has(name)) consider(r);
      } else if (st.known.has(name) || st.pending.has(name)) removals.push(name);
    }
    for (const name of warm) {
      const r = candidates.has(name) ? undefined : resources.get(name);
      if (r && (st.wildcard || st.names.has(name))) consider(r);
    }
    return { type, st, updates, removals, force: st.needsAnswer && st.wildcard };
  }
  if (st.wildcard) for (const r of resources.values()) consider(r);
  else {
    for (const name of st.names) {
      const r = resources.get(name);
      if (r) consider(r);
    }
  }
  for (const name of st.known.keys()) if (!resources.has(name)) removals.push(name);
  for (const name of st.pending) if (!resources.has(name) && !st.known.has(name)) removals.push(name);
  return { type, st, updates, removals, force: st.needsAnswer && st.wildcard };
}

/**
 * The names whose resource may differ for the client between the map `st` was last brought up to
 * date with (`st.planned`) and `resources`, when both have a shared layer and no `*` is to be
 * answered again: the names subscribed since (pending), the shared layers' changes
 * (`sharedLayerChanges`, one walk per pair of layers for every stream) and the own resources of
 * both. The client holds exactly what `st.planned` has of its subscription (unsubscribes take
 * their names out of `known`), so every other name is unchanged for it. Undefined when the whole
 * map must be walked.
 */
function namesToReconsider(st: DeltaTypeState, resources: ResourceMap): Set<string> | undefined {
  if (!st.planned || st.resendAll) return undefined;
  const [before, after] = [sharedLayerOf(st.planned), sharedLayerOf(resources)];
  if (!before || !after) return undefined;
  const { changed, removed } = sharedLayerChanges(before, after);
  const names = new Set<string>([...removed, ...st.pending]);
  for (const r of changed) names.add(r.name);
  for (const map of [st.planned, resources]) if (map instanceof LayeredResourceMap) for (const name of map.own.keys()) names.add(name);
  return names;
}
