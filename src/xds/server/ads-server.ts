import 'reflect-metadata';
import net from 'node:net';
import tls, { type PeerCertificate } from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import { pino, type Logger } from 'pino';
import { Counter, Gauge, Registry } from 'prom-client';
import { adsServiceDefinition } from '../../api/ads-service.js';
import { ResponseEncoder, type DeltaResponseParts, type SotwResponseParts } from '../../api/response-encoder.js';
import type { EncodedAny } from '../../api/codec.js';
import { PUSH_ORDER, TYPE_SHORT_NAME, TypeUrl } from '../../api/type-urls.js';
import { parseCommonName, type Proxy } from '../../proxy/types.js';
import { splitHostPort } from '../../util/address.js';
import { sameSet } from '../../util/same.js';
import { RateLimiter } from '../../util/rate-limit.js';
import type { DeltaDiscoveryRequest__Output, DiscoveryRequest__Output, DiscoveryResponse } from './discovery-types.js';
import { DeltaStream } from './delta-stream.js';
import {
  DEFAULT_MAX_SUBSCRIBED_NAMES_COST,
  DEFAULT_UNREAD_TIMEOUT_MS,
  StreamBase,
  SubscribedNamesBudget,
  StreamLogLimits,
  createMetrics,
  isCompleteSetType,
  type AdsCall,
  type AdsHooks,
  type AdsMetrics,
  type Authenticate,
  type DeltaAdsCall,
  type ServedStream,
  type StreamContext,
  type StreamInfo,
  type StreamRefusal,
  type StreamSync,
  type TypeStateBase,
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
  StreamRejection,
  StreamSync,
  TypeStreamInfo,
} from './stream-common.js';
export {
  DEFAULT_UNREAD_TIMEOUT_MS,
  LARGE_RESPONSE_BYTES,
  MAX_DEBUG_NAMES_PER_TYPE,
  MAX_NACK_MESSAGE_CHARS,
  MAX_RESOURCE_NAME_CHARS,
  MAX_RESOURCE_NAMES_PER_TYPE,
  MAX_SUBSCRIBED_NAME_CHARS,
  NACK_LOG_INTERVAL_MS,
} from './stream-common.js';
import type { SnapshotWatcher } from '../cache/snapshot-cache.js';
import { typeVersion } from '../cache/snapshot-cache.js';
import type { CachedResource, ResourceMap } from '../cache/types.js';
import { HeldReferences } from './held-references.js';
import { FIRST_REQUEST_TIMEOUT_MS, MAX_PENDING_STREAMS_PER_CERTIFICATE, PendingStreams } from './pending-streams.js';
import { DEFAULT_HOLD_LIMIT_MS, DEFAULT_MAX_BYTES_IN_FLIGHT, SendBudget } from './send-budget.js';

/**
 * Largest request message the server accepts, in bytes: 16 MiB (gRPC's default of 4 MiB is too
 * small for a request naming `MAX_SUBSCRIBED_NAME_CHARS` characters of names with their framing
 * and `initial_resource_versions`; more is never needed, and every stream may have one being decoded).
 */
export const MAX_RECEIVE_MESSAGE_LENGTH = 16 * 1024 * 1024;

/** Fully-qualified name of the ADS service (Envoy `envoy/service/discovery/v3/ads.proto`). */
export { ADS_SERVICE_NAME } from '../../api/ads-service.js';

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
  /**
   * Bytes of responses written but not yet flushed, all streams together, before further writes
   * wait (default {@link DEFAULT_MAX_BYTES_IN_FLIGHT}, 64 MiB). See {@link SendBudget}.
   */
  readonly maxBytesInFlight?: number;
  /**
   * A response unflushed this long, in ms, stops counting in flight and counts as held past the
   * limit instead, whose bound is `maxBytesInFlight` again (default `DEFAULT_HOLD_LIMIT_MS`, 10 s).
   * See {@link SendBudget}.
   */
  readonly sendHoldLimitMs?: number;
  /**
   * A stream whose response stays unflushed this long, in ms (the proxy stopped reading), is
   * closed and its HTTP/2 stream reset (default {@link DEFAULT_UNREAD_TIMEOUT_MS}, 30 s; 0: never).
   * Counted in `trellis_xds_streams_closed_total{reason="unread"}`.
   */
  readonly unreadTimeoutMs?: number;
  /**
   * The most the names subscribed by all streams together may cost, in characters plus
   * `SUBSCRIBED_NAME_OVERHEAD` a name (default `DEFAULT_MAX_SUBSCRIBED_NAMES_COST`, 256 Mi); a
   * stream whose subscription would go over it ends with `RESOURCE_EXHAUSTED`.
   */
  readonly maxSubscribedNamesCost?: number;
  /**
   * A stream with no complete request this long after it started, in ms, is ended
   * (`DEADLINE_EXCEEDED`; `trellis_xds_connections_refused_total{reason="first_request_timeout"}`):
   * until then it may hold a partly received message. Default `FIRST_REQUEST_TIMEOUT_MS`, 20 s.
   */
  readonly firstRequestTimeoutMs?: number;
}

/**
 * Mutual TLS done by the server itself (Node's `tls`), so that a refused handshake (no client
 * certificate, one of another CA, expired, …) is seen: logged (rate-limited) and counted in
 * `trellis_xds_connections_refused_total{reason}`. PEM text throughout.
 */
export interface MutualTlsOptions {
  /** The CA whose certificates clients must present (the mesh root). */
  readonly caPem: string;
  /** The server's certificate chain and key. */
  readonly certPem: string;
  readonly keyPem: string;
}

/**
 * Longest a client may take to complete the TLS handshake of a {@link MutualTlsOptions} listener,
 * in ms, counted from when the server starts the handshake (not from the TCP accept: see
 * {@link MAX_CONCURRENT_TLS_HANDSHAKES}). A deadline, not an idle timer: a client that sends its
 * ClientHello a byte at a time is cut when it is reached as well as one that sends nothing
 * (`reason="tls_handshake"`).
 */
export const TLS_HANDSHAKE_TIMEOUT_MS = 10_000;

/**
 * Longest an accepted connection of a {@link MutualTlsOptions} listener waits for a handshake
 * slot, in ms: then it is closed and counted as refused (`reason="overloaded"`). Long enough for
 * a fleet reconnecting at once to be handshaken in turn (10 000 connections at a few hundred
 * handshakes a second), short enough that a connection its client gave up on (a paused socket
 * does not see the client's FIN) does not hold its place for ever.
 */
export const TLS_QUEUE_TIMEOUT_MS = 60_000;

/**
 * TLS handshakes a {@link MutualTlsOptions} listener runs at once. The connections accepted
 * beyond it wait, paused and with no handshake timer running, for at most {@link TLS_QUEUE_TIMEOUT_MS}
 * in a queue of at most {@link MAX_QUEUED_CONNECTIONS}
 * (first come, first served per client address, the addresses in turn), and start their
 * handshake as earlier ones finish: a fleet reconnecting at once (10 000 Envoys
 * after a controller restart) is handshaken at the speed the server has, instead of every
 * connection's handshake timer running while the server works through the others (which reset
 * the last ones: `ERR_TLS_HANDSHAKE_TIMEOUT`, the client sees `ECONNRESET`).
 */
export const MAX_CONCURRENT_TLS_HANDSHAKES = 512;

/**
 * Accepted connections a {@link MutualTlsOptions} listener holds waiting for a handshake slot;
 * one more is closed at once and counted as refused (`reason="overloaded"`), unless another
 * client address has more than one more waiting than its own: then the newest of the address
 * with the most waiting is closed in its place.
 */
export const MAX_QUEUED_CONNECTIONS = 65_536;

/**
 * Listen backlog of every ADS listener: connections the kernel completes and holds until the
 * server accepts them (Linux caps it at `net.core.somaxconn`, 4096 by default since 5.4). Node's
 * default, 511, overflows when a fleet reconnects while the event loop is busy: the kernel then
 * drops SYNs and final ACKs (`TcpExtListenOverflows`), and resets connections whose half-open
 * state expired (`ECONNRESET` at the client).
 */
export const LISTEN_BACKLOG = 65_535;

/** One listening address of the server, with how its streams are authenticated. */
export interface ListenOptions {
  /** `host:port`; port 0 picks a free port (see the return value of {@link AdsServer.start}). */
  readonly address: string;
  /**
   * gRPC's credentials (insecure, or TLS done inside grpc-js, whose handshake failures are not
   * seen). Exactly one of `credentials` and `mutualTls`.
   */
  readonly credentials?: grpc.ServerCredentials;
  /** Mutual TLS done and watched by the server (what the controller uses). */
  readonly mutualTls?: MutualTlsOptions;
  /** {@link authenticateFromPeerCertificate} for mTLS listeners, {@link authenticateFromNodeId} for plaintext ones. */
  readonly authenticate: Authenticate;
  /** `mutualTls` only: handshakes at once (default {@link MAX_CONCURRENT_TLS_HANDSHAKES}). */
  readonly maxConcurrentHandshakes?: number;
  /** `mutualTls` only: connections waiting for a handshake at most (default {@link MAX_QUEUED_CONNECTIONS}). */
  readonly maxQueuedConnections?: number;
  /** `mutualTls` only: the handshake timeout in ms (default {@link TLS_HANDSHAKE_TIMEOUT_MS}). */
  readonly tlsHandshakeTimeoutMs?: number;
  /** `mutualTls` only: the longest wait for a handshake slot in ms (default {@link TLS_QUEUE_TIMEOUT_MS}). */
  readonly tlsQueueTimeoutMs?: number;
}

/**
 * mTLS authentication: the proxy is the CommonName of its verified client certificate
 * (`<uuid>.<kind>.<sa>.<ns>.cluster.local`, as OSM does), never what it says in `node`.
 * The listener's credentials must verify client certificates
 * (`grpc.ServerCredentials.createSsl(ca, keyCertPairs, true)`), this only reads the result.
 * The proxy is `verified` (its identity is proven).
 * @throws Error when the stream has no peer certificate, the certificate has no CN, or the CN
 *   is not a proxy CommonName ({@link parseCommonName}).
 */
export function authenticateFromPeerCertificate(
  call: AdsCall | DeltaAdsCall,
  _firstRequest?: DiscoveryRequest__Output | DeltaDiscoveryRequest__Output,
  peerCertificate?: PeerCertificate,
): Proxy {
  // The certificate as Node's TLS layer (OpenSSL) decoded it for the session: no parse of our own
  // (an ASN.1 parse in JavaScript cost 1 ms a stream, a sixth of a 10 000-proxy initial sync).
  const peer = peerCertificate ?? call.getAuthContext()?.sslPeerCertificate;
  if (!peer?.raw || peer.raw.length === 0) throw new Error('no client certificate on the stream (mTLS required)');
  const cn: unknown = peer.subject?.CN;
  if (Array.isArray(cn)) throw new Error(`client certificate has ${cn.length} CommonNames: one is needed`);
  if (typeof cn !== 'string' || cn === '') throw new Error('client certificate has no CommonName');
  return { ...parseCommonName(cn), verified: true };
}

/**
 * Plaintext authentication, for development and tests: the proxy is what the first request's
 * `node.id` says (a proxy CommonName). Anyone who can reach the port can claim any identity,
 * so use it only on a listener that is not reachable from workloads. The proxy is not
 * `verified`: its owner must give it nothing secret.
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

const EMPTY: ReadonlyMap<string, CachedResource> = new Map();

/** Per stream, per type: the subscription and what was sent, acked and nacked. */
interface TypeState extends TypeStateBase {
  /**
   * The resources the client was last sent (and, as far as we know, holds), by name: per-resource
   * state, since clients apply the valid part of a response they NACK. Often the very map of a
   * snapshot (what {@link Selection} gave), shared with every stream sent it; replaced by a copy
   * without the names the client unsubscribes from.
   */
  sent: ResourceMap;
  /** A first request not answered yet (e.g. it came before the proxy had a snapshot). */
  needsAnswer: boolean;
  /** Bumped each time the subscription (names or wildcard) changes: what {@link Selection} is valid for. */
  subscription: number;
  /** What {@link AdsStream.select} gave last, reused while the snapshot's map and the subscription stay the same. */
  selection?: Selection;
}

/**
 * The resources of one type a stream should have, selected from a snapshot's map for its
 * subscription: the snapshot's map itself when the subscription covers every name of it
 * (wildcard, or every name subscribed: e.g. EDS, which Envoy asks for by the names of all its
 * clusters), else a map of the subscribed names that exist.
 */
interface Selection {
  /** The snapshot's map of the type it was selected from. */
  readonly from: ResourceMap;
  /** {@link TypeState.subscription} it was selected for. */
  readonly subscription: number;
  readonly resources: ResourceMap;
  /** `typeVersion` of `resources` (the snapshot's own version of the type when `resources` is `from`), computed when first needed. */
  version?: string;
}

/** One SotW ADS stream: its state machine, run one job at a time (the plumbing is {@link StreamBase}'s). */
class AdsStream extends StreamBase<DiscoveryRequest__Output, DiscoveryResponse, TypeState> {
  constructor(streamId: number, call: AdsCall, ctx: StreamContext) {
    super(streamId, call, ctx, 'sotw');
  }

  /**
   * A request answering the latest response of its type is recorded as its ACK or NACK as it
   * arrives (whatever is still queued: its nonce names a response already written). NACK
   * (xds_protocol "ACK and NACK semantics summary"): the client keeps its last good config (gRPC
   * clients also apply the valid part of this response). It is recorded, but the same thing is
   * not resent, which would loop ("When to send an update"): the per-resource `sent` state stays
   * as sent, so only a changed snapshot sends again. The version rejected is the one sent with
   * the nonce (the request's own `version_info` is the last one the client accepted). A request
   * with more than `MAX_RESOURCE_NAMES_PER_TYPE` names, more than `MAX_SUBSCRIBED_NAME_CHARS`
   * characters of names or a name longer than `MAX_RESOURCE_NAME_CHARS` ends the stream.
   */
  protected override arrive(type: TypeUrl, req: DiscoveryRequest__Output): { req: DiscoveryRequest__Output; mergeable: boolean } | undefined {
    if (this.endIfBadNames(type, req.resource_names ?? [], true)) return undefined;
    const nonce = req.response_nonce ?? '';
    const st = this.types.get(type);
    if (st && nonce !== '' && nonce === st.lastNonceSent) {
      if (req.error_detail) this.recordNack(type, st, st.lastVersionSent ?? '', req.error_detail);
      else this.recordAck(type, st, req.version_info ?? '');
    }
    return { req, mergeable: true };
  }

  /**
   * The newer request supersedes the older (its `resource_names` are the whole subscription,
   * xds_protocol "How the client specifies what resources to return"; the older one's ACK or
   * NACK was recorded as it arrived).
   */
  protected mergeRequests(_older: DiscoveryRequest__Output, newer: DiscoveryRequest__Output): DiscoveryRequest__Output {
    return newer;
  }

  protected async handleRequest(type: TypeUrl, req: DiscoveryRequest__Output): Promise<void> {
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
      // An ACK or NACK of the latest response (recorded as it arrived, see `arrive`); a NACK
      // sends nothing again by itself. The request also carries the (possibly changed)
      // subscription: answer newly added names. LDS/CDS answer a newly added name even when it does not exist: the complete set without
      // it tells the client so (gRPC clients request listeners and clusters by name; C-core
      // takes a name missing from a response as not existing, instead of waiting for its 15 s
      // does-not-exist timer; xds_protocol "Knowing When a Requested Resource Does Not Exist").
      const added = names.some((n) => n !== '*' && !existing.names.has(n));
      this.updateSubscription(type, existing, names, false);
      if (this.endIfNameCharsOver(type)) return;
      await this.answer(type, added && isCompleteSetType(type));
      return;
    }

    // Empty nonce: a first request for the type. A non-empty nonce this stream never sent is
    // not stale but a proxy reconnecting (e.g. after a controller restart) with state from an
    // earlier stream: treat it as a first request too, or the proxy would wait forever.
    const st = existing ?? this.newTypeState();
    this.types.set(type, st);
    this.updateSubscription(type, st, names, true);
    if (this.endIfNameCharsOver(type)) return;
    st.needsAnswer = true;
    await this.answer(type, true);
  }

  private newTypeState(): TypeState {
    return { wildcard: false, names: new Set(), sent: EMPTY, needsAnswer: false, subscription: 0 };
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
    // The same subscription again (an ACK, typically): nothing to forget, and what was selected for it holds.
    if (wildcard === st.wildcard && sameSet(explicit, st.names)) return;
    if (!wildcard && st.sent.size > 0) {
      // A client drops the resources it unsubscribes from; forget we sent them, so subscribing
      // again sends them again even if unchanged (xds_protocol "How the client specifies what
      // resources to return": the server must resend any newly requested resources).
      let kept: Map<string, CachedResource> | undefined;
      for (const name of st.sent.keys()) {
        if (explicit.has(name)) continue;
        kept ??= new Map(st.sent);
        kept.delete(name);
      }
      if (kept) st.sent = kept;
    }
    this.setWildcard(st, wildcard);
    st.subscription++;
    st.selection = undefined;
    // Kept as the snapshot's own strings where it has them (one copy for every stream).
    const resources = this.snapshot?.resources.get(type);
    this.setNames(st, resources ? new Set([...explicit].map((name) => resources.get(name)?.name ?? name)) : explicit);
  }

  /** Answers a request for `type` (and EDS after CDS); without a snapshot, remembers to answer when it arrives. */
  private async answer(type: TypeUrl, force: boolean): Promise<void> {
    if (!this.snapshot) return; // `needsAnswer` stays set: the push of the first snapshot answers.
    const sent = await this.sendIfNeeded(type, force);
    // Envoy keeps an added or updated cluster warming until it gets its ClusterLoadAssignment
    // (xds_protocol "Resource warming"): whenever CDS goes out, EDS follows, even if unchanged.
    if (sent && type === TypeUrl.Cluster) await this.sendIfNeeded(TypeUrl.ClusterLoadAssignment, true);
  }

  /**
   * Sends the latest snapshot's changes, type by type in make-before-break order.
   * @returns whether any response was written (false when the stream closed during the push).
   */
  protected async pushSnapshot(): Promise<boolean> {
    let cdsSent = false;
    let anySent = false;
    // xds_protocol "Eventual consistency considerations": CDS, EDS, LDS, RDS, SDS, so nothing
    // refers to a resource the proxy doesn't have yet. No waiting for ACKs between types: Envoy
    // pauses the dependent types itself while it warms clusters and listeners.
    for (const type of PUSH_ORDER) {
      if (this.closed) return false;
      const st = this.types.get(type);
      if (!st) continue;
      const force = st.needsAnswer || (type === TypeUrl.ClusterLoadAssignment && cdsSent);
      const sent = await this.sendIfNeeded(type, force);
      if (sent && type === TypeUrl.Cluster) cdsSent = true;
      anySent ||= sent;
    }
    return anySent;
  }

  /**
   * The resources of `type` the stream should have, from the current snapshot: the snapshot's
   * map itself when the subscription covers all of it (no copy, and its version is the
   * snapshot's), the same {@link Selection} as last time while the map and the subscription are
   * the same objects.
   */
  private select(type: TypeUrl, st: TypeState): Selection {
    const all = this.snapshot?.resources.get(type) ?? EMPTY;
    const last = st.selection;
    if (last && last.from === all && last.subscription === st.subscription) return last;
    let selection: Selection;
    if (st.wildcard || coveredBy(all, st.names)) {
      selection = { from: all, subscription: st.subscription, resources: all, version: this.snapshot?.versions.get(type) };
    } else {
      const out = new Map<string, CachedResource>();
      for (const name of st.names) {
        const r = all.get(name);
        if (r) out.set(name, r);
      }
      selection = { from: all, subscription: st.subscription, resources: out };
    }
    st.selection = selection;
    return selection;
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
    const selection = this.select(type, st);
    const selected = selection.resources;
    const completeSet = isCompleteSetType(type);
    const due = force ? completeSet || selected.size > 0 : differs(st.sent, selected, completeSet);
    if (!due) return false;

    const version = (selection.version ??= typeVersion(selected.values()));
    const nonce = this.nextNonce();
    const resources: EncodedAny[] = [];
    for (const r of selected.values()) resources.push(r.resource);
    const response: DiscoveryResponse = { version_info: version, resources, type_url: type, nonce };
    st.lastNonceSent = nonce;
    st.lastVersionSent = version;
    st.sent = selected;
    st.needsAnswer = false;

    let bytes = 0;
    for (const r of resources) bytes += r.value.length;
    await this.write(type, response, bytes, { version, nonce, resources: resources.length });
    return true;
  }
}

/**
 * Whether `selected` differs from what was `sent` (version by name; for complete sets, also
 * removals). Nothing to compare when it is the very map that was sent (resources are immutable).
 */
function differs(sent: ResourceMap, selected: ResourceMap, completeSet: boolean): boolean {
  if (sent === selected) return false;
  for (const [name, r] of selected) if (sent.get(name)?.version !== r.version) return true;
  // Every selected name is in `sent` with its version; a size difference means `sent` holds a
  // resource the snapshot no longer has, which for LDS/CDS must be sent as its deletion.
  return completeSet && sent.size !== selected.size;
}

/** Whether every name of `map` is in `names` (then a subscription to `names` selects all of `map`). */
function coveredBy(map: ResourceMap, names: ReadonlySet<string>): boolean {
  if (map.size > names.size) return false;
  for (const name of map.keys()) if (!names.has(name)) return false;
  return true;
}

/** Refusal log lines per reason per {@link REFUSAL_LOG_WINDOW_MS} (the rest are counted, not logged). */
export const REFUSAL_LOG_LIMIT = 10;
/** Window of {@link REFUSAL_LOG_LIMIT}, in ms. */
export const REFUSAL_LOG_WINDOW_MS = 60_000;

/**
 * The `reason` a {@link MutualTlsOptions} listener refuses a connection for: `no_client_certificate`
 * (the client sent none), `untrusted_certificate` (Node's verification against the mesh CA failed:
 * another CA, self-signed, expired, not yet valid…), `tls_handshake` (any other handshake error:
 * protocol, timeout, reset), `server_certificate_refused` (the client sent a TLS alert about the
 * controller's certificate, e.g. `ERR_SSL_SSLV3_ALERT_CERTIFICATE_UNKNOWN` from an Envoy whose
 * bootstrap requires another SAN or CA).
 * @param code a `tls.TLSSocket.authorizationError` or a handshake error's `code`.
 */
export function tlsRefusalReason(code: string | undefined, hasCertificate: boolean): string {
  if (/_ALERT_(CERTIFICATE|UNKNOWN_CA|BAD_CERTIFICATE|DECRYPT_ERROR)/.test(code ?? '')) return 'server_certificate_refused';
  if (!hasCertificate || /PEER_DID_NOT_RETURN_A_CERTIFICATE/.test(code ?? '')) return 'no_client_certificate';
  if (/CERT|UNABLE_TO|SELF_SIGNED|UNKNOWN_CA|VERIFY/.test(code ?? '')) return 'untrusted_certificate';
  return 'tls_handshake';
}

/** `address:port` of a connection's client, `?` for what is gone. */
function peerOf(socket: net.Socket): string {
  return `${socket.remoteAddress ?? '?'}:${socket.remotePort ?? '?'}`;
}

/** `address:port` of a socket's client, the key a TLS socket and the connection it wraps share. */
function peerKey(socket: net.Socket): string | undefined {
  return socket.remoteAddress === undefined ? undefined : `${socket.remoteAddress}:${socket.remotePort}`;
}

/** A FIFO of sockets (a head index, so taking the first is O(1)). */
class SocketFifo {
  private readonly items: (net.Socket | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(socket: net.Socket): void {
    this.items.push(socket);
  }

  /** The oldest socket, left in (undefined when empty). */
  peek(): net.Socket | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined;
  }

  /** The oldest socket (undefined when empty). */
  shift(): net.Socket | undefined {
    if (this.head >= this.items.length) return undefined;
    const socket = this.items[this.head];
    this.items[this.head++] = undefined;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items.splice(0, this.head);
      this.head = 0;
    }
    return socket;
  }

  /** The newest socket (undefined when empty). */
  pop(): net.Socket | undefined {
    return this.length > 0 ? this.items.pop() : undefined;
  }

  /** Takes every socket out. */
  drain(): (net.Socket | undefined)[] {
    const all = this.items.splice(this.head);
    this.items.length = 0;
    this.head = 0;
    return all;
  }
}

/**
 * Admission of accepted connections to TLS handshakes: at most `concurrent` in a handshake, the
 * others waiting paused, at most `queued` in all, in one FIFO per client address (IP, without the
 * port) served in turn: a slot that frees goes to the oldest connection of the next address in
 * turn. So a client that opens many connections and never completes their handshakes (a
 * slowloris: each holds a slot until its handshake timer ends) delays another address's proxy by
 * at most one handshake timeout, not by its whole queue; a fleet from one address (a load
 * generator) is still served first come, first served. When the queue is full, a connection from
 * an address with fewer waiting takes the place of the newest of the address with the most
 * (that one is refused instead), so one address cannot fill the queue for everyone. A slot is
 * freed when its handshake ends ({@link HandshakeQueue.finished} with the TLS socket, from the
 * TLS server's secure connection or `tlsClientError`) or its connection closes, whichever comes
 * first. Both waits are bounded: a connection waiting longer than `queueTimeoutMs` for a slot,
 * and one whose handshake has not ended `handshakeTimeoutMs` after it started (Node's own
 * handshake timer is an idle timer, which a client sending a byte now and then keeps resetting),
 * is closed and reported to `expired`.
 */
class HandshakeQueue {
  /** Waiting connections by client address, the addresses in turn order (Map order). */
  private readonly waiting = new Map<string, SocketFifo>();
  private size = 0;
  /** Connections in a handshake, by {@link peerKey}, with their slot's release. */
  private readonly running = new Map<string, () => void>();
  private inFlight = 0;
  /** The waiting connections' queue timers. */
  private readonly queueTimers = new Map<net.Socket, NodeJS.Timeout>();

  /**
   * @param concurrent handshakes at once.
   * @param queued connections waiting at most.
   * @param start starts the handshake of a connection given a slot.
   * @param expired a connection closed by a timer: `queue` waited `queueTimeoutMs`, `handshake` did not end within `handshakeTimeoutMs`.
   */
  constructor(
    private readonly concurrent: number,
    private readonly queued: number,
    private readonly start: (socket: net.Socket) => void,
    private readonly timeouts: { readonly queueTimeoutMs: number; readonly handshakeTimeoutMs: number },
    private readonly expired: (socket: net.Socket, wait: 'queue' | 'handshake') => void,
  ) {}

  /**
   * Queues an accepted (paused) connection.
   * @returns the connection refused for it when the queue is full (this one, or the newest of
   *   the address with the most waiting; the caller closes it), else undefined.
   */
  add(socket: net.Socket): net.Socket | undefined {
    const address = socket.remoteAddress ?? '?';
    let refused: net.Socket | undefined;
    if (this.size >= this.queued) {
      const mine = this.waiting.get(address)?.length ?? 0;
      let hog: SocketFifo | undefined;
      for (const fifo of this.waiting.values()) if (!hog || fifo.length > hog.length) hog = fifo;
      if (!hog || hog.length <= mine + 1) return socket;
      refused = hog.pop();
      this.size--;
      if (refused) this.stopQueueTimer(refused);
    }
    let fifo = this.waiting.get(address);
    if (!fifo) this.waiting.set(address, (fifo = new SocketFifo()));
    fifo.push(socket);
    this.size++;
    const timer = setTimeout(() => this.queueTimedOut(socket, address), this.timeouts.queueTimeoutMs);
    timer.unref();
    this.queueTimers.set(socket, timer);
    this.next();
    return refused;
  }

  private stopQueueTimer(socket: net.Socket): void {
    clearTimeout(this.queueTimers.get(socket));
    this.queueTimers.delete(socket);
  }

  /**
   * `socket` waited its longest: closed. The connections of one address wait in arrival order
   * and for the same time, so the ones ahead of it left the queue already: the closed ones at
   * the head of its FIFO (this one, and any whose client went away) are taken off it.
   */
  private queueTimedOut(socket: net.Socket, address: string): void {
    this.queueTimers.delete(socket);
    if (!socket.destroyed) {
      this.expired(socket, 'queue'); // before destroy: a destroyed socket has no remote address
      socket.destroy();
    }
    const fifo = this.waiting.get(address);
    while (fifo && fifo.length > 0 && fifo.peek()?.destroyed !== false) {
      const gone = fifo.shift();
      if (gone) this.stopQueueTimer(gone);
      this.size--;
    }
    if (fifo?.length === 0) this.waiting.delete(address);
  }

  /** The handshake of this TLS socket ended (either way): frees its slot. */
  finished(socket: net.Socket): void {
    const key = peerKey(socket);
    if (key !== undefined) this.running.get(key)?.();
  }

  /** Closes the connections still waiting (the listener stops). */
  closeWaiting(): void {
    const fifos = [...this.waiting.values()];
    this.waiting.clear();
    this.size = 0;
    for (const timer of this.queueTimers.values()) clearTimeout(timer);
    this.queueTimers.clear();
    for (const fifo of fifos) for (const socket of fifo.drain()) socket?.destroy();
  }

  /** The oldest waiting connection of the next address in turn (that address goes to the back). */
  private take(): net.Socket | undefined {
    for (const [address, fifo] of this.waiting) {
      const socket = fifo.shift();
      this.waiting.delete(address);
      if (fifo.length > 0) this.waiting.set(address, fifo);
      this.size--;
      return socket;
    }
    return undefined;
  }

  private next(): void {
    while (this.inFlight < this.concurrent && this.size > 0) {
      const socket = this.take();
      if (socket) this.stopQueueTimer(socket);
      if (!socket || socket.destroyed) continue;
      const key = peerKey(socket);
      let released = false;
      const deadline = setTimeout(() => {
        if (released || socket.destroyed) return;
        this.expired(socket, 'handshake');
        socket.destroy();
      }, this.timeouts.handshakeTimeoutMs);
      deadline.unref();
      const release = (): void => {
        if (released) return;
        released = true;
        clearTimeout(deadline);
        this.inFlight--;
        if (key !== undefined && this.running.get(key) === release) this.running.delete(key);
        this.next();
      };
      this.inFlight++;
      if (key !== undefined) this.running.set(key, release);
      socket.once('close', release);
      this.start(socket);
    }
  }
}

/** A bound listener: the socket server we listen with and the gRPC server its connections go to. */
interface Listener {
  readonly socketServer: net.Server;
  readonly grpcServer: grpc.Server;
  /** mTLS listeners: the connections waiting for a handshake. */
  readonly handshakes: HandshakeQueue | undefined;
}

/**
 * The ADS server: gRPC `envoy.service.discovery.v3.AggregatedDiscoveryService`.
 * `StreamAggregatedResources` serves state-of-the-world xDS (Envoy `xds_protocol`) from the
 * snapshots of a {@link SnapshotWatcher}; `DeltaAggregatedResources` serves incremental xDS
 * from the same snapshots on the same listeners ({@link DeltaStream}). Knows nothing about the
 * mesh. A response over {@link LARGE_RESPONSE_BYTES} is logged as a warning. Metrics: `trellis_xds_connected_proxies`,
 * `trellis_xds_responses_total{type}`, `trellis_xds_nacks_total{type}`,
 * `trellis_xds_push_duration_seconds`, `trellis_xds_response_bytes_total{type}`,
 * `trellis_xds_requests_total{type}`, `trellis_xds_send_bytes_in_flight`, `trellis_xds_send_bytes_overdue`,
 * `trellis_xds_streams_closed_total{reason}`, `trellis_xds_connections_refused_total{reason}`.
 * Responses written and not yet flushed are bounded server-wide by a {@link SendBudget}; a stream
 * holds at most two queued requests per type (newer ones merge into them), at most
 * `MAX_RESOURCE_NAMES_PER_TYPE` names per type, `MAX_SUBSCRIBED_NAME_CHARS` characters of names in
 * all, each at most `MAX_RESOURCE_NAME_CHARS` long, and is closed when a response stays unread for
 * `unreadTimeoutMs`.
 *
 * Before admission a stream may hold a partly received request of up to
 * {@link MAX_RECEIVE_MESSAGE_LENGTH} in gRPC's decoder: one with no complete request
 * `firstRequestTimeoutMs` after it started is ended (`DEADLINE_EXCEEDED`), and one client
 * certificate holds at most `MAX_PENDING_STREAMS_PER_CERTIFICATE` streams not admitted yet (the next is
 * refused, `RESOURCE_EXHAUSTED`, reason `too_many_pending_streams`).
 *
 * Admission: one stream per proxy UUID. A stream authenticated as a UUID that another stream
 * holds replaces it when it is the same identity and at least as verified (a reconnect: the
 * old stream ends with `UNAVAILABLE`), or when it is verified and the holder is not; otherwise
 * it is refused (`PERMISSION_DENIED`, reason `uuid_conflict`). The check and the reservation are
 * one synchronous step, so two streams of one UUID are never both admitted. Refusals (TLS
 * handshakes, authentication, admission, the owner's `ProxyRefusedError`) are counted by reason
 * and logged at most {@link REFUSAL_LOG_LIMIT} times per reason per {@link REFUSAL_LOG_WINDOW_MS}.
 */
export class AdsServer {
  private readonly listeners: Listener[] = [];
  private readonly active = new Map<number, ServedStream>();
  /** Accepted, not admitted yet: bounded per client certificate, and in time until their first request. */
  private readonly pendingStreams: PendingStreams<ServedStream>;
  /** The admitted stream of each proxy UUID. */
  private readonly byUuid = new Map<string, ServedStream>();
  private nextStreamId = 1;
  private readonly logger: Logger;
  private readonly metrics: AdsMetrics;
  private readonly hooks: AdsHooks;
  private readonly sendBudget: SendBudget;
  private readonly subscribedNames: SubscribedNamesBudget;
  private readonly unreadTimeoutMs: number;
  private readonly refusals: Counter<'reason'>;
  private readonly refusalLog = new RateLimiter(REFUSAL_LOG_LIMIT, REFUSAL_LOG_WINDOW_MS);
  /** NACK and stream lifecycle log limits, per proxy identity across all streams. */
  private readonly logLimits = new StreamLogLimits();
  private readonly heldReferences = new HeldReferences();
  /** Encodes the responses of every stream, each resource's framing once (see {@link ResponseEncoder}). */
  private readonly responseEncoder = new ResponseEncoder();

  /**
   * @throws Error when the metrics are already registered in `options.metrics`,
   *   `maxBytesInFlight` is not a positive integer, or `unreadTimeoutMs` is negative.
   */
  constructor(private readonly options: AdsServerOptions) {
    this.unreadTimeoutMs = options.unreadTimeoutMs ?? DEFAULT_UNREAD_TIMEOUT_MS;
    if (!Number.isFinite(this.unreadTimeoutMs) || this.unreadTimeoutMs < 0) throw new Error(`AdsServer: unreadTimeoutMs must be 0 or more, got ${this.unreadTimeoutMs}`);
    this.logger = options.logger ?? pino({ level: 'silent' });
    this.sendBudget = new SendBudget(options.maxBytesInFlight ?? DEFAULT_MAX_BYTES_IN_FLIGHT, options.sendHoldLimitMs ?? DEFAULT_HOLD_LIMIT_MS);
    this.subscribedNames = new SubscribedNamesBudget(options.maxSubscribedNamesCost ?? DEFAULT_MAX_SUBSCRIBED_NAMES_COST);
    const registry = options.metrics ?? new Registry();
    this.metrics = createMetrics(registry);
    const budget = this.sendBudget;
    new Gauge({
      name: 'trellis_xds_send_bytes_in_flight',
      help: 'Bytes of DiscoveryResponses written to streams and not yet flushed, all streams together',
      registers: [registry],
      collect() {
        this.set(budget.bytesInFlight);
      },
    });
    new Gauge({
      name: 'trellis_xds_send_bytes_overdue',
      help: 'Bytes of DiscoveryResponses written to streams and not flushed within the send hold limit (slow or stuck proxies), all streams together',
      registers: [registry],
      collect() {
        this.set(budget.bytesOverdue);
      },
    });
    this.refusals = new Counter({
      name: 'trellis_xds_connections_refused_total',
      help: 'ADS connections and streams refused, by reason (TLS handshake, authentication, UUID conflict, the controller\'s checks)',
      labelNames: ['reason'],
      registers: [registry],
    });
    for (const reason of ['no_client_certificate', 'untrusted_certificate', 'server_certificate_refused', 'tls_handshake', 'overloaded', 'unauthenticated', 'uuid_conflict', 'too_many_pending_streams', 'first_request_timeout']) {
      this.refusals.inc({ reason }, 0);
    }
    this.hooks = options.hooks ?? {};
    const firstRequestTimeoutMs = options.firstRequestTimeoutMs ?? FIRST_REQUEST_TIMEOUT_MS;
    this.pendingStreams = new PendingStreams<ServedStream>(
      (stream) => {
        const details = `no complete request within ${firstRequestTimeoutMs / 1000} s of the stream's start`;
        this.onRefused({ reason: 'first_request_timeout', details, peer: stream.peer, streamId: stream.streamId }, stream.listener);
        stream.fail(grpc.status.DEADLINE_EXCEEDED, details);
      },
      { firstRequestTimeoutMs, maxPerCertificate: MAX_PENDING_STREAMS_PER_CERTIFICATE },
    );
  }

  /**
   * Starts listening on one address. Can be called several times (e.g. mTLS on :15128 and an
   * optional plaintext port); each listener has its own gRPC server and authenticate function.
   * The server listens itself (Node's `net` or `tls`) and hands each connection to gRPC
   * (`createConnectionInjector`). Receive limit: {@link MAX_RECEIVE_MESSAGE_LENGTH}.
   * @returns the bound port (useful with port 0).
   * @throws Error when the address is not `host:port`, cannot be bound (the error names it), or
   *   `listen` does not give exactly one of `credentials` and `mutualTls`.
   */
  async start(listen: ListenOptions): Promise<number> {
    if ((listen.credentials === undefined) === (listen.mutualTls === undefined)) throw new Error('listen: give exactly one of credentials and mutualTls');
    const { host, port } = splitHostPort(listen.address);
    if (!Number.isInteger(port)) throw new Error(`"${listen.address}" is not host:port`);
    const grpcServer = new grpc.Server({ 'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_LENGTH });
    const implementation: grpc.UntypedServiceImplementation = {
      StreamAggregatedResources: (call: AdsCall) => this.handleStream(call, listen),
      DeltaAggregatedResources: (call: DeltaAdsCall) => this.handleDeltaStream(call, listen),
    };
    const definition = adsServiceDefinition();
    const encoder = this.responseEncoder;
    grpcServer.addService(
      {
        ...definition,
        StreamAggregatedResources: { ...definition.StreamAggregatedResources!, responseSerialize: (r: SotwResponseParts) => encoder.sotw(r) },
        DeltaAggregatedResources: { ...definition.DeltaAggregatedResources!, responseSerialize: (r: DeltaResponseParts) => encoder.delta(r) },
      },
      implementation,
    );
    const injector = grpcServer.createConnectionInjector(listen.credentials ?? grpc.ServerCredentials.createInsecure());
    let socketServer: net.Server;
    let handshakes: HandshakeQueue | undefined;
    if (listen.mutualTls) {
      const m = listen.mutualTls;
      const tlsServer = tls.createServer(
        {
          ca: m.caPem,
          cert: m.certPem,
          key: m.keyPem,
          // The client certificate is asked for and verified by Node against `ca`; the result is
          // read below (`authorized`), so that a refusal is seen: with rejectUnauthorized Node
          // would drop the connection without a word. Nothing reaches gRPC unverified.
          requestCert: true,
          rejectUnauthorized: false,
          ALPNProtocols: ['h2'],
          minVersion: 'TLSv1.2',
          handshakeTimeout: listen.tlsHandshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS,
        },
        (socket) => {
          handshakes?.finished(socket);
          // Errors after the handshake end the connection's HTTP/2 session; nothing to log here.
          socket.on('error', () => undefined);
          if (!socket.authorized) {
            const code = String(socket.authorizationError ?? '');
            const hasCertificate = Object.keys(socket.getPeerCertificate() ?? {}).length > 0;
            this.onRefused({ reason: tlsRefusalReason(code, hasCertificate), details: `client certificate refused: ${hasCertificate ? code : 'none sent'}`, peer: peerOf(socket), streamId: 0 }, listen.address);
            socket.destroy();
            return;
          }
          injector.injectConnection(socket);
        },
      );
      tlsServer.on('tlsClientError', (err: NodeJS.ErrnoException, socket: tls.TLSSocket) => {
        handshakes?.finished(socket);
        const reason = tlsRefusalReason(err.code, !/PEER_DID_NOT_RETURN_A_CERTIFICATE/.test(err.code ?? ''));
        this.onRefused({ reason, details: `TLS handshake failed (${err.code ?? 'no code'}): ${err.message.trim()}`, peer: peerOf(socket), streamId: 0 }, listen.address);
      });
      // Node's TLS server never listens itself: connections are accepted paused and handed to it
      // (its 'connection' event) when a handshake slot is free.
      const maxQueued = listen.maxQueuedConnections ?? MAX_QUEUED_CONNECTIONS;
      const timeouts = { queueTimeoutMs: listen.tlsQueueTimeoutMs ?? TLS_QUEUE_TIMEOUT_MS, handshakeTimeoutMs: listen.tlsHandshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS };
      handshakes = new HandshakeQueue(
        listen.maxConcurrentHandshakes ?? MAX_CONCURRENT_TLS_HANDSHAKES,
        maxQueued,
        (socket) => tlsServer.emit('connection', socket),
        timeouts,
        (socket, wait) => {
          const details = wait === 'queue'
            ? `waited ${timeouts.queueTimeoutMs} ms for a TLS handshake slot`
            : `TLS handshake not completed within ${timeouts.handshakeTimeoutMs} ms`;
          this.onRefused({ reason: wait === 'queue' ? 'overloaded' : 'tls_handshake', details, peer: peerOf(socket), streamId: 0 }, listen.address);
        },
      );
      socketServer = net.createServer({ pauseOnConnect: true }, (socket) => {
        const refused = handshakes?.add(socket);
        if (!refused) return;
        this.onRefused({ reason: 'overloaded', details: `${maxQueued} connections already wait for a TLS handshake`, peer: peerOf(refused), streamId: 0 }, listen.address);
        refused.destroy();
      });
    } else {
      socketServer = net.createServer((socket) => injector.injectConnection(socket));
    }
    const bound = await new Promise<number>((resolve, reject) => {
      socketServer.once('error', reject);
      socketServer.listen({ host: host || undefined, port, backlog: LISTEN_BACKLOG }, () => {
        socketServer.off('error', reject);
        resolve((socketServer.address() as net.AddressInfo).port);
      });
    }).catch((err: unknown) => {
      grpcServer.forceShutdown();
      throw new Error(`cannot listen on ${listen.address}: ${err instanceof Error ? err.message : String(err)}`);
    });
    socketServer.on('error', (err) => this.logger.error({ err, address: listen.address }, 'ADS listener failed'));
    this.listeners.push({ socketServer, grpcServer, handshakes });
    this.logger.info({ address: listen.address, port: bound, tls: listen.mutualTls ? 'mutual' : listen.credentials!._isSecure() ? 'grpc' : 'none' }, 'ADS server listening');
    return bound;
  }

  /**
   * Stops every listener: no new connections; open streams end with `UNAVAILABLE` so proxies
   * reconnect (to another replica); after `timeoutMs` milliseconds, remaining connections are
   * closed by force. Every open stream gets its onStreamClose.
   */
  async stop(timeoutMs = 5000): Promise<void> {
    const listeners = this.listeners.splice(0);
    for (const { socketServer, handshakes } of listeners) {
      socketServer.close();
      handshakes?.closeWaiting();
    }
    const shutdowns = listeners.map(
      ({ grpcServer }) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(() => {
            grpcServer.forceShutdown();
            resolve();
          }, timeoutMs);
          timer.unref();
          grpcServer.tryShutdown(() => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    for (const stream of [...this.active.values(), ...this.pendingStreams.values()]) {
      stream.fail(grpc.status.UNAVAILABLE, 'ADS server shutting down');
    }
    await Promise.all(shutdowns);
  }

  /** The authenticated streams, for the debug API. */
  streams(): StreamInfo[] {
    return this.ofAuthenticated((s) => s.info());
  }

  /**
   * What each authenticated stream's proxy holds of its snapshots (see `StreamSync`), for the
   * policy status: no copies, one entry per stream.
   */
  syncStates(): StreamSync[] {
    return this.ofAuthenticated((s) => s.syncState());
  }

  /** `view` of every active stream, leaving out those it gives nothing for (not authenticated yet). */
  private ofAuthenticated<T>(view: (s: ServedStream) => T | undefined): T[] {
    const out: T[] = [];
    for (const s of this.active.values()) {
      const v = view(s);
      if (v !== undefined) out.push(v);
    }
    return out;
  }

  /** Serves one `DeltaAggregatedResources` call (incremental xDS, see {@link DeltaStream}). */
  private handleDeltaStream(call: DeltaAdsCall, listen: ListenOptions): void {
    this.hold(new DeltaStream(this.nextStreamId++, call, this.streamContext(listen)), call, listen);
  }

  /** Serves one `StreamAggregatedResources` call (state of the world, see {@link AdsStream}). */
  private handleStream(call: AdsCall, listen: ListenOptions): void {
    this.hold(new AdsStream(this.nextStreamId++, call, this.streamContext(listen)), call, listen);
  }

  /** Holds a new stream until its admission, or refuses it when its client certificate holds as many as it may. */
  private hold(stream: ServedStream, call: AdsCall | DeltaAdsCall, listen: ListenOptions): void {
    const peer = call.getAuthContext()?.sslPeerCertificate;
    if (peer?.raw && peer.raw.length > 0) stream.peerCertificate = peer;
    const refused = this.pendingStreams.add(stream, stream.peerCertificate?.fingerprint256);
    if (!refused) return;
    const details = 'this client certificate has too many ADS streams waiting for their first request';
    this.onRefused({ reason: refused, details, peer: stream.peer, streamId: stream.streamId }, listen.address);
    stream.fail(grpc.status.RESOURCE_EXHAUSTED, details);
  }

  /**
   * Admits an authenticated stream (see the class comment): synchronous, so that the check and
   * the reservation of its UUID are one step.
   * @returns why it is refused, or undefined when it is admitted.
   */
  private admit(stream: ServedStream): string | undefined {
    const proxy = stream.proxy!;
    const holder = this.byUuid.get(proxy.uuid);
    const held = holder?.proxy;
    if (holder && holder !== stream && held) {
      const replaces = held.identity === proxy.identity ? proxy.verified === true || !held.verified : proxy.verified === true && !held.verified;
      if (!replaces) {
        return `proxy UUID ${proxy.uuid} is in use by ${held.verified ? 'a' : 'an unverified'} stream of ${held.identity}; refusing ${proxy.verified ? '' : 'unverified '}${proxy.identity}`;
      }
      holder.fail(grpc.status.UNAVAILABLE, `replaced by a newer stream of proxy ${proxy.uuid}`);
    }
    this.byUuid.set(proxy.uuid, stream);
    this.pendingStreams.delete(stream);
    this.active.set(stream.streamId, stream);
    return undefined;
  }

  /** Counts a refusal and logs it, rate-limited per reason. */
  private onRefused(r: StreamRefusal, listener: string): void {
    this.refusals.inc({ reason: r.reason });
    const suppressed = this.refusalLog.take(r.reason);
    if (suppressed === undefined) return;
    this.logger.warn(
      {
        reason: r.reason,
        peer: r.peer,
        listener,
        ...(r.streamId > 0 ? { streamId: r.streamId } : {}),
        ...(r.proxy ? { proxy: r.proxy.uuid, identity: r.proxy.identity } : {}),
        ...(suppressed > 0 ? { suppressed } : {}),
      },
      `ADS connection refused: ${r.details}`,
    );
  }

  /**
   * What a stream accepted on `listen` is given: a stream is pending (ended by {@link stop},
   * not listed) until it is authenticated and admitted, then active (listed in {@link streams})
   * until it ends.
   */
  private streamContext(listen: ListenOptions): StreamContext {
    return {
      watcher: this.options.watcher,
      hooks: this.hooks,
      metrics: this.metrics,
      logger: this.logger,
      listener: listen.address,
      authenticate: listen.authenticate,
      sendBudget: this.sendBudget,
      subscribedNames: this.subscribedNames,
      unreadTimeoutMs: this.unreadTimeoutMs,
      logLimits: this.logLimits,
      heldReferences: this.heldReferences,
      admit: (s) => this.admit(s),
      refused: (r) => this.onRefused(r, listen.address),
      unregister: (s) => {
        this.pendingStreams.delete(s);
        this.active.delete(s.streamId);
        if (s.proxy && this.byUuid.get(s.proxy.uuid) === s) this.byUuid.delete(s.proxy.uuid);
      },
    };
  }
}
