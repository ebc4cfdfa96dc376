import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { X509Certificate } from '@peculiar/x509';
import { pino, type Logger } from 'pino';
import { Registry } from 'prom-client';
import { PROTO_LOADER_OPTIONS } from '../../api/codec.js';
import { PUSH_ORDER, TYPE_SHORT_NAME, TypeUrl } from '../../api/type-urls.js';
import { parseCommonName, type Proxy } from '../../proxy/types.js';
import type { DeltaDiscoveryRequest__Output, DiscoveryRequest__Output, DiscoveryResponse } from './discovery-types.js';
import { DeltaStream } from './delta-stream.js';
import {
  KNOWN_TYPES,
  LARGE_RESPONSE_BYTES,
  createMetrics,
  errorMessage,
  isCompleteSetType,
  type AdsCall,
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

// The public types of the server live in stream-common.ts (shared with the delta stream).
export type {
  AdsCall,
  AdsHooks,
  Authenticate,
  DeltaAdsCall,
  NackDetail,
  NackInfo,
  StreamInfo,
  StreamMode,
  TypeStreamInfo,
} from './stream-common.js';
export { LARGE_RESPONSE_BYTES } from './stream-common.js';
import type { SnapshotWatcher } from '../cache/snapshot-cache.js';
import { typeVersion } from '../cache/snapshot-cache.js';
import type { CachedResource, ProxySnapshot, ResourceMap } from '../cache/types.js';

/** Largest request message the server accepts, in bytes (gRPC's default of 4 MiB is too small for big meshes). */
export const MAX_RECEIVE_MESSAGE_LENGTH = 64 * 1024 * 1024;

/** Fully-qualified name of the ADS service (Envoy `envoy/service/discovery/v3/ads.proto`). */
export const ADS_SERVICE_NAME = 'envoy.service.discovery.v3.AggregatedDiscoveryService';

/** Options of {@link AdsServer}. */
export interface AdsServerOptions {
  /** Where the proxies' snapshots come from. */
  readonly watcher: SnapshotWatcher;
  /** Callbacks on stream open/close and ACK/NACK. */
  readonly hooks?: AdsHooks;
  /** Default: a silent logger. */
  readonly logger?: Logger;
  /** Registry the `trellis_xds_*` metrics are registered in. Default: a private registry. */
  readonly metrics?: Registry;
}

/** One listening address of the server, with how its streams are authenticated. */
export interface ListenOptions {
  /** `host:port`; port 0 picks a free port (see the return value of {@link AdsServer.start}). */
  readonly address: string;
  readonly credentials: grpc.ServerCredentials;
  /** {@link authenticateFromPeerCertificate} for mTLS listeners, {@link authenticateFromNodeId} for plaintext ones. */
  readonly authenticate: Authenticate;
}

/**
 * mTLS authentication: the proxy is the CommonName of its verified client certificate
 * (`<uuid>.<kind>.<sa>.<ns>.cluster.local`, as OSM does), never what it says in `node`.
 * The listener's credentials must verify client certificates
 * (`grpc.ServerCredentials.createSsl(ca, keyCertPairs, true)`), this only reads the result.
 * @throws Error when the stream has no peer certificate, the certificate has no CN, or the CN
 *   is not a proxy CommonName ({@link parseCommonName}).
 */
export function authenticateFromPeerCertificate(
  call: AdsCall | DeltaAdsCall,
  _firstRequest?: DiscoveryRequest__Output | DeltaDiscoveryRequest__Output,
): Proxy {
  const raw = call.getAuthContext()?.sslPeerCertificate?.raw;
  if (!raw || raw.length === 0) throw new Error('no client certificate on the stream (mTLS required)');
  const cert = new X509Certificate(raw);
  const cn = cert.subjectName.getField('CN')[0];
  if (!cn) throw new Error(`client certificate "${cert.subject}" has no CommonName`);
  return parseCommonName(cn);
}

/**
 * Plaintext authentication, for development and tests: the proxy is what the first request's
 * `node.id` says (a proxy CommonName). Anyone who can reach the port can claim any identity,
 * so use it only on a listener that is not reachable from workloads.
 * @throws Error when `node.id` is missing or is not a proxy CommonName.
 */
export function authenticateFromNodeId(
  _call: AdsCall | DeltaAdsCall,
  firstRequest: DiscoveryRequest__Output | DeltaDiscoveryRequest__Output,
): Proxy {
  const id = firstRequest.node?.id;
  if (!id) throw new Error('first request has no node.id');
  return parseCommonName(id);
}

let serviceDefinition: grpc.ServiceDefinition | undefined;

/** Loads (once) the ADS service definition with proto-loader, field names kept in snake_case. */
function adsServiceDefinition(): grpc.ServiceDefinition {
  if (serviceDefinition) return serviceDefinition;
  const def = protoLoader.loadSync('envoy/service/discovery/v3/ads.proto', {
    ...PROTO_LOADER_OPTIONS,
    includeDirs: [...PROTO_LOADER_OPTIONS.includeDirs],
  });
  // proto-loader serializes a `google.protobuf.Any` given as `{type_url, value: Buffer}` as is,
  // so pre-encoded resources go on the wire without being decoded and encoded again.
  serviceDefinition = def[ADS_SERVICE_NAME] as grpc.ServiceDefinition;
  return serviceDefinition;
}

const EMPTY: ResourceMap = new Map();

/** Per stream, per type: the subscription and what was sent, acked and nacked. */
interface TypeState {
  wildcard: boolean;
  names: Set<string>;
  /** Version of each resource the client was last sent (and, as far as we know, holds): per-resource state, since clients apply the valid part of a response they NACK. */
  sent: Map<string, string>;
  /** A first request not answered yet (e.g. it came before the proxy had a snapshot). */
  needsAnswer: boolean;
  lastNonceSent?: string;
  lastVersionSent?: string;
  versionAcked?: string;
  lastNack?: NackInfo;
}

/** Context the server gives each stream. */
interface StreamContext {
  readonly watcher: SnapshotWatcher;
  readonly hooks: AdsHooks;
  readonly metrics: AdsMetrics;
  readonly logger: Logger;
  readonly listener: string;
  readonly authenticate: Authenticate;
  register(stream: AdsStream): void;
  unregister(stream: AdsStream): void;
}

/** One SotW ADS stream: its state machine, run one job at a time. */
class AdsStream {
  proxy?: Proxy;
  connectedAt = new Date();
  private readonly types = new Map<TypeUrl, TypeState>();
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
  /** Random per stream, so a nonce from another stream or an earlier controller process is recognised as unknown. */
  private readonly noncePrefix = `${randomBytes(6).toString('base64url')}-`;
  private nonceCounter = 0;
  private drainWaiters: Array<() => void> = [];

  constructor(
    readonly streamId: number,
    private readonly call: AdsCall,
    private readonly ctx: StreamContext,
  ) {
    this.log = ctx.logger.child({ streamId });
    call.on('data', (req: DiscoveryRequest__Output) => this.onRequest(req));
    call.on('drain', () => this.wakeDrainWaiters());
    // The client half-closed: finish our side with OK.
    call.on('end', () => {
      if (!this.closed) call.end();
      this.close('client closed the stream');
    });
    call.on('cancelled', () => this.close('cancelled'));
    call.on('error', (err: unknown) => this.close(`error: ${errorMessage(err)}`));
    call.on('close', () => this.close('closed'));
  }

  /** Debug view of the stream; `undefined` before it is authenticated. */
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
    return { streamId: this.streamId, proxy: this.proxy, connectedAt: this.connectedAt, listener: this.ctx.listener, mode: 'sotw', types };
  }

  /** Ends the stream with a status (the client sees it as the call's error). */
  fail(code: grpc.status, details: string): void {
    if (this.closed) return;
    this.log.info({ code: grpc.status[code], details }, 'ending ADS stream');
    // ServerDuplexStream turns an 'error' event into the call's final status.
    this.call.emit('error', { code, details });
    this.close(details);
  }

  private onRequest(req: DiscoveryRequest__Output): void {
    if (this.closed) return;
    if (!this.started) {
      this.started = true;
      this.enqueue(() => this.open(req));
    }
    this.enqueue(() => this.handleRequest(req));
  }

  private onSnapshot(snapshot: ProxySnapshot): void {
    if (this.closed) return;
    // Coalesce: only the latest snapshot matters; one push job at a time per stream, so two
    // pushes never interleave on the wire (make-before-break order holds within each push).
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
          this.log.error({ err }, 'ADS stream job failed');
          this.fail(grpc.status.INTERNAL, `internal error: ${errorMessage(err)}`);
        }
      }
    } finally {
      this.running = false;
    }
  }

  /** Authenticates the proxy from the first request, starts watching its snapshot and runs onStreamOpen. */
  private async open(first: DiscoveryRequest__Output): Promise<void> {
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
    // Watch before onStreamOpen, which typically sets the first snapshot: that set must not be missed.
    this.cancelWatch = this.ctx.watcher.watch(proxy.uuid, (s) => this.onSnapshot(s));
    this.opened = true;
    this.ctx.register(this);
    this.ctx.metrics.connectedProxies.inc();
    this.log.info({ peer: this.call.getPeer() }, 'ADS stream opened');
    try {
      await this.ctx.hooks.onStreamOpen?.(proxy, this.streamId, first.node);
    } catch (err) {
      this.log.error({ err }, 'onStreamOpen failed');
      this.fail(grpc.status.UNAVAILABLE, `stream setup failed: ${errorMessage(err)}`);
      return;
    }
    if (this.closed) return;
    // The push job queued by a set during onStreamOpen finds the same snapshot and sends only what is still due.
    this.snapshot = this.pendingSnapshot?.snapshot ?? this.ctx.watcher.getSnapshot(proxy.uuid);
  }

  private isOwnNonce(nonce: string): boolean {
    if (!nonce.startsWith(this.noncePrefix)) return false;
    const n = Number(nonce.slice(this.noncePrefix.length));
    return Number.isInteger(n) && n >= 1 && n <= this.nonceCounter;
  }

  private async handleRequest(req: DiscoveryRequest__Output): Promise<void> {
    if (!this.proxy) return;
    const typeUrl = req.type_url ?? '';
    if (!KNOWN_TYPES.has(typeUrl)) {
      // Unknown type URL: nothing to serve. Ignore rather than end the stream, so a client
      // asking for an optional type (e.g. RTDS, ECDS) keeps its other subscriptions.
      this.log.warn({ typeUrl }, 'request for an unknown type URL ignored');
      return;
    }
    const type = typeUrl as TypeUrl;
    const names = req.resource_names ?? [];
    const nonce = req.response_nonce ?? '';
    const existing = this.types.get(type);

    if (nonce !== '' && this.isOwnNonce(nonce)) {
      if (!existing || nonce !== existing.lastNonceSent) {
        // Stale: the client answers a response we have since superseded. xds_protocol
        // "Resource updates": the server should not respond to a request with a stale nonce.
        // Its subscription and ACK/NACK are about old data; the ACK of the newer response
        // carries the client's current subscription, so nothing is lost by ignoring it.
        this.log.debug({ type: TYPE_SHORT_NAME[type], nonce }, 'stale nonce ignored');
        return;
      }
      if (req.error_detail) {
        // NACK (xds_protocol "ACK and NACK semantics summary"): the client keeps its last good
        // config (gRPC clients also apply the valid part of this response). Record it, but do
        // not resend the same thing, which would loop ("When to send an update"): the
        // per-resource `sent` state stays as sent, so only a changed snapshot sends again.
        const detail: NackDetail = { code: req.error_detail.code ?? 0, message: req.error_detail.message ?? '' };
        const version = existing.lastVersionSent ?? '';
        existing.lastNack = { version, code: detail.code, message: detail.message, at: new Date() };
        this.ctx.metrics.nacks.inc({ type: TYPE_SHORT_NAME[type] });
        this.log.warn({ type: TYPE_SHORT_NAME[type], version, error: detail.message }, 'NACK');
        this.callHook('onNack', () => this.ctx.hooks.onNack?.(this.proxy!, type, version, detail));
      } else {
        // ACK of the latest response.
        existing.versionAcked = req.version_info ?? '';
        this.log.debug({ type: TYPE_SHORT_NAME[type], version: existing.versionAcked }, 'ACK');
        this.callHook('onAck', () => this.ctx.hooks.onAck?.(this.proxy!, type, existing.versionAcked!));
      }
      // The request also carries the (possibly changed) subscription: answer newly added names.
      // LDS/CDS answer a newly added name even when it does not exist: the complete set without
      // it tells the client so (gRPC clients request listeners and clusters by name; C-core
      // takes a name missing from a response as not existing, instead of waiting for its 15 s
      // does-not-exist timer; xds_protocol "Knowing When a Requested Resource Does Not Exist").
      const added = names.some((n) => n !== '*' && !existing.names.has(n));
      this.updateSubscription(type, existing, names, false);
      await this.answer(type, added && isCompleteSetType(type));
      return;
    }

    // Empty nonce: a first request for the type. A non-empty nonce this stream never sent is
    // not stale but a proxy reconnecting (e.g. after a controller restart) with state from an
    // earlier stream: treat it as a first request too, or the proxy would wait forever.
    const st = existing ?? this.newTypeState();
    this.types.set(type, st);
    this.updateSubscription(type, st, names, true);
    st.needsAnswer = true;
    await this.answer(type, true);
  }

  private newTypeState(): TypeState {
    return { wildcard: false, names: new Set(), sent: new Map(), needsAnswer: false };
  }

  /**
   * Applies a request's `resource_names` (in SotW, the complete subscription each time).
   * Wildcard (LDS/CDS only): `*` among the names, or no names on the first request, or no
   * names while already wildcard (legacy wildcard, xds_protocol "How the client specifies what
   * resources to return").
   */
  private updateSubscription(type: TypeUrl, st: TypeState, names: readonly string[], first: boolean): void {
    const explicit = new Set(names.filter((n) => n !== '*'));
    const completeSet = isCompleteSetType(type);
    let wildcard: boolean;
    if (names.includes('*')) wildcard = completeSet;
    else if (explicit.size === 0) wildcard = completeSet && (first || st.wildcard);
    else wildcard = false;
    if (!wildcard) {
      // A client drops the resources it unsubscribes from; forget we sent them, so subscribing
      // again sends them again even if unchanged (xds_protocol "How the client specifies what
      // resources to return": the server must resend any newly requested resources).
      for (const name of [...st.sent.keys()]) if (!explicit.has(name)) st.sent.delete(name);
    }
    st.wildcard = wildcard;
    st.names = explicit;
  }

  /** Answers a request for `type` (and EDS after CDS); without a snapshot, remembers to answer when it arrives. */
  private async answer(type: TypeUrl, force: boolean): Promise<void> {
    if (!this.snapshot) return; // `needsAnswer` stays set: the push of the first snapshot answers.
    const sent = await this.sendIfNeeded(type, force);
    // Envoy keeps an added or updated cluster warming until it gets its ClusterLoadAssignment
    // (xds_protocol "Resource warming"): whenever CDS goes out, EDS follows, even if unchanged.
    if (sent && type === TypeUrl.Cluster) await this.sendIfNeeded(TypeUrl.ClusterLoadAssignment, true);
  }

  /** Sends the latest snapshot's changes, type by type in make-before-break order. */
  private async push(): Promise<void> {
    this.pushQueued = false;
    const pending = this.pendingSnapshot;
    this.pendingSnapshot = undefined;
    if (!pending || !this.proxy) return;
    this.snapshot = pending.snapshot;
    let cdsSent = false;
    let anySent = false;
    // xds_protocol "Eventual consistency considerations": CDS, EDS, LDS, RDS, SDS, so nothing
    // refers to a resource the proxy doesn't have yet. No waiting for ACKs between types: Envoy
    // pauses the dependent types itself while it warms clusters and listeners.
    for (const type of PUSH_ORDER) {
      if (this.closed) return;
      const st = this.types.get(type);
      if (!st) continue;
      const force = st.needsAnswer || (type === TypeUrl.ClusterLoadAssignment && cdsSent);
      const sent = await this.sendIfNeeded(type, force);
      if (sent && type === TypeUrl.Cluster) cdsSent = true;
      anySent ||= sent;
    }
    if (anySent) {
      this.ctx.metrics.pushDuration.observe(Number(process.hrtime.bigint() - pending.receivedAt) / 1e9);
    }
  }

  /** The resources of `type` the stream should have, from the current snapshot. */
  private select(type: TypeUrl, st: TypeState): ResourceMap {
    const all = this.snapshot?.resources.get(type) ?? EMPTY;
    if (st.wildcard) return all;
    const out = new Map<string, CachedResource>();
    for (const name of st.names) {
      const r = all.get(name);
      if (r) out.set(name, r);
    }
    return out;
  }

  /**
   * Sends `type` when what the stream should have differs from what it was sent, or when
   * `force`d. RDS/EDS/SDS are per name: names that don't exist yet are left out (and sent when
   * they appear, as they then differ from `sent`: xds_protocol "Knowing When a Requested
   * Resource Does Not Exist"), and nothing is sent while none exists. LDS and CDS are the
   * complete set ("Grouping Resources into Responses"): a forced answer goes out even when
   * empty, and a removed resource is a change (its absence is its deletion, "Deleting Resources").
   * @returns whether a response was written.
   */
  private async sendIfNeeded(type: TypeUrl, force: boolean): Promise<boolean> {
    const st = this.types.get(type);
    if (!st || !this.snapshot || this.closed) return false;
    const selected = this.select(type, st);
    const completeSet = isCompleteSetType(type);
    const due = force ? completeSet || selected.size > 0 : differs(st.sent, selected, completeSet);
    if (!due) return false;

    const version =
      st.wildcard && this.snapshot.versions.get(type) !== undefined
        ? this.snapshot.versions.get(type)!
        : typeVersion(selected.values());
    const nonce = `${this.noncePrefix}${++this.nonceCounter}`;
    const resources = [...selected.values()].map((r) => r.resource);
    const response: DiscoveryResponse = { version_info: version, resources, type_url: type, nonce };
    st.lastNonceSent = nonce;
    st.lastVersionSent = version;
    st.sent = new Map([...selected.values()].map((r) => [r.name, r.version]));
    st.needsAnswer = false;

    const short = TYPE_SHORT_NAME[type];
    let bytes = 0;
    for (const r of resources) bytes += r.value.length;
    this.ctx.metrics.responses.inc({ type: short });
    this.ctx.metrics.responseBytes.inc({ type: short }, bytes);
    if (bytes > LARGE_RESPONSE_BYTES) {
      this.log.warn({ type: short, proxy: this.proxy?.uuid, bytes, resources: resources.length }, 'large xDS response');
    }
    this.log.debug({ type: short, version, nonce, resources: resources.length, bytes }, 'response sent');
    const flushed = this.call.write(response);
    // Respect backpressure: wait for the stream to drain before writing more.
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
      this.log.debug({ reason }, 'ADS stream ended before authentication');
      return;
    }
    this.ctx.metrics.connectedProxies.dec();
    this.log.info({ reason }, 'ADS stream closed');
    const proxy = this.proxy;
    this.callHook('onStreamClose', () => this.ctx.hooks.onStreamClose?.(proxy, this.streamId));
  }
}

/** Whether `selected` differs from what was `sent` (version by name; for complete sets, also removals). */
function differs(sent: ReadonlyMap<string, string>, selected: ResourceMap, completeSet: boolean): boolean {
  for (const [name, r] of selected) if (sent.get(name) !== r.version) return true;
  // Every selected name is in `sent` with its version; a size difference means `sent` holds a
  // resource the snapshot no longer has, which for LDS/CDS must be sent as its deletion.
  return completeSet && sent.size !== selected.size;
}

/**
 * The ADS server: gRPC `envoy.service.discovery.v3.AggregatedDiscoveryService`.
 * `StreamAggregatedResources` serves state-of-the-world xDS (Envoy `xds_protocol`) from the
 * snapshots of a {@link SnapshotWatcher}; `DeltaAggregatedResources` serves incremental xDS
 * from the same snapshots on the same listeners ({@link DeltaStream}). Knows nothing about the
 * mesh. A response over {@link LARGE_RESPONSE_BYTES} is logged as a warning. Metrics: `trellis_xds_connected_proxies`,
 * `trellis_xds_responses_total{type}`, `trellis_xds_nacks_total{type}`,
 * `trellis_xds_push_duration_seconds`, `trellis_xds_response_bytes_total{type}`.
 */
export class AdsServer {
  private readonly servers: grpc.Server[] = [];
  private readonly active = new Map<number, ServedStream>();
  private readonly pendingStreams = new Set<ServedStream>();
  private nextStreamId = 1;
  private readonly logger: Logger;
  private readonly metrics: AdsMetrics;
  private readonly hooks: AdsHooks;

  /** @throws Error when the metrics are already registered in `options.metrics`. */
  constructor(private readonly options: AdsServerOptions) {
    this.logger = options.logger ?? pino({ level: 'silent' });
    this.metrics = createMetrics(options.metrics ?? new Registry());
    this.hooks = options.hooks ?? {};
  }

  /**
   * Starts listening on one address. Can be called several times (e.g. mTLS on :15128 and an
   * optional plaintext port); each listener has its own gRPC server and authenticate function.
   * Receive limit: {@link MAX_RECEIVE_MESSAGE_LENGTH}.
   * @returns the bound port (useful with port 0).
   * @throws Error when the address cannot be bound.
   */
  async start(listen: ListenOptions): Promise<number> {
    const server = new grpc.Server({ 'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_LENGTH });
    const implementation: grpc.UntypedServiceImplementation = {
      StreamAggregatedResources: (call: AdsCall) => this.handleStream(call, listen),
      DeltaAggregatedResources: (call: DeltaAdsCall) => this.handleDeltaStream(call, listen),
    };
    server.addService(adsServiceDefinition(), implementation);
    const port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(listen.address, listen.credentials, (err, p) => (err ? reject(err) : resolve(p)));
    });
    this.servers.push(server);
    this.logger.info({ address: listen.address, port }, 'ADS server listening');
    return port;
  }

  /**
   * Stops every listener: no new streams; open streams end with `UNAVAILABLE` so proxies
   * reconnect (to another replica); after `timeoutMs` milliseconds, remaining connections are
   * closed by force. Every open stream gets its onStreamClose.
   */
  async stop(timeoutMs = 5000): Promise<void> {
    const servers = this.servers.splice(0);
    const shutdowns = servers.map(
      (server) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            server.forceShutdown();
            resolve();
          }, timeoutMs);
          timer.unref();
          server.tryShutdown(() => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    for (const stream of [...this.active.values(), ...this.pendingStreams]) {
      stream.fail(grpc.status.UNAVAILABLE, 'ADS server shutting down');
    }
    await Promise.all(shutdowns);
  }

  /** The authenticated streams, for the debug API. */
  streams(): StreamInfo[] {
    const out: StreamInfo[] = [];
    for (const s of this.active.values()) {
      const info = s.info();
      if (info) out.push(info);
    }
    return out;
  }

  /** Serves one `DeltaAggregatedResources` call (incremental xDS, see {@link DeltaStream}). */
  private handleDeltaStream(call: DeltaAdsCall, listen: ListenOptions): void {
    const stream = new DeltaStream(this.nextStreamId++, call, {
      watcher: this.options.watcher,
      hooks: this.hooks,
      metrics: this.metrics,
      logger: this.logger,
      listener: listen.address,
      authenticate: listen.authenticate,
      register: (s) => {
        this.pendingStreams.delete(s);
        this.active.set(s.streamId, s);
      },
      unregister: (s) => {
        this.pendingStreams.delete(s);
        this.active.delete(s.streamId);
      },
    });
    this.pendingStreams.add(stream);
  }

  private handleStream(call: AdsCall, listen: ListenOptions): void {
    const streamId = this.nextStreamId++;
    const stream: AdsStream = new AdsStream(streamId, call, {
      watcher: this.options.watcher,
      hooks: this.hooks,
      metrics: this.metrics,
      logger: this.logger,
      listener: listen.address,
      authenticate: listen.authenticate,
      register: (s) => {
        this.pendingStreams.delete(s);
        this.active.set(s.streamId, s);
      },
      unregister: (s) => {
        this.pendingStreams.delete(s);
        this.active.delete(s.streamId);
      },
    });
    this.pendingStreams.add(stream);
  }
}
