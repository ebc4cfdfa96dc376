/**
 * What the state-of-the-world stream (`ads-server.ts`) and the incremental stream
 * (`delta-stream.ts`) share: the public types of the ADS server (hooks, authentication, the
 * debug view of a stream), its metrics, a few small helpers, and {@link StreamBase}, the stream
 * plumbing both protocols run on. Kept apart so that the two stream implementations and the
 * server import it without importing each other in a circle.
 */
import { randomBytes } from 'node:crypto';
import http2 from 'node:http2';
import type { PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { PUSH_ORDER, TYPE_SHORT_NAME, TypeUrl } from '../../api/type-urls.js';
import { ProxyRefusedError } from '../../proxy/refusal.js';
import type { Proxy } from '../../proxy/types.js';
import type { SnapshotWatcher } from '../cache/snapshot-cache.js';
import type { ProxySnapshot } from '../cache/types.js';
import { boundedText } from '../../util/bounded-text.js';
import { lowerBound } from '../../util/order.js';
import { RateLimiter } from '../../util/rate-limit.js';
import { HeldSnapshotCheck, type HeldReferences } from './held-references.js';
import type { Release, SendBudget } from './send-budget.js';
import type {
  DeltaDiscoveryRequest__Output,
  DeltaDiscoveryResponse,
  DiscoveryRequest__Output,
  DiscoveryResponse,
} from './discovery-types.js';

/** A server-side `StreamAggregatedResources` call (state of the world). */
export type AdsCall = grpc.ServerDuplexStream<DiscoveryRequest__Output, DiscoveryResponse>;

/** A server-side `DeltaAggregatedResources` call (incremental xDS). */
export type DeltaAdsCall = grpc.ServerDuplexStream<DeltaDiscoveryRequest__Output, DeltaDiscoveryResponse>;

/**
 * Finds out which proxy is on a stream. Called once per stream, with the stream's first
 * request (the only one that carries `node`, Envoy `xds_protocol`, "Basic protocol overview"),
 * for both state-of-the-world and incremental (delta) streams: the call is an {@link AdsCall}
 * or a {@link DeltaAdsCall} and the request a `DiscoveryRequest` or a `DeltaDiscoveryRequest`;
 * both carry `node` and the call's auth context. May be async. Throwing (or rejecting) ends
 * the stream with `UNAUTHENTICATED` and the error's message as status details.
 */
export type Authenticate = (
  call: AdsCall | DeltaAdsCall,
  firstRequest: DiscoveryRequest__Output | DeltaDiscoveryRequest__Output,
  /** The call's TLS peer certificate when the server read it already (`call.getAuthContext()`'s, which decodes it again at each call). */
  peerCertificate?: PeerCertificate,
) => Proxy | Promise<Proxy>;

/** The `error_detail` of a NACK (a `google.rpc.Status`): gRPC status code and message. */
export interface NackDetail {
  readonly code: number;
  readonly message: string;
}

/**
 * What the ADS server tells its owner (the controller), for SotW and delta streams alike.
 * Every hook is optional. Errors thrown by `onStreamClose`, `onAck` and `onNack` are logged
 * and otherwise ignored.
 */
export interface AdsHooks {
  /**
   * A stream's first request arrived and its proxy is authenticated. The server awaits the
   * returned promise before answering any request of the stream, so this is where the
   * controller registers the proxy and sets its first snapshot. Rejecting with a
   * `ProxyRefusedError` refuses the proxy (`PERMISSION_DENIED`, counted and logged as a refusal);
   * rejecting otherwise ends the stream with `UNAVAILABLE`; either way `onStreamClose` is still called. `node` is the first request's
   * `node` (Envoy `config.core.v3.Node`, the same in SotW and delta requests), from which the
   * owner tells a proxyless gRPC client from a sidecar (`user_agent_name`, `client_features`);
   * the identity is `proxy`'s.
   */
  onStreamOpen?(proxy: Proxy, streamId: number, node?: DiscoveryRequest__Output['node']): void | Promise<void>;
  /**
   * The stream ended (client half-close, cancel, error, server stop): called exactly once per
   * stream whose onStreamOpen was called, possibly while that onStreamOpen is still pending
   * (the client went away during it).
   */
  onStreamClose?(proxy: Proxy, streamId: number): void;
  /**
   * The proxy accepted a response of `typeUrl`; `versionInfo` is the version it now runs
   * (SotW: the response's `version_info`; delta: its `system_version_info`).
   */
  onAck?(proxy: Proxy, typeUrl: TypeUrl, versionInfo: string): void;
  /**
   * The proxy rejected a response of `typeUrl`.
   * @param versionInfo the version that was rejected (the one sent with the NACKed nonce; in
   *   SotW the request's own `version_info` is the last version the proxy accepted).
   */
  onNack?(proxy: Proxy, typeUrl: TypeUrl, versionInfo: string, errorDetail: NackDetail): void;
  /**
   * The stream's {@link StreamSync} changed: its proxy ACKed every type of a newer snapshot, or
   * NACKed a response (see {@link ServedStream.syncState}).
   */
  onSyncChanged?(proxy: Proxy, streamId: number): void;
}

/** A NACK as {@link StreamSync} keeps it: the type, the snapshot the rejected response was made from, and the proxy's error. */
export interface StreamRejection {
  readonly typeUrl: TypeUrl;
  /** `CDS`, `EDS`, … */
  readonly type: string;
  /** The snapshot the rejected response was made from; undefined when not known (a delta NACK of a response older than the type's last). */
  readonly snapshot: ProxySnapshot | undefined;
  readonly code: number;
  /** `error_detail.message`, cut as in {@link NackInfo}. */
  readonly message: string;
  readonly at: Date;
}

/**
 * What a stream's proxy holds of the snapshots it was served, for the policy status: the newest
 * snapshot it holds entirely, and its newest NACK.
 */
export interface StreamSync {
  readonly streamId: number;
  readonly proxy: Proxy;
  /**
   * The newest snapshot of which the proxy ACKed everything it subscribed to: LDS and CDS are
   * subscribed when the snapshot has any, so is every resource of it the subscribed Listeners and
   * Clusters name (`heldReferences`), every response written for it was ACKed (none NACKed
   * since that type's last ACK), nothing of it is left to send and no request is waiting to be
   * handled. Undefined until then.
   */
  readonly acked: ProxySnapshot | undefined;
  /** Its newest NACK, or undefined. */
  readonly rejected: StreamRejection | undefined;
}

/** The last NACK of a type on a stream, for the debug API. */
export interface NackInfo {
  /** The version that was rejected. */
  readonly version: string;
  readonly code: number;
  readonly message: string;
  readonly at: Date;
}

/** Per-type state of a stream, for the debug API. */
export interface TypeStreamInfo {
  readonly typeUrl: TypeUrl;
  /** `CDS`, `EDS`, … */
  readonly type: string;
  /** Whether the stream subscribed to every resource of the type (LDS/CDS only). */
  readonly wildcard: boolean;
  /** Names subscribed explicitly, sorted: the first {@link MAX_DEBUG_NAMES_PER_TYPE} of them. */
  readonly resourceNames: readonly string[];
  /** How many names are subscribed explicitly (all of them, also those not in `resourceNames`). */
  readonly resourceNameCount: number;
  readonly lastVersionSent?: string;
  readonly lastNonceSent?: string;
  readonly versionAcked?: string;
  readonly lastNack?: NackInfo;
}

/** Which ADS variant a stream speaks: `StreamAggregatedResources` or `DeltaAggregatedResources`. */
export type StreamMode = 'sotw' | 'delta';

/** One connected, authenticated stream, for the debug API. */
export interface StreamInfo {
  readonly streamId: number;
  readonly proxy: Proxy;
  readonly connectedAt: Date;
  /** Listening address the stream came in on. */
  readonly listener: string;
  /** State of the world or incremental. */
  readonly mode: StreamMode;
  /** Types the stream has requested, in {@link PUSH_ORDER}. */
  readonly types: readonly TypeStreamInfo[];
}

/** What the server keeps of any stream (SotW or delta): its id, proxy, debug view and a way to end it. */
export interface ServedStream {
  readonly streamId: number;
  /** The authenticated proxy; `undefined` before authentication. */
  readonly proxy?: Proxy;
  /** Debug view of the stream; `undefined` before it is authenticated. */
  info(): StreamInfo | undefined;
  /** What the proxy holds of its snapshots (cheap: no copy); `undefined` before it is authenticated. */
  syncState(): StreamSync | undefined;
  /** Ends the stream with a status (the client sees it as the call's error). */
  fail(code: grpc.status, details: string): void;
  /** The client's address (`call.getPeer()`). */
  readonly peer: string;
  /** The address of the listener the stream came in on. */
  readonly listener: string;
  /** A complete request arrived on the stream. */
  readonly requestReceived: boolean;
  /** The TLS peer certificate of the call, given to `authenticate` (set by the server when it read it on accepting the stream). */
  peerCertificate?: PeerCertificate;
}

/**
 * Why a stream ended, the `reason` of `trellis_xds_streams_closed_total`: `unread` (the server
 * closed it because the proxy left a response unread past the unread timeout), `server` (the
 * server ended it otherwise: authentication or setup failed, too many names, an internal error,
 * shutdown), `client` (the client half-closed or cancelled it, or its connection ended).
 */
export type CloseCause = 'unread' | 'server' | 'client';

const CLOSE_CAUSES: readonly CloseCause[] = ['unread', 'server', 'client'];

/** The `trellis_xds_*` metrics, shared by every stream of a server. */
export interface AdsMetrics {
  readonly connectedProxies: Gauge;
  readonly responses: Counter<'type'>;
  readonly requests: Counter<'type'>;
  readonly nacks: Counter<'type'>;
  readonly pushDuration: Histogram;
  readonly responseBytes: Counter<'type'>;
  readonly streamsClosed: Counter<'reason'>;
}

/**
 * Creates the `trellis_xds_*` metrics in `registry`.
 * @throws Error when they are already registered there.
 */
export function createMetrics(registry: Registry): AdsMetrics {
  const metrics: AdsMetrics = {
    connectedProxies: new Gauge({
      name: 'trellis_xds_connected_proxies',
      help: 'ADS streams open with an authenticated proxy',
      registers: [registry],
    }),
    responses: new Counter({
      name: 'trellis_xds_responses_total',
      help: 'DiscoveryResponses sent, by xDS type',
      labelNames: ['type'],
      registers: [registry],
    }),
    requests: new Counter({
      name: 'trellis_xds_requests_total',
      help: 'DiscoveryRequests received (SotW and delta), by xDS type; requests of unknown types are not counted',
      labelNames: ['type'],
      registers: [registry],
    }),
    nacks: new Counter({
      name: 'trellis_xds_nacks_total',
      help: 'DiscoveryRequests with error_detail (NACKs) received, by xDS type',
      labelNames: ['type'],
      registers: [registry],
    }),
    pushDuration: new Histogram({
      name: 'trellis_xds_push_duration_seconds',
      help: 'Time from a new proxy snapshot to the last response of its push written to the stream',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    responseBytes: new Counter({
      name: 'trellis_xds_response_bytes_total',
      help: 'Bytes of encoded resources sent in DiscoveryResponses, by xDS type',
      labelNames: ['type'],
      registers: [registry],
    }),
    streamsClosed: new Counter({
      name: 'trellis_xds_streams_closed_total',
      help: 'ADS streams ended, by reason: unread (closed by the server: a response left unread past the unread timeout), server, client',
      labelNames: ['reason'],
      registers: [registry],
    }),
  };
  // Every type's series exists from the start (at 0), so a query or an alert finds it before the first event.
  for (const type of PUSH_ORDER) for (const counter of [metrics.responses, metrics.requests, metrics.nacks, metrics.responseBytes]) counter.inc({ type: TYPE_SHORT_NAME[type] }, 0);
  for (const reason of CLOSE_CAUSES) metrics.streamsClosed.inc({ reason }, 0);
  return metrics;
}

/** The type URLs the server serves, as a set (requests for other types are ignored). */
export const KNOWN_TYPES: ReadonlySet<string> = new Set(PUSH_ORDER);

/** LDS and CDS: the only types with wildcard subscriptions (and, in SotW, whose responses are the complete set). */
export function isCompleteSetType(typeUrl: TypeUrl): boolean {
  return typeUrl === TypeUrl.Listener || typeUrl === TypeUrl.Cluster;
}

/**
 * A response whose encoded resources exceed this many bytes (4 MiB, gRPC's default receive
 * limit, which many xDS clients keep) is logged as a warning with its type, proxy and size.
 */
export const LARGE_RESPONSE_BYTES = 4 * 1024 * 1024;

/**
 * Default of the unread timeout, in ms: a stream whose response stays unflushed this long (the
 * proxy stopped reading) is closed (`--xds-unread-timeout`).
 */
export const DEFAULT_UNREAD_TIMEOUT_MS = 30_000;

/**
 * Most names a stream may subscribe to explicitly per type (a SotW request's `resource_names`,
 * a delta stream's subscription). A stream asking for more ends with `RESOURCE_EXHAUSTED`.
 */
export const MAX_RESOURCE_NAMES_PER_TYPE = 100_000;

/**
 * Longest resource name a stream may use, in characters (a name in a SotW request's
 * `resource_names`, a delta request's `resource_names_subscribe`/`_unsubscribe` or
 * `initial_resource_versions`). Our names are short (`<ns>/<svc>|<port>`,
 * `root-cert-for-mtls-inbound:<ns>/<sa>` with DNS-1123 names of at most 253 characters); a request with a
 * longer name ends the stream with `INVALID_ARGUMENT`.
 */
export const MAX_RESOURCE_NAME_CHARS = 1024;

/**
 * Most characters of names a stream may subscribe to explicitly, all types together (4 Mi,
 * about 4 MiB of names): with {@link MAX_RESOURCE_NAMES_PER_TYPE}, what bounds a stream's
 * memory. A stream asking for more ends with `RESOURCE_EXHAUSTED`.
 */
export const MAX_SUBSCRIBED_NAME_CHARS = 4 * 1024 * 1024;

/** What one subscribed name costs a {@link SubscribedNamesBudget} beside its characters (the set entry and string header). */
export const SUBSCRIBED_NAME_OVERHEAD = 32;
/** Default {@link SubscribedNamesBudget} of a server: 256 Mi units (about 0.5 GiB of heap). */
export const DEFAULT_MAX_SUBSCRIBED_NAMES_COST = 256 * 1024 * 1024;

/**
 * The names all streams of a server subscribe to, together: each costs its characters plus
 * {@link SUBSCRIBED_NAME_OVERHEAD}. Bounds the heap the subscriptions take whatever the number
 * of streams (each is bounded by {@link MAX_SUBSCRIBED_NAME_CHARS} alone).
 */
export class SubscribedNamesBudget {
  /** Cost in use, by every stream. */
  used = 0;
  /** @param max the most cost all streams may hold (a positive number). */
  constructor(readonly max: number) {}
}

/** The debug view of a stream lists at most this many names per type (the first, sorted), with their count. */
export const MAX_DEBUG_NAMES_PER_TYPE = 100;

/** A NACK's `error_detail.message` is kept (logged, in `/debug/proxies`, given to `onNack`) up to this many characters. */
export const MAX_NACK_MESSAGE_CHARS = 4096;

/**
 * The server logs at most one NACK line per proxy identity and type per this many ms, whatever
 * its streams and UUIDs; the next line counts the NACKs not logged (`notLogged`).
 */
export const NACK_LOG_INTERVAL_MS = 60_000;

/** The server logs at most this many NACK lines per {@link NACK_LOG_INTERVAL_MS}, all identities together. */
export const NACK_LOG_LIMIT = 60;

/**
 * The server logs each lifecycle line of streams (`ADS stream opened`, `ending ADS stream`, `ADS
 * stream closed`) at info level at most this many times per proxy identity per
 * {@link STREAM_LOG_WINDOW_MS}; beyond, at debug level (a reconnect loop logs a bounded amount).
 */
export const STREAM_LOG_LIMIT = 10;

/** The window of {@link STREAM_LOG_LIMIT}, in ms. */
export const STREAM_LOG_WINDOW_MS = 60_000;

/**
 * The server logs each kind of warning about what a client did (a name too long, too many names,
 * an unknown type URL, a response left unread) at most this many times per proxy identity (or
 * client address, before authentication) per {@link STREAM_LOG_WINDOW_MS}, and
 * {@link CLIENT_WARNING_TOTAL_LIMIT} times in all; beyond, at debug level, the next line counting
 * the ones it left out (`notLogged`). A client reconnecting in a loop cannot flood the log.
 */
export const CLIENT_WARNING_LIMIT = 5;

/** See {@link CLIENT_WARNING_LIMIT}: per {@link STREAM_LOG_WINDOW_MS}, all clients together. */
export const CLIENT_WARNING_TOTAL_LIMIT = 60;

/** Identities (or identity and type pairs) the log limits of a server remember at most. */
const LOG_LIMIT_KEYS = 10_000;

/** A type's subscription as the stream's own helpers change it (the only writers, so that changes are counted). */
function writable(st: TypeStateBase): { wildcard: boolean; names: Set<string> } {
  return st as unknown as { wildcard: boolean; names: Set<string> };
}

/**
 * `message` cut to {@link MAX_NACK_MESSAGE_CHARS} characters and made safe to log
 * ({@link boundedText}).
 */
export function truncateNackMessage(message: string): string {
  return boundedText(message, MAX_NACK_MESSAGE_CHARS);
}

/**
 * The log limits of a server, shared by all its streams (so that a proxy reconnecting in a loop,
 * with the same UUID or new ones, does not log more): NACK lines, per identity and type and in
 * all, and the lifecycle lines of streams, per identity. Each remembers at most 10 000 keys.
 */
export class StreamLogLimits {
  /** One NACK line per identity and type per {@link NACK_LOG_INTERVAL_MS} (monotonic clock). */
  readonly nack = new RateLimiter(1, NACK_LOG_INTERVAL_MS, () => performance.now(), LOG_LIMIT_KEYS);
  /** {@link NACK_LOG_LIMIT} NACK lines per {@link NACK_LOG_INTERVAL_MS} in all. */
  readonly nackTotal = new RateLimiter(NACK_LOG_LIMIT, NACK_LOG_INTERVAL_MS, () => performance.now(), 1);
  /** {@link CLIENT_WARNING_LIMIT} warnings of each kind per client per {@link STREAM_LOG_WINDOW_MS}. */
  readonly clientWarning = new RateLimiter(CLIENT_WARNING_LIMIT, STREAM_LOG_WINDOW_MS, () => performance.now(), LOG_LIMIT_KEYS);
  /** {@link CLIENT_WARNING_TOTAL_LIMIT} such warnings per {@link STREAM_LOG_WINDOW_MS} in all. */
  readonly clientWarningTotal = new RateLimiter(CLIENT_WARNING_TOTAL_LIMIT, STREAM_LOG_WINDOW_MS, () => performance.now(), 1);
  /** {@link STREAM_LOG_LIMIT} lifecycle lines of each kind per identity per {@link STREAM_LOG_WINDOW_MS} at info level. */
  readonly lifecycle = new RateLimiter(STREAM_LOG_LIMIT, STREAM_LOG_WINDOW_MS, () => performance.now(), LOG_LIMIT_KEYS);

  /**
   * Takes one NACK line of `identity` and `type`.
   * @returns undefined when it is not to be logged; else how many of that identity and type
   *   were not logged since its last line.
   */
  takeNack(identity: string, type: string): number | undefined {
    return takeWithinBoth(this.nack, this.nackTotal, `${identity}\n${type}`);
  }

  /**
   * Takes one warning line of `kind` about the client `client` (its identity, or its address).
   * @returns undefined when it is to be logged at debug level only; else how many of that client
   *   and kind were not logged since its last line.
   */
  takeClientWarning(client: string, kind: string): number | undefined {
    return takeWithinBoth(this.clientWarning, this.clientWarningTotal, `${client}\n${kind}`);
  }

  /** Whether the lifecycle line `kind` of a stream of `identity` is logged at info level (else at debug). */
  takeLifecycle(identity: string, kind: 'opened' | 'ending' | 'closed'): boolean {
    return this.lifecycle.take(`${identity}\n${kind}`) !== undefined;
  }
}

/**
 * Takes one event of `key` from `perKey`, then (only if it was allowed) one from `total`.
 * @returns undefined when either refuses it; else how many of `key` `perKey` suppressed since its last allowed one.
 */
function takeWithinBoth(perKey: RateLimiter, total: RateLimiter, key: string): number | undefined {
  const notLogged = perKey.take(key);
  if (notLogged === undefined || total.take('') === undefined) return undefined;
  return notLogged;
}

/** The address of a gRPC peer (`ipv4:1.2.3.4:5678`, `[::1]:5678`, `1.2.3.4:5678`) without its port. */
function peerHost(peer: string): string {
  const colon = peer.lastIndexOf(':');
  return colon > 0 && /^\d+$/.test(peer.slice(colon + 1)) ? peer.slice(0, colon) : peer;
}

/** The message of an error, a gRPC status-like object, or anything else. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === 'object' && 'details' in err) return String((err as { details: unknown }).details);
  return String(err);
}

/** What the server gives each stream (SotW or delta). */
export interface StreamContext {
  /** Where the proxy's snapshots come from. */
  readonly watcher: SnapshotWatcher;
  readonly hooks: AdsHooks;
  readonly metrics: AdsMetrics;
  readonly logger: Logger;
  /** Listening address the stream came in on (debug API). */
  readonly listener: string;
  readonly authenticate: Authenticate;
  /** Bytes of responses in flight, shared by every stream of the server. */
  readonly sendBudget: SendBudget;
  /** Names subscribed by every stream of the server, together. */
  readonly subscribedNames: SubscribedNamesBudget;
  /** A stream whose response stays unflushed this long (ms) is closed; 0: never. */
  readonly unreadTimeoutMs: number;
  /** The server's log limits (NACK and lifecycle lines), shared by every stream. */
  readonly logLimits: StreamLogLimits;
  /** What the Listeners and Clusters of the streams' snapshots make their clients fetch, shared by every stream. */
  readonly heldReferences: HeldReferences;
  /**
   * The stream is authenticated as `stream.proxy`: admits it (synchronously, so that no other
   * stream of the same UUID is admitted meanwhile) and lists it in the server's streams.
   * @returns why it is refused (another identity holds its UUID), or undefined when admitted.
   */
  admit(stream: ServedStream): string | undefined;
  /** A stream was refused (authentication, admission or the owner's `ProxyRefusedError`): count and log it. */
  refused(refusal: StreamRefusal): void;
  /** The stream ended: forget it. */
  unregister(stream: ServedStream): void;
}

/** A refused stream, as told to {@link StreamContext.refused}. */
export interface StreamRefusal {
  /** The metric label (`unauthenticated`, `uuid_conflict`, or the owner's `ProxyRefusedError` reason). */
  readonly reason: string;
  /** The status details the client is sent. */
  readonly details: string;
  /** The client's address (`call.getPeer()`). */
  readonly peer: string;
  /** The proxy, when it was authenticated before being refused. */
  readonly proxy?: Proxy;
  readonly streamId: number;
}

/** What every per-type state of a stream keeps, SotW or delta (and shows in the debug API). */
export interface TypeStateBase {
  /** Subscribed to every resource of the type (LDS/CDS only). Set through the stream's `setWildcard`. */
  readonly wildcard: boolean;
  /** Names subscribed explicitly (never `*`). Changed through the stream's `addName`, `deleteName` and `setNames`. */
  readonly names: ReadonlySet<string>;
  lastNonceSent?: string;
  lastVersionSent?: string;
  versionAcked?: string;
  lastNack?: NackInfo;
  /** The snapshot the type's last response was made from. */
  sentFrom?: ProxySnapshot;
  /** The type's last response waits for its ACK or NACK (SotW; delta streams count their outstanding nonces). */
  unanswered?: boolean;
  /** The type's last answer was a NACK. */
  rejected?: boolean;
}

/** What a response logs at debug level besides its type and size. */
export interface ResponseLog {
  readonly version: string;
  readonly nonce: string;
  /** How many resources it carries. */
  readonly resources: number;
  /** Delta only: how many names it removes. */
  readonly removed?: number;
}

/**
 * The plumbing of one ADS stream, whatever its protocol: requests and snapshot pushes run one
 * job at a time, in order; the first request authenticates the proxy and opens the stream
 * (watch, register, onStreamOpen); writes respect backpressure; close cleans up once, whatever
 * ended the stream. The protocol (state of the world in `ads-server.ts`, incremental in
 * `delta-stream.ts`) is in the subclass: {@link handleRequest} for each request of a known
 * type, {@link pushSnapshot} for each new snapshot.
 * @typeParam Req the request message, @typeParam Res the response message,
 *   @typeParam S the per-type state.
 */
export abstract class StreamBase<
  Req extends DiscoveryRequest__Output | DeltaDiscoveryRequest__Output,
  Res,
  S extends TypeStateBase,
> implements ServedStream {
  /** The authenticated proxy; `undefined` until the first request is authenticated. */
  proxy?: Proxy;
  /** When the stream was authenticated (until then, when it was accepted). */
  connectedAt = new Date();
  /** Per type requested: the subscription and what was sent, acked and nacked. */
  protected readonly types = new Map<TypeUrl, S>();
  /** The snapshot the stream serves; `undefined` until the proxy has one. */
  protected snapshot?: ProxySnapshot;
  /** Whether the stream ended (set only by {@link close}): nothing more is written. */
  protected closed = false;
  protected log: Logger;
  private pendingSnapshot?: { snapshot: ProxySnapshot; receivedAt: bigint };
  private pushQueued = false;
  private readonly jobs: Array<() => Promise<void>> = [];
  /**
   * Per type, the request whose job is queued and not started yet: a newer request of the type
   * is merged into it ({@link mergeRequests}) unless it takes no merges, so the queue holds at
   * most two requests per type however fast the client sends.
   */
  private readonly queuedRequests = new Map<TypeUrl, { req: Req; readonly mergeable: boolean }>();
  /** Unknown type URLs already logged (the first {@link MAX_LOGGED_UNKNOWN_TYPES}, cut to 200 characters). */
  private readonly unknownTypesLogged = new Set<string>();
  /** NACKs of this stream the server's log limits kept out of the log (told in the close line). */
  private nacksNotLogged = 0;
  /** Characters of the names subscribed explicitly, all types together (at most {@link MAX_SUBSCRIBED_NAME_CHARS}). */
  private nameChars = 0;
  /** Names subscribed explicitly, all types together. */
  private nameCount = 0;
  /** Closes the stream if the response in flight is not flushed within the unread timeout. */
  private unreadTimer?: NodeJS.Timeout;
  private running = false;
  private started = false;
  private opened = false;
  private cancelWatch?: () => void;
  /**
   * Random per stream, so a nonce from another stream or an earlier controller process is
   * recognised as unknown (never taken for ours); delta nonces start with `d`.
   */
  private readonly noncePrefix: string;
  private nonceCounter = 0;
  /** Writes waiting for the call's buffer to drain. */
  private readonly drainWaiters: Array<() => void> = [];
  /** Writes waiting for this stream's previous response to be flushed. */
  private readonly flushWaiters: Array<() => void> = [];
  /** The send-budget grant of the response written and not flushed yet, if any (given back on close). */
  private unflushed: Release | undefined;
  /** `delta ` in the log messages of delta streams, nothing in SotW ones. */
  private readonly logPrefix: string;
  /** {@link StreamSync.acked}. */
  private acked?: ProxySnapshot;
  /** Counts the changes that end what {@link heldCheck} carries from one check to the next: a subscription narrowed, or one to Listeners or Clusters changed. */
  private subscriptionEpoch = 0;
  /** Whether the proxy holds the references of a snapshot's Listeners and Clusters, checked against the last snapshot it held. */
  private readonly heldCheck: HeldSnapshotCheck;
  /** {@link StreamSync.rejected}. */
  private rejected?: StreamRejection;

  /** The client's address (`call.getPeer()`). */
  get peer(): string {
    return this.call.getPeer();
  }

  /** The address of the listener the stream came in on. */
  get listener(): string {
    return this.ctx.listener;
  }

  /** The TLS peer certificate of the call, when the server read it on accepting the stream. */
  peerCertificate?: PeerCertificate;

  /** A complete request arrived on the stream (its first one is being handled or was). */
  get requestReceived(): boolean {
    return this.started;
  }

  /** Starts serving `call`: the first request authenticates the proxy. */
  constructor(
    readonly streamId: number,
    private readonly call: grpc.ServerDuplexStream<Req, Res>,
    protected readonly ctx: StreamContext,
    private readonly mode: StreamMode,
  ) {
    this.logPrefix = mode === 'delta' ? 'delta ' : '';
    this.noncePrefix = `${mode === 'delta' ? 'd' : ''}${randomBytes(6).toString('base64url')}-`;
    this.log = ctx.logger.child(mode === 'delta' ? { streamId, mode } : { streamId });
    this.heldCheck = new HeldSnapshotCheck(ctx.heldReferences);
    call.on('data', (req: Req) => {
      // Nothing a request does may escape to the process: a throw ends this stream only.
      try {
        this.onRequest(req);
      } catch (err) {
        this.log.error({ err }, `${this.logPrefix}ADS request handling failed`);
        this.fail(grpc.status.INTERNAL, `internal error: ${errorMessage(err)}`);
      }
    });
    call.on('drain', () => wakeAll(this.drainWaiters));
    // The client half-closed: finish our side with OK.
    call.on('end', () => {
      if (!this.closed) call.end();
      this.close('client closed the stream');
    });
    call.on('cancelled', () => this.close('cancelled'));
    call.on('error', (err: unknown) => this.close(`error: ${errorMessage(err)}`));
    call.on('close', () => this.close('closed'));
  }

  /**
   * Answers one request of a known type (authenticated stream), in the stream's job order.
   * @param type the request's `type_url`, one of {@link KNOWN_TYPES}.
   */
  protected abstract handleRequest(type: TypeUrl, req: Req): Promise<void>;

  /**
   * Sends what the new {@link snapshot} changes (the push of a new snapshot).
   * @returns whether any response was written (only such a push is timed in the metrics).
   */
  protected abstract pushSnapshot(): Promise<boolean>;

  /**
   * The one request that has the effect of `older` then `newer` (two requests of the same type,
   * `older` queued and not handled yet). May end the stream (e.g. too many names).
   */
  protected abstract mergeRequests(older: Req, newer: Req): Req;

  /**
   * What a request of a known type does as it arrives, before it is queued: returns the request
   * to queue and whether later requests of its type may be merged into it, or `undefined` to
   * queue nothing. Default: all of it, mergeable.
   */
  protected arrive(_type: TypeUrl, req: Req): { req: Req; mergeable: boolean } | undefined {
    return { req, mergeable: true };
  }

  /**
   * Ends the stream with `RESOURCE_EXHAUSTED` when `count` names of `type` are more than
   * {@link MAX_RESOURCE_NAMES_PER_TYPE}. @returns whether it did.
   */
  protected endIfTooManyNames(type: TypeUrl, count: number): boolean {
    if (count <= MAX_RESOURCE_NAMES_PER_TYPE) return false;
    this.warnClient('too-many-names', { type: TYPE_SHORT_NAME[type], names: count, max: MAX_RESOURCE_NAMES_PER_TYPE }, `${this.logPrefix}ADS stream subscribes to too many names`);
    this.fail(grpc.status.RESOURCE_EXHAUSTED, `more than ${MAX_RESOURCE_NAMES_PER_TYPE} resource names of ${TYPE_SHORT_NAME[type]}`);
    return true;
  }

  /**
   * Checks the names of a request as it arrives: each at most {@link MAX_RESOURCE_NAME_CHARS}
   * long (else the stream ends with `INVALID_ARGUMENT`), at most
   * {@link MAX_RESOURCE_NAMES_PER_TYPE} of them, and, when they are to be subscribed
   * (`subscribed`), at most {@link MAX_SUBSCRIBED_NAME_CHARS} characters in all (else
   * `RESOURCE_EXHAUSTED`). @returns whether it ended the stream.
   */
  protected endIfBadNames(type: TypeUrl, names: Iterable<string>, subscribed: boolean): boolean {
    let count = 0;
    let chars = 0;
    for (const name of names) {
      count++;
      chars += name.length;
      if (name.length > MAX_RESOURCE_NAME_CHARS) {
        this.warnClient('name-too-long', { type: TYPE_SHORT_NAME[type], chars: name.length, max: MAX_RESOURCE_NAME_CHARS }, `${this.logPrefix}ADS stream asks for a resource name too long`);
        this.fail(grpc.status.INVALID_ARGUMENT, `a resource name of ${TYPE_SHORT_NAME[type]} is ${name.length} characters long, more than ${MAX_RESOURCE_NAME_CHARS}`);
        return true;
      }
    }
    if (this.endIfTooManyNames(type, count)) return true;
    return subscribed && this.endIfNameCharsOver(type, chars);
  }

  /**
   * Ends the stream with `RESOURCE_EXHAUSTED` when `chars` characters of names are more than
   * {@link MAX_SUBSCRIBED_NAME_CHARS}, or the names of all the server's streams are over its
   * {@link SubscribedNamesBudget}. @returns whether it did.
   */
  protected endIfNameCharsOver(type: TypeUrl, chars: number = this.nameChars): boolean {
    const budget = this.ctx.subscribedNames;
    if (budget.used > budget.max) {
      this.warnClient('names-budget', { type: TYPE_SHORT_NAME[type], used: budget.used, max: budget.max }, `${this.logPrefix}ADS stream ended: the server's budget of subscribed names is spent`);
      this.fail(grpc.status.RESOURCE_EXHAUSTED, 'the server holds as many subscribed resource names as it may (all streams together)');
      return true;
    }
    if (chars <= MAX_SUBSCRIBED_NAME_CHARS) return false;
    this.warnClient('too-many-name-chars', { type: TYPE_SHORT_NAME[type], chars, max: MAX_SUBSCRIBED_NAME_CHARS }, `${this.logPrefix}ADS stream subscribes to too many characters of names`);
    this.fail(grpc.status.RESOURCE_EXHAUSTED, `more than ${MAX_SUBSCRIBED_NAME_CHARS} characters of resource names subscribed`);
    return true;
  }

  /** Adds `name` to the names `st` subscribes to explicitly, counting its characters. */
  protected addName(st: S, name: string): void {
    if (st.names.has(name)) return;
    writable(st).names.add(name);
    this.countNames(1, name.length);
    if (this.holdsNamed(st)) this.subscriptionEpoch++;
  }

  /** Whether `st` is the stream's Listener or Cluster state, whose subscription says which resources' references must be held. */
  private holdsNamed(st: S): boolean {
    return st === this.types.get(TypeUrl.Listener) || st === this.types.get(TypeUrl.Cluster);
  }

  /** Sets whether `st` subscribes to every resource of its type. */
  protected setWildcard(st: S, wildcard: boolean): void {
    if (st.wildcard === wildcard) return;
    writable(st).wildcard = wildcard;
    this.subscriptionEpoch++;
  }

  /** Counts `count` names of `chars` characters more (negative: fewer) in this stream and in the server's budget. */
  private countNames(count: number, chars: number): void {
    this.nameChars += chars;
    this.nameCount += count;
    this.ctx.subscribedNames.used += chars + count * SUBSCRIBED_NAME_OVERHEAD;
  }

  /** Removes `name` from the names `st` subscribes to explicitly. */
  protected deleteName(st: S, name: string): void {
    if (!writable(st).names.delete(name)) return;
    this.countNames(-1, -name.length);
    this.subscriptionEpoch++;
  }

  /** Replaces the names `st` subscribes to explicitly by `names`. */
  protected setNames(st: S, names: Set<string>): void {
    let chars = 0;
    let narrowed = this.holdsNamed(st);
    for (const name of names) chars += name.length;
    for (const name of st.names) {
      chars -= name.length;
      if (!names.has(name)) narrowed = true;
    }
    this.countNames(names.size - st.names.size, chars);
    writable(st).names = names;
    if (narrowed) this.subscriptionEpoch++;
  }

  /** Whether the lifecycle line `kind` of this stream goes to the log at info level (the server's per-identity limit), else at debug. */
  private lifecycleLevel(kind: 'opened' | 'ending' | 'closed'): 'info' | 'debug' {
    return this.proxy === undefined || this.ctx.logLimits.takeLifecycle(this.proxy.identity, kind) ? 'info' : 'debug';
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
        resourceNames: firstSorted(st.names, MAX_DEBUG_NAMES_PER_TYPE),
        resourceNameCount: st.names.size,
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
      mode: this.mode,
      types,
    };
  }

  /** {@inheritDoc ServedStream.syncState} */
  syncState(): StreamSync | undefined {
    if (!this.proxy) return undefined;
    return { streamId: this.streamId, proxy: this.proxy, acked: this.acked, rejected: this.rejected };
  }

  /** Whether a response of `st`'s type waits for its ACK or NACK (default: SotW's one response of the type). */
  protected awaitsAnswer(st: S): boolean {
    return st.unanswered === true;
  }

  /**
   * After a job, with no other job waiting: when the proxy now holds everything the current
   * snapshot has for it (see {@link StreamSync.acked}), that snapshot is its acked one.
   */
  private noteSync(): void {
    const snapshot = this.snapshot;
    if (!snapshot || this.acked === snapshot || this.pendingSnapshot || this.closed || !this.proxy) return;
    // LDS and CDS, which every client asks for, and every type answered.
    for (const type of [TypeUrl.Listener, TypeUrl.Cluster]) if ((snapshot.resources.get(type)?.size ?? 0) > 0 && !this.types.has(type)) return;
    for (const st of this.types.values()) if (st.rejected || this.awaitsAnswer(st)) return;
    // And what the Listeners and Clusters it holds make it fetch (their route configurations,
    // ClusterLoadAssignments and secrets, as an Envoy warms them): subscribed, so answered above.
    // A resource no held one names (a secret nothing uses) need not be asked for.
    if (!this.heldCheck.holds(snapshot, this.types, this.subscriptionEpoch)) return;
    this.acked = snapshot;
    const proxy = this.proxy;
    this.callHook('onSyncChanged', () => this.ctx.hooks.onSyncChanged?.(proxy, this.streamId));
  }

  /** {@inheritDoc ServedStream.fail} */
  fail(code: grpc.status, details: string): void {
    if (this.closed) return;
    this.log[this.lifecycleLevel('ending')]({ code: grpc.status[code], details }, `ending ${this.logPrefix}ADS stream`);
    this.end(code, details, 'server');
  }

  /** Ends the stream as refused; the server counts and logs it (rate-limited), the stream does not. */
  private refuse(code: grpc.status, reason: string, details: string): void {
    if (this.closed) return;
    this.ctx.refused({ reason, details, peer: this.call.getPeer(), proxy: this.proxy, streamId: this.streamId });
    this.end(code, details, 'server');
  }

  /**
   * Ends the stream with a status, counted as `cause`. When a response is still unflushed, the
   * status could only follow it: the HTTP/2 stream is reset instead, dropping both.
   */
  private end(code: grpc.status, details: string, cause: CloseCause): void {
    if (this.closed) return;
    const stuck = this.unflushed !== undefined;
    // Closed first, so the 'error' listener below does not count it as the client's doing.
    this.close(details, cause);
    // ServerDuplexStream turns an 'error' event into the call's final status.
    this.call.emit('error', { code, details });
    if (stuck) resetHttp2Stream(this.call);
  }

  /** A fresh nonce for the next response. */
  protected nextNonce(): string {
    return `${this.noncePrefix}${++this.nonceCounter}`;
  }

  /** Whether `nonce` is one this stream sent. */
  protected isOwnNonce(nonce: string): boolean {
    if (!nonce.startsWith(this.noncePrefix)) return false;
    const n = Number(nonce.slice(this.noncePrefix.length));
    return Number.isInteger(n) && n >= 1 && n <= this.nonceCounter;
  }

  /** Records an ACK of `type` at `version`: debug view, log, onAck hook. */
  protected recordAck(type: TypeUrl, st: S, version: string): void {
    st.versionAcked = version;
    st.unanswered = false;
    st.rejected = false;
    // Needed only to tell what a NACK of a response still unanswered rejected: keep no old snapshot alive.
    if (!this.awaitsAnswer(st)) st.sentFrom = undefined;
    this.log.debug({ type: TYPE_SHORT_NAME[type], version }, 'ACK');
    this.callHook('onAck', () => this.ctx.hooks.onAck?.(this.proxy!, type, version));
  }

  /**
   * Records a NACK of the response of `type` at `version`: debug view, metric, log, onNack hook
   * (the message was cut to {@link MAX_NACK_MESSAGE_CHARS} as the request arrived). The log
   * has at most one line per proxy identity and type per {@link NACK_LOG_INTERVAL_MS}, server-wide
   * ({@link StreamLogLimits}), which counts the NACKs not logged before it (`notLogged`).
   */
  protected recordNack(type: TypeUrl, st: S, version: string, error: { code?: number; message?: string }): void {
    const short = TYPE_SHORT_NAME[type];
    const detail: NackDetail = { code: error.code ?? 0, message: error.message ?? '' };
    st.lastNack = { version, code: detail.code, message: detail.message, at: new Date() };
    st.unanswered = false;
    st.rejected = true;
    this.rejected = {
      typeUrl: type,
      type: short,
      snapshot: version === st.lastVersionSent ? st.sentFrom : undefined,
      code: detail.code,
      message: detail.message,
      at: st.lastNack.at,
    };
    this.ctx.metrics.nacks.inc({ type: short });
    const notLogged = this.ctx.logLimits.takeNack(this.proxy!.identity, short);
    if (notLogged !== undefined) this.log.warn({ type: short, version, error: detail.message, ...(notLogged ? { notLogged } : {}) }, 'NACK');
    else this.nacksNotLogged++;
    this.callHook('onNack', () => this.ctx.hooks.onNack?.(this.proxy!, type, version, detail));
    const proxy = this.proxy!;
    this.callHook('onSyncChanged', () => this.ctx.hooks.onSyncChanged?.(proxy, this.streamId));
  }

  /**
   * Writes a response of `type` whose resources are `bytes` long, and counts and logs it (a
   * warning first when it is over {@link LARGE_RESPONSE_BYTES}). Backpressure: it first waits
   * until this stream's previous response is flushed and the server's send budget has room, and
   * after writing waits for the stream to drain when its buffer is full.
   */
  protected async write(type: TypeUrl, response: Res, bytes: number, what: ResponseLog): Promise<void> {
    const short = TYPE_SHORT_NAME[type];
    const st = this.types.get(type);
    if (st) {
      st.sentFrom = this.snapshot;
      st.unanswered = true;
    }
    if (bytes > LARGE_RESPONSE_BYTES) {
      this.log.warn({ type: short, proxy: this.proxy?.uuid, bytes, resources: what.resources }, `large ${this.logPrefix}xDS response`);
    }
    // One response in flight per stream: the next waits until the previous one is flushed, so a
    // proxy that stopped reading holds one response's share of the budget, not one per type.
    while (this.unflushed && !this.closed) await new Promise<void>((resolve) => this.flushWaiters.push(resolve));
    // The server-wide budget of bytes in flight: a push to every proxy does not hold every
    // proxy's serialized response in memory at once.
    // Evictable unless the server never closes a stream for leaving its response unread.
    const release = await this.ctx.sendBudget.acquire(bytes, this.ctx.unreadTimeoutMs > 0 ? () => this.closeEvicted(short, bytes) : undefined);
    if (this.closed) {
      release();
      return;
    }
    this.unflushed = release;
    this.ctx.metrics.responses.inc({ type: short });
    this.ctx.metrics.responseBytes.inc({ type: short }, bytes);
    this.log.debug({ type: short, ...what, bytes }, `${this.logPrefix}response sent`);
    if (this.ctx.unreadTimeoutMs > 0) {
      this.unreadTimer = setTimeout(() => this.closeUnread(short, bytes), this.ctx.unreadTimeoutMs);
      this.unreadTimer.unref();
    }
    const flushed = this.call.write(response, () => {
      if (this.unflushed === release) {
        this.unflushed = undefined;
        clearTimeout(this.unreadTimer);
      }
      release();
      wakeAll(this.flushWaiters);
    });
    if (!flushed) await this.waitForDrain();
  }

  /** Logs a hook's error instead of letting it end the stream. */
  protected callHook(name: string, fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log.error({ err, hook: name }, 'ADS hook failed');
    }
  }

  /**
   * The response in flight, unflushed past the send budget's hold limit, was evicted: what the
   * server holds is full and another stream waits to write. Ends the stream as {@link closeUnread}.
   */
  private closeEvicted(type: string, bytes: number): void {
    if (this.closed) return;
    this.warnClient('unread', { type, bytes }, `closing ${this.logPrefix}ADS stream: the proxy has not read its ${type} response, and other streams wait for the server's send budget`);
    this.end(grpc.status.UNAVAILABLE, 'response not read while other streams wait to be sent theirs', 'unread');
  }

  /**
   * The response in flight stayed unflushed for the unread timeout: the proxy stopped reading.
   * Ends the stream (its HTTP/2 stream reset, which drops what it could not send).
   */
  private closeUnread(type: string, bytes: number): void {
    if (this.closed) return;
    const ms = this.ctx.unreadTimeoutMs;
    this.warnClient('unread', { type, bytes, unreadTimeoutMs: ms }, `closing ${this.logPrefix}ADS stream: the proxy has not read its ${type} response for ${ms / 1000} s`);
    this.end(grpc.status.UNAVAILABLE, `response not read within ${ms} ms`, 'unread');
  }

  private onRequest(req: Req): void {
    if (this.closed) return;
    if (!this.started) {
      this.started = true;
      this.enqueue(() => this.open(req));
    }
    this.queueRequest(req);
  }

  /**
   * Queues the job of a request, bounded whatever the client sends: a request of an unknown
   * type is dropped (logged once per type); its `error_detail.message` is cut to
   * {@link MAX_NACK_MESSAGE_CHARS}; one of a type whose queued request has not started yet is
   * merged into it (xds_protocol: a newer request of a type supersedes an older one).
   */
  private queueRequest(received: Req): void {
    const typeUrl = received.type_url ?? '';
    if (!KNOWN_TYPES.has(typeUrl)) {
      this.logUnknownType(typeUrl);
      return;
    }
    const type = typeUrl as TypeUrl;
    this.ctx.metrics.requests.inc({ type: TYPE_SHORT_NAME[type] });
    if (received.error_detail?.message) received.error_detail.message = truncateNackMessage(received.error_detail.message);
    const arrived = this.arrive(type, received);
    if (!arrived || this.closed) return;
    const waiting = this.queuedRequests.get(type);
    if (waiting?.mergeable) {
      waiting.req = this.mergeRequests(waiting.req, arrived.req);
      return;
    }
    const slot = { req: arrived.req, mergeable: arrived.mergeable };
    this.queuedRequests.set(type, slot);
    this.enqueue(() => {
      if (this.queuedRequests.get(type) === slot) this.queuedRequests.delete(type);
      return this.request(type, slot.req);
    });
  }

  /** Logs a request for an unknown type URL: once per type, for the first {@link MAX_LOGGED_UNKNOWN_TYPES} types. */
  private logUnknownType(typeUrl: string): void {
    const shown = typeUrl.slice(0, 200);
    if (this.unknownTypesLogged.has(shown) || this.unknownTypesLogged.size >= MAX_LOGGED_UNKNOWN_TYPES) return;
    this.unknownTypesLogged.add(shown);
    // Nothing to serve (e.g. RTDS, ECDS, or resource locators only). Ignored rather than ending
    // the stream, so a client asking for an optional type keeps its other subscriptions.
    this.warnClient('unknown-type', { typeUrl: shown }, `${this.logPrefix}requests for an unknown type URL ignored`);
  }

  /**
   * Logs a warning about what the client did, within the server's limits per client and in all
   * (see `CLIENT_WARNING_LIMIT`); beyond them at debug level.
   */
  private warnClient(kind: string, fields: Record<string, unknown>, message: string): void {
    const client = this.proxy?.identity ?? peerHost(this.peer);
    const notLogged = this.ctx.logLimits.takeClientWarning(client, kind);
    if (notLogged === undefined) this.log.debug(fields, message);
    else this.log.warn(notLogged > 0 ? { ...fields, notLogged } : fields, message);
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
          this.log.error({ err }, `${this.logPrefix}ADS stream job failed`);
          this.fail(grpc.status.INTERNAL, `internal error: ${errorMessage(err)}`);
        }
        if (this.jobs.length === 0) this.noteSync();
      }
    } finally {
      this.running = false;
    }
  }

  /** Authenticates the proxy from the first request, starts watching its snapshot and runs onStreamOpen. */
  private async open(first: Req): Promise<void> {
    let proxy: Proxy;
    try {
      // `call` is an AdsCall with SotW requests, a DeltaAdsCall with delta ones.
      proxy = await this.ctx.authenticate(this.call as unknown as AdsCall | DeltaAdsCall, first, this.peerCertificate);
    } catch (err) {
      this.refuse(grpc.status.UNAUTHENTICATED, 'unauthenticated', `authentication failed: ${errorMessage(err)}`);
      return;
    }
    if (this.closed) return;
    this.proxy = proxy;
    // Admission is synchronous with the watch below: no other stream of this UUID is admitted in between.
    const refusal = this.ctx.admit(this);
    if (refusal !== undefined) {
      this.refuse(grpc.status.PERMISSION_DENIED, 'uuid_conflict', refusal);
      return;
    }
    this.connectedAt = new Date();
    this.log = this.log.child({ proxy: proxy.uuid, identity: proxy.identity });
    // Watch before onStreamOpen, which typically sets the first snapshot: that set must not be missed.
    this.cancelWatch = this.ctx.watcher.watch(proxy.uuid, (s) => this.onSnapshot(s));
    this.opened = true;
    this.ctx.metrics.connectedProxies.inc();
    this.log[this.lifecycleLevel('opened')]({ peer: this.call.getPeer() }, `${this.logPrefix}ADS stream opened`);
    try {
      await this.ctx.hooks.onStreamOpen?.(proxy, this.streamId, first.node);
    } catch (err) {
      if (err instanceof ProxyRefusedError) {
        this.refuse(grpc.status.PERMISSION_DENIED, err.reason, err.message);
        return;
      }
      this.log.error({ err }, 'onStreamOpen failed');
      this.fail(grpc.status.UNAVAILABLE, `stream setup failed: ${errorMessage(err)}`);
      return;
    }
    if (this.closed) return;
    // The push job queued by a set during onStreamOpen finds the same snapshot and sends only what is still due.
    this.snapshot = this.pendingSnapshot?.snapshot ?? this.ctx.watcher.getSnapshot(proxy.uuid);
  }

  /** The job of one request (of a known type): not answered when the stream is not authenticated. */
  private async request(type: TypeUrl, req: Req): Promise<void> {
    if (!this.proxy) return;
    await this.handleRequest(type, req);
  }

  /** The push job of a new snapshot: sends its changes, times the push when anything went out. */
  private async push(): Promise<void> {
    this.pushQueued = false;
    const pending = this.pendingSnapshot;
    this.pendingSnapshot = undefined;
    if (!pending || !this.proxy) return;
    this.snapshot = pending.snapshot;
    const sent = await this.pushSnapshot();
    if (sent) this.ctx.metrics.pushDuration.observe(Number(process.hrtime.bigint() - pending.receivedAt) / 1e9);
  }

  private waitForDrain(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => this.drainWaiters.push(resolve));
  }

  /**
   * Cleans up once, whatever ended the stream; calls onStreamClose if onStreamOpen was called.
   * @param cause counted in `trellis_xds_streams_closed_total` (default `client`).
   */
  close(reason: string, cause: CloseCause = 'client'): void {
    if (this.closed) return;
    this.closed = true;
    this.ctx.metrics.streamsClosed.inc({ reason: cause });
    this.countNames(-this.nameCount, -this.nameChars);
    // The call may outlive the stream (a client that never closes its side): drop what it holds.
    for (const st of this.types.values()) writable(st).names = new Set();
    this.jobs.length = 0;
    this.queuedRequests.clear();
    clearTimeout(this.unreadTimer);
    wakeAll(this.drainWaiters);
    // A write that never completes (the call was cancelled) must not keep its share of the budget.
    this.unflushed?.();
    this.unflushed = undefined;
    wakeAll(this.flushWaiters);
    this.cancelWatch?.();
    this.cancelWatch = undefined;
    this.ctx.unregister(this);
    if (!this.opened || !this.proxy) {
      this.log.debug({ reason }, `${this.logPrefix}ADS stream ended before authentication`);
      return;
    }
    this.ctx.metrics.connectedProxies.dec();
    const nacksNotLogged = this.nacksNotLogged;
    this.log[this.lifecycleLevel('closed')]({ reason, ...(nacksNotLogged > 0 ? { nacksNotLogged } : {}) }, `${this.logPrefix}ADS stream closed`);
    const proxy = this.proxy;
    this.callHook('onStreamClose', () => this.ctx.hooks.onStreamClose?.(proxy, this.streamId));
  }
}

/** How many unknown type URLs a stream logs (each once); requests for others are ignored silently. */
const MAX_LOGGED_UNKNOWN_TYPES = 8;

/**
 * Resets (`RST_STREAM` CANCEL) the HTTP/2 stream under a grpc-js server call, dropping what it
 * could not send: grpc-js sends a call's status only once every message written is flushed,
 * which never happens on a stream the client does not read, and has no public way to reset a
 * call. Its call object keeps the HTTP/2 stream as `call.stream` (grpc-js 1.10 to 1.14; the
 * test "closes a stream left unread" notices a change). @returns whether it was found.
 */
function resetHttp2Stream(call: object): boolean {
  const stream = (call as { call?: { stream?: { close?: unknown; destroyed?: unknown } } }).call?.stream;
  if (!stream || typeof stream.close !== 'function' || typeof stream.destroyed !== 'boolean') return false;
  if (!stream.destroyed) (stream as { close(code: number): void }).close(http2.constants.NGHTTP2_CANCEL);
  return true;
}

/**
 * The `k` smallest of `names` in code-unit order (as `Array.prototype.sort` orders strings),
 * sorted, without sorting them all: O(n log k) for n names.
 */
function firstSorted(names: Iterable<string>, k: number): string[] {
  const out: string[] = [];
  for (const name of names) {
    if (out.length === k && name >= out[k - 1]) continue;
    out.splice(lowerBound(out, name), 0, name);
    if (out.length > k) out.pop();
  }
  return out;
}

/** Resolves every waiter in `waiters` and empties it. */
function wakeAll(waiters: Array<() => void>): void {
  for (const wake of waiters.splice(0)) wake();
}
