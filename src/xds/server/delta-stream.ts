import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { PUSH_ORDER, TYPE_SHORT_NAME, TypeUrl } from '../../api/type-urls.js';
import type { Proxy } from '../../proxy/types.js';
import type { SnapshotWatcher } from '../cache/snapshot-cache.js';
import { typeVersion } from '../cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot, ResourceMap } from '../cache/types.js';
import type { DeltaDiscoveryRequest__Output, DeltaDiscoveryResponse } from './discovery-types.js';
import {
  KNOWN_TYPES,
  LARGE_RESPONSE_BYTES,
  errorMessage,
  isCompleteSetType,
  type AdsHooks,
  type AdsMetrics,
  type Authenticate,
  type DeltaAdsCall,
  type NackDetail,
  type NackInfo,
  type ServedStream,
  type StreamInfo,
  type TypeStreamInfo,
} from './stream-common.js';

/**
 * How many responses of one type may wait for their ACK/NACK before the oldest is forgotten
 * (a forgotten nonce is then answered like an unknown one: its subscription changes are
 * applied, its ACK/NACK is not recorded).
 */
export const MAX_OUTSTANDING_NONCES = 32;

/** What the server gives each {@link DeltaStream}. */
export interface DeltaStreamContext {
  /** Where the proxy's snapshots come from. */
  readonly watcher: SnapshotWatcher;
  readonly hooks: AdsHooks;
  readonly metrics: AdsMetrics;
  readonly logger: Logger;
  /** Listening address the stream came in on (debug API). */
  readonly listener: string;
  readonly authenticate: Authenticate;
  /** The stream is authenticated: list it in the server's streams. */
  register(stream: ServedStream): void;
  /** The stream ended: forget it. */
  unregister(stream: ServedStream): void;
}

const EMPTY: ResourceMap = new Map();
const NO_NAMES: ReadonlySet<string> = new Set();

/** Per stream, per type: the subscription and what the client holds, was sent, acked and nacked. */
interface DeltaTypeState {
  /** Subscribed to every resource of the type (LDS/CDS only): `*`, or a first request with no names. */
  wildcard: boolean;
  /** Names subscribed explicitly (never `*`). */
  names: Set<string>;
  /**
   * Name → version of every resource the client holds as far as we know: what we sent it (also
   * when it NACKed: clients apply the valid part of a response), or what it said it had in
   * `initial_resource_versions`. Only names the subscription covers.
   */
  known: Map<string, string>;
  /** Names subscribed since the last response: answered in the next one, even if unchanged, or in `removed_resources` if they don't exist. */
  pending: Set<string>;
  /** `*` was subscribed on a running stream: answer every resource of the type again. */
  resendAll: boolean;
  /** The first request of the type is not answered yet (e.g. no snapshot yet). */
  needsAnswer: boolean;
  /** Responses sent and not yet ACKed or NACKed: nonce → `system_version_info`, oldest first. */
  outstanding: Map<string, string>;
  lastNonceSent?: string;
  lastVersionSent?: string;
  versionAcked?: string;
  lastNack?: NackInfo;
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
 *   change sends again). Unknown or already-answered nonces record nothing.
 * - Pushes send only what changed, in make-before-break order: CDS, EDS, LDS, RDS, SDS
 *   updates, then CDS and EDS removals last; after a cluster is added or changed its
 *   ClusterLoadAssignment (the EDS resource of the same name) is sent again even if unchanged,
 *   since Envoy keeps the cluster warming until it gets one ("Resource warming").
 */
export class DeltaStream implements ServedStream {
  /** The authenticated proxy; `undefined` until the first request is authenticated. */
  proxy?: Proxy;
  /** When the stream was authenticated (until then, when it was accepted). */
  connectedAt = new Date();
  private readonly types = new Map<TypeUrl, DeltaTypeState>();
  private snapshot?: ProxySnapshot;
  private pendingSnapshot?: { snapshot: ProxySnapshot; receivedAt: bigint };
  private pushQueued = false;
  private readonly jobs: Array<() => Promise<void>> = [];
  private running = false;
  private started = false;
  private opened = false;
  private closed = false;
  private cancelWatch?: () => void;
  private log: Logger;
  /** Random per stream, so nonces of other streams or earlier processes are never taken for ours. */
  private readonly noncePrefix = `d${randomBytes(6).toString('base64url')}-`;
  private nonceCounter = 0;
  private drainWaiters: Array<() => void> = [];
  /**
   * Names of clusters sent (added or changed) whose ClusterLoadAssignment was not sent since:
   * EDS sends them even if unchanged as soon as its subscription covers them, also when EDS is
   * requested only after CDS (a reconnecting client whose `initial_resource_versions` say it
   * already holds them).
   */
  private readonly warm = new Set<string>();

  /** Starts serving `call`: the first request authenticates the proxy. */
  constructor(
    readonly streamId: number,
    private readonly call: DeltaAdsCall,
    private readonly ctx: DeltaStreamContext,
  ) {
    this.log = ctx.logger.child({ streamId, mode: 'delta' });
    call.on('data', (req: DeltaDiscoveryRequest__Output) => this.onRequest(req));
    call.on('drain', () => this.wakeDrainWaiters());
    call.on('end', () => {
      if (!this.closed) call.end();
      this.close('client closed the stream');
    });
    call.on('cancelled', () => this.close('cancelled'));
    call.on('error', (err: unknown) => this.close(`error: ${errorMessage(err)}`));
    call.on('close', () => this.close('closed'));
  }

  /** {@inheritDoc ServedStream.info} */
  info(): StreamInfo | undefined {
    if (!this.proxy) return undefined;
    const types: TypeStreamInfo[] = [];
    for (const typeUrl of PUSH_ORDER) {
      const st = this.types.get(typeUrl);
      if (!st) continue;
      types.push({
        typeUrl,
        type: TYPE_SHORT_NAME[typeUrl],
        wildcard: st.wildcard,
        resourceNames: [...st.names].sort(),
        lastVersionSent: st.lastVersionSent,
        lastNonceSent: st.lastNonceSent,
        versionAcked: st.versionAcked,
        lastNack: st.lastNack,
      });
    }
    return {
      streamId: this.streamId,
      proxy: this.proxy,
      connectedAt: this.connectedAt,
      listener: this.ctx.listener,
      mode: 'delta',
      types,
    };
  }

  /** {@inheritDoc ServedStream.fail} */
  fail(code: grpc.status, details: string): void {
    if (this.closed) return;
    this.log.info({ code: grpc.status[code], details }, 'ending delta ADS stream');
    this.call.emit('error', { code, details });
    this.close(details);
  }

  private onRequest(req: DeltaDiscoveryRequest__Output): void {
    if (this.closed) return;
    if (!this.started) {
      this.started = true;
      this.enqueue(() => this.open(req));
    }
    this.enqueue(() => this.handleRequest(req));
  }

  private onSnapshot(snapshot: ProxySnapshot): void {
    if (this.closed) return;
    // Coalesce: only the latest snapshot matters, and one push runs at a time.
    this.pendingSnapshot = { snapshot, receivedAt: process.hrtime.bigint() };
    if (this.pushQueued) return;
    this.pushQueued = true;
    this.enqueue(() => this.push());
  }

  private enqueue(job: () => Promise<void>): void {
    this.jobs.push(job);
    if (!this.running) void this.runJobs();
  }

  private async runJobs(): Promise<void> {
    this.running = true;
    try {
      while (this.jobs.length > 0 && !this.closed) {
        const job = this.jobs.shift()!;
        try {
          await job();
        } catch (err) {
          this.log.error({ err }, 'delta ADS stream job failed');
          this.fail(grpc.status.INTERNAL, `internal error: ${errorMessage(err)}`);
        }
      }
    } finally {
      this.running = false;
    }
  }

  /** Authenticates the proxy from the first request, watches its snapshot, runs onStreamOpen. */
  private async open(first: DeltaDiscoveryRequest__Output): Promise<void> {
    let proxy: Proxy;
    try {
      proxy = await this.ctx.authenticate(this.call, first);
    } catch (err) {
      this.fail(grpc.status.UNAUTHENTICATED, `authentication failed: ${errorMessage(err)}`);
      return;
    }
    if (this.closed) return;
    this.proxy = proxy;
    this.connectedAt = new Date();
    this.log = this.log.child({ proxy: proxy.uuid, identity: proxy.identity });
    // Watch before onStreamOpen, which typically sets the first snapshot.
    this.cancelWatch = this.ctx.watcher.watch(proxy.uuid, (s) => this.onSnapshot(s));
    this.opened = true;
    this.ctx.register(this);
    this.ctx.metrics.connectedProxies.inc();
    this.log.info({ peer: this.call.getPeer() }, 'delta ADS stream opened');
    try {
      await this.ctx.hooks.onStreamOpen?.(proxy, this.streamId, first.node);
    } catch (err) {
      this.log.error({ err }, 'onStreamOpen failed');
      this.fail(grpc.status.UNAVAILABLE, `stream setup failed: ${errorMessage(err)}`);
      return;
    }
    if (this.closed) return;
    this.snapshot = this.pendingSnapshot?.snapshot ?? this.ctx.watcher.getSnapshot(proxy.uuid);
  }

  private async handleRequest(req: DeltaDiscoveryRequest__Output): Promise<void> {
    if (!this.proxy) return;
    const typeUrl = req.type_url ?? '';
    if (!KNOWN_TYPES.has(typeUrl)) {
      // Nothing to serve (e.g. RTDS, or resource locators only): ignore, keep the other types.
      this.log.warn({ typeUrl }, 'delta request for an unknown type URL ignored');
      return;
    }
    const type = typeUrl as TypeUrl;
    let st = this.types.get(type);
    const first = st === undefined;
    if (!st) {
      st = newTypeState();
      this.types.set(type, st);
    }
    const nonce = req.response_nonce ?? '';
    if (nonce !== '') this.ackOrNack(type, st, nonce, req);
    // Subscription changes count whatever the nonce: unlike SotW, a delta request carries only
    // changes, so ignoring an "old" one would lose them for good.
    this.applySubscription(type, st, req, first);
    await this.sync();
  }

  /** Records the ACK or NACK of the response with `nonce`, if it is one still waiting for it. */
  private ackOrNack(type: TypeUrl, st: DeltaTypeState, nonce: string, req: DeltaDiscoveryRequest__Output): void {
    const short = TYPE_SHORT_NAME[type];
    const version = st.outstanding.get(nonce);
    if (version === undefined) {
      // Not a response of this stream waiting for an answer (another stream's or process's
      // nonce, or one already superseded by a later ACK): nothing to record.
      this.log.debug({ type: short, nonce }, 'unknown or already answered nonce: no ACK/NACK recorded');
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
      const detail: NackDetail = { code: req.error_detail.code ?? 0, message: req.error_detail.message ?? '' };
      st.lastNack = { version, code: detail.code, message: detail.message, at: new Date() };
      this.ctx.metrics.nacks.inc({ type: short });
      this.log.warn({ type: short, version, error: detail.message }, 'NACK');
      this.callHook('onNack', () => this.ctx.hooks.onNack?.(this.proxy!, type, version, detail));
    } else {
      st.versionAcked = version;
      this.log.debug({ type: short, version }, 'ACK');
      this.callHook('onAck', () => this.ctx.hooks.onAck?.(this.proxy!, type, version));
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
    if (first && subscribe.length === 0 && wildcardType) st.wildcard = true; // legacy wildcard
    for (const name of subscribe) {
      if (name === '*') {
        if (!wildcardType) continue; // only LDS and CDS are served as wildcard
        // `*` on a running stream is a subscribe like any other: answer every resource again.
        if (!first) st.resendAll = true;
        st.wildcard = true;
        continue;
      }
      st.names.add(name);
      st.pending.add(name);
    }
    for (const name of unsubscribe) {
      if (name === '*') {
        if (!st.wildcard) continue;
        st.wildcard = false;
        st.resendAll = false;
        // The client drops what it had only through the wildcard.
        for (const held of [...st.known.keys()]) if (!st.names.has(held)) st.known.delete(held);
        continue;
      }
      st.names.delete(name);
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

  /** Sends the latest snapshot's changes (the push of a new snapshot). */
  private async push(): Promise<void> {
    this.pushQueued = false;
    const pending = this.pendingSnapshot;
    this.pendingSnapshot = undefined;
    if (!pending || !this.proxy) return;
    this.snapshot = pending.snapshot;
    const sent = await this.sync();
    if (sent) this.ctx.metrics.pushDuration.observe(Number(process.hrtime.bigint() - pending.receivedAt) / 1e9);
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
    const nonce = `${this.noncePrefix}${++this.nonceCounter}`;
    const response: DeltaDiscoveryResponse = {
      system_version_info: version,
      type_url: type,
      nonce,
      resources: updates.map((r) => ({ name: r.name, version: r.version, resource: r.resource })),
      removed_resources: [...removals],
    };
    for (const r of updates) st.known.set(r.name, r.version);
    for (const name of removals) st.known.delete(name);
    st.lastNonceSent = nonce;
    st.lastVersionSent = version;
    st.outstanding.set(nonce, version);
    if (st.outstanding.size > MAX_OUTSTANDING_NONCES) st.outstanding.delete(st.outstanding.keys().next().value!);

    const short = TYPE_SHORT_NAME[type];
    let bytes = 0;
    for (const r of updates) bytes += r.resource.value.length;
    this.ctx.metrics.responses.inc({ type: short });
    this.ctx.metrics.responseBytes.inc({ type: short }, bytes);
    if (bytes > LARGE_RESPONSE_BYTES) {
      this.log.warn({ type: short, proxy: this.proxy?.uuid, bytes, resources: updates.length }, 'large delta xDS response');
    }
    this.log.debug({ type: short, version, nonce, resources: updates.length, removed: removals.length, bytes }, 'delta response sent');
    const flushed = this.call.write(response);
    if (!flushed) await this.waitForDrain();
    return true;
  }

  private waitForDrain(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  private wakeDrainWaiters(): void {
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }

  private callHook(name: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log.error({ err, hook: name }, 'ADS hook failed');
    }
  }

  /** Cleans up once, whatever ended the stream; calls onStreamClose if onStreamOpen was called. */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.jobs.length = 0;
    this.wakeDrainWaiters();
    this.cancelWatch?.();
    this.cancelWatch = undefined;
    this.ctx.unregister(this);
    if (!this.opened || !this.proxy) {
      this.log.debug({ reason }, 'delta ADS stream ended before authentication');
      return;
    }
    this.ctx.metrics.connectedProxies.dec();
    this.log.info({ reason }, 'delta ADS stream closed');
    const proxy = this.proxy;
    this.callHook('onStreamClose', () => this.ctx.hooks.onStreamClose?.(proxy, this.streamId));
  }
}

function newTypeState(): DeltaTypeState {
  return {
    wildcard: false,
    names: new Set(),
    known: new Map(),
    pending: new Set(),
    resendAll: false,
    needsAnswer: false,
    outstanding: new Map(),
  };
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
  if (st.wildcard) for (const r of resources.values()) consider(r);
  else {
    for (const name of st.names) {
      const r = resources.get(name);
      if (r) consider(r);
    }
  }
  const removals: string[] = [];
  for (const name of st.known.keys()) if (!resources.has(name)) removals.push(name);
  for (const name of st.pending) if (!resources.has(name) && !st.known.has(name)) removals.push(name);
  return { type, st, updates, removals, force: st.needsAnswer && st.wildcard };
}
