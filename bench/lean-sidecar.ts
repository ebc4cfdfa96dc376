/**
 * A lean simulated Envoy sidecar for the load generator: one state-of-the-world ADS stream
 * over real gRPC; wildcard CDS and LDS, EDS for every EDS cluster, RDS for every route
 * configuration the listeners' HTTP connection managers name, SDS for every secret the TLS
 * contexts name; ACKs every response. It decodes only what it needs to find those names
 * (protobufjs `decode` of Cluster/Listener and of the TLS/HCM `Any`s; the `name` field of
 * EDS/RDS/SDS resources read straight off the wire) and records times, not configuration.
 */
import * as grpc from '@grpc/grpc-js';
import type protobuf from 'protobufjs';
import { decodeAny, messageType } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';

/** The SotW ADS method path. */
export const ADS_METHOD = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources';

const EDS_DISCOVERY_TYPE = 3; // envoy.config.cluster.v3.Cluster.DiscoveryType.EDS
const HCM_TYPE_URL = 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager';
const UPSTREAM_TLS_TYPE_URL = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext';
const DOWNSTREAM_TLS_TYPE_URL = 'type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext';

interface Codecs {
  request: protobuf.Type;
  response: protobuf.Type;
  cluster: protobuf.Type;
  listener: protobuf.Type;
  hcm: protobuf.Type;
  upstreamTls: protobuf.Type;
  downstreamTls: protobuf.Type;
}

let codecs: Codecs | undefined;

/** The protobufjs types the sidecar uses (loaded once). */
function types(): Codecs {
  codecs ??= {
    request: messageType('envoy.service.discovery.v3.DiscoveryRequest'),
    response: messageType('envoy.service.discovery.v3.DiscoveryResponse'),
    cluster: messageType(TypeUrl.Cluster),
    listener: messageType(TypeUrl.Listener),
    hcm: messageType(HCM_TYPE_URL),
    upstreamTls: messageType(UPSTREAM_TLS_TYPE_URL),
    downstreamTls: messageType(DOWNSTREAM_TLS_TYPE_URL),
  };
  return codecs;
}

/** Loads the protos now, so the first stream does not pay for it. */
export function warmUpCodecs(): void {
  types();
}

interface AnyMessage {
  type_url?: string;
  value?: Uint8Array;
}
interface DecodedResponse {
  version_info?: string;
  resources?: AnyMessage[];
  type_url?: string;
  nonce?: string;
}
type Loose = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

/** Reads a varint at `pos`; returns [value, next position]. Values above 2^53 lose precision (only lengths and tags are read). */
function varint(buf: Uint8Array, pos: number): [number, number] {
  let result = 0;
  let shift = 1;
  for (;;) {
    const b = buf[pos++];
    result += (b & 0x7f) * shift;
    if (b < 0x80) return [result, pos];
    shift *= 128;
  }
}

/**
 * The string of field 1 of an encoded message (the `name` of a Secret and a
 * RouteConfiguration, the `cluster_name` of a ClusterLoadAssignment), read off the wire.
 */
export function nameField(buf: Uint8Array): string {
  let pos = 0;
  while (pos < buf.length) {
    const [tag, p] = varint(buf, pos);
    pos = p;
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (wire === 2) {
      const [len, q] = varint(buf, pos);
      if (field === 1) return Buffer.from(buf.buffer, buf.byteOffset + q, len).toString('utf8');
      pos = q + len;
    } else if (wire === 0) pos = varint(buf, pos)[1];
    else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return '';
}

function tlsSecretNames(any: AnyMessage | undefined, out: Set<string>): void {
  if (!any?.value || !any.type_url) return;
  let ctx: Loose;
  if (any.type_url === UPSTREAM_TLS_TYPE_URL) ctx = types().upstreamTls.decode(any.value) as Loose;
  else if (any.type_url === DOWNSTREAM_TLS_TYPE_URL) ctx = types().downstreamTls.decode(any.value) as Loose;
  else return;
  const common = ctx.common_tls_context as Loose | undefined;
  for (const c of (common?.tls_certificate_sds_secret_configs ?? []) as Loose[]) if (c.name) out.add(c.name as string);
  const validation = common?.validation_context_sds_secret_config as Loose | undefined;
  if (validation?.name) out.add(validation.name as string);
  const combined = common?.combined_validation_context as Loose | undefined;
  if (combined?.validation_context_sds_secret_config?.name) out.add(combined.validation_context_sds_secret_config.name as string);
}

/**
 * Calls `visit` with each field of an encoded message: its number, and its bytes (length-delimited)
 * or value (varint; fixed-width ones are skipped), read off the wire without decoding the message.
 */
function eachField(buf: Uint8Array, visit: (field: number, value: Uint8Array | number) => void): void {
  let pos = 0;
  while (pos < buf.length) {
    const [tag, p] = varint(buf, pos);
    pos = p;
    const wire = tag & 7;
    if (wire === 2) {
      const [len, q] = varint(buf, pos);
      visit(Math.floor(tag / 8), buf.subarray(q, q + len));
      pos = q + len;
    } else if (wire === 0) {
      const [value, q] = varint(buf, pos);
      visit(Math.floor(tag / 8), value);
      pos = q;
    } else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
}

/** The bytes of each occurrence of length-delimited field `field`. */
function bytesFields(buf: Uint8Array, field: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  eachField(buf, (f, v) => {
    if (f === field && typeof v !== 'number') out.push(v);
  });
  return out;
}

const utf8 = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.length).toString('utf8');

/**
 * The secret names an encoded UpstreamTlsContext names, off the wire: `common_tls_context` (1)
 * → `tls_certificate_sds_secret_configs` (6), `validation_context_sds_secret_config` (7) and
 * `combined_validation_context` (8) → `validation_context_sds_secret_config` (2), each's `name` (1).
 */
function upstreamTlsSecretNames(ctx: Uint8Array, out: Set<string>): void {
  for (const common of bytesFields(ctx, 1)) {
    const configs = [...bytesFields(common, 6), ...bytesFields(common, 7), ...bytesFields(common, 8).flatMap((c) => bytesFields(c, 2))];
    for (const config of configs) for (const name of bytesFields(config, 1)) out.add(utf8(name));
  }
}

/**
 * EDS names and secret names referenced by encoded Clusters, read off the wire (a load generator
 * holding a thousand proxies' thousand clusters cannot afford protobufjs decodes): `name` (1),
 * `type` (2), `eds_cluster_config` (3) → `service_name` (2), `transport_socket` (24) →
 * `typed_config` (3), an `Any` (`type_url` 1, `value` 2) of an UpstreamTlsContext.
 */
export function clusterReferences(resources: readonly AnyMessage[]): { eds: Set<string>; secrets: Set<string> } {
  const eds = new Set<string>();
  const secrets = new Set<string>();
  for (const r of resources) {
    if (!r.value) continue;
    let name = '';
    let type = 0;
    let serviceName = '';
    eachField(r.value, (field, v) => {
      if (field === 2 && typeof v === 'number') type = v;
      if (typeof v === 'number') return;
      if (field === 1) name = utf8(v);
      else if (field === 3) for (const s of bytesFields(v, 2)) serviceName = utf8(s);
      else if (field === 24) {
        for (const any of bytesFields(v, 3)) {
          const [typeUrl] = bytesFields(any, 1);
          if (typeUrl && utf8(typeUrl) === UPSTREAM_TLS_TYPE_URL) for (const ctx of bytesFields(any, 2)) upstreamTlsSecretNames(ctx, secrets);
        }
      }
    });
    if (type === EDS_DISCOVERY_TYPE) eds.add(serviceName || name);
  }
  return { eds, secrets };
}

/** Route configuration names and secret names referenced by encoded Listeners. */
export function listenerReferences(resources: readonly AnyMessage[]): { rds: Set<string>; secrets: Set<string> } {
  const rds = new Set<string>();
  const secrets = new Set<string>();
  for (const r of resources) {
    if (!r.value) continue;
    const l = types().listener.decode(r.value) as Loose;
    const chains = [...((l.filter_chains ?? []) as Loose[]), ...(l.default_filter_chain ? [l.default_filter_chain as Loose] : [])];
    for (const chain of chains) {
      tlsSecretNames(chain.transport_socket?.typed_config as AnyMessage | undefined, secrets);
      for (const f of (chain.filters ?? []) as Loose[]) {
        const tc = f.typed_config as AnyMessage | undefined;
        if (tc?.type_url !== HCM_TYPE_URL || !tc.value) continue;
        const hcm = types().hcm.decode(tc.value) as Loose;
        if (hcm.rds?.route_config_name) rds.add(hcm.rds.route_config_name as string);
      }
    }
  }
  return { rds, secrets };
}

function walk(value: unknown, visit: (o: Loose) => void): void {
  if (Array.isArray(value)) for (const v of value) walk(v, visit);
  else if (value && typeof value === 'object') {
    visit(value as Loose);
    for (const v of Object.values(value)) walk(v, visit);
  }
}

/**
 * The same references found by fully decoding every resource with the codec (`decodeAny`), to
 * check the lean extraction against. Slow: used on one proxy per run.
 */
export function fullReferences(type: string, resources: readonly AnyMessage[]): { names: Set<string>; secrets: Set<string> } {
  const decoded = resources.map((r) => decodeAny({ type_url: r.type_url ?? '', value: r.value ?? new Uint8Array() }));
  const names = new Set<string>();
  const secrets = new Set<string>();
  if (type === TypeUrl.Cluster) {
    for (const c of decoded as Loose[]) if (c.type === 'EDS') names.add((c.eds_cluster_config?.service_name as string) || (c.name as string));
  }
  walk(decoded, (o) => {
    if (type === TypeUrl.Listener && o.rds?.route_config_name) names.add(o.rds.route_config_name as string);
    for (const c of (o.tls_certificate_sds_secret_configs ?? []) as Loose[]) secrets.add(c.name as string);
    if (o.validation_context_sds_secret_config?.name) secrets.add(o.validation_context_sds_secret_config.name as string);
  });
  return { names, secrets };
}

/** Current time on the monotonic clock shared by every process of the machine, in ms. */
export function nowMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** What the load generator reads of a simulated sidecar, whichever ADS variant it speaks. */
export interface Sidecar {
  /** When the first full configuration was ACKed (monotonic ms), once it was. */
  readonly syncedAt: number | undefined;
  /** Responses, bytes and last ACK time since the last {@link Sidecar.mark}. */
  readonly markResponses: number;
  readonly markBytes: number;
  readonly markLastAck: number;
  readonly ended: { code: number; details: string } | undefined;
  /** Connections that failed before the stream got a response and were tried again (see {@link CONNECT_RETRY}). */
  readonly reconnects: number;
  /** Opens the channel and the stream and sends the first CDS and LDS requests. */
  connect(address: string, credentials: grpc.ChannelCredentials, maxReceiveBytes: number): void;
  /** Starts a new measurement window. */
  mark(): void;
  /** Cancels the stream and closes the channel. */
  close(): void;
}

/** Where a sidecar reports (the load generator's bookkeeping). */
export interface SidecarObserver {
  /** A response was received and ACKed (`ackAt`: after the ACK was written). */
  onResponse(sidecar: Sidecar, type: string, bytes: number, ackAt: number): void;
  /** The sidecar holds its first full configuration. */
  onSynced(sidecar: Sidecar): void;
  /** The stream ended. */
  onEnded(sidecar: Sidecar, status: { code: number; details: string }): void;
  /** The connection failed before any response (`status`) and is tried again after a backoff. */
  onReconnect?(sidecar: Sidecar, status: { code: number; details: string }): void;
  /** The lean extraction disagreed with the full decode (only when `verify`). */
  onVerifyMismatch(sidecar: Sidecar, message: string): void;
}

/** The types whose resources a sidecar asks for by name (the others are wildcard: CDS, LDS). */
export const PER_NAME_TYPES = [TypeUrl.ClusterLoadAssignment, TypeUrl.RouteConfiguration, TypeUrl.Secret] as const;

/**
 * How a simulated sidecar retries a connection that failed before its stream got any response
 * (`UNAVAILABLE`: refused, reset, handshake failed), as Envoy's xDS gRPC stream does: after a
 * jittered exponential backoff (a uniform random delay below `baseMs × 2^attempt`, at most
 * `maxMs`; Envoy's 500 ms and 30 s), at most `attempts` times. A stream that got a response
 * and then ended is not retried (the bench counts it as ended).
 */
export const CONNECT_RETRY = { baseMs: 500, maxMs: 30_000, attempts: 8 } as const;

/**
 * The gRPC channel options of a simulated sidecar: its own subchannel (its own TCP connection),
 * the receive limit, and on TLS the controller certificate's name `localhost`.
 */
export function sidecarChannelOptions(credentials: grpc.ChannelCredentials, maxReceiveBytes: number): grpc.ChannelOptions {
  return {
    'grpc.use_local_subchannel_pool': 1,
    'grpc.max_receive_message_length': maxReceiveBytes,
    'grpc.max_send_message_length': 64 * 1024 * 1024,
    // A TLS server name may not be an IP address (RFC 6066): name the controller's certificate's `localhost`.
    ...(credentials._isSecure() ? { 'grpc.ssl_target_name_override': 'localhost', 'grpc.default_authority': 'localhost' } : {}),
  };
}

/**
 * What both simulated sidecars share: the channel and stream, the measurement window, and the
 * bookkeeping of what is wanted and held, by which the first full configuration is recognised.
 * A subclass says which method it calls, sends its first requests and handles responses.
 */
export abstract class SidecarStream implements Sidecar {
  syncedAt: number | undefined;
  markResponses = 0;
  markBytes = 0;
  markLastAck = 0;
  ended: { code: number; details: string } | undefined;
  reconnects = 0;
  protected call: grpc.ClientDuplexStream<Buffer, Buffer> | undefined;
  /** Whether the next request is the stream's first (which carries the node). */
  protected first = true;
  protected cdsAcked = false;
  protected ldsAcked = false;
  /** The names asked for, per by-name type. */
  protected readonly wanted = new Map<string, Set<string>>();
  /** The names held, per by-name type. */
  protected readonly have = new Map<string, Set<string>>();
  private client: grpc.Client | undefined;
  private target: { address: string; credentials: grpc.ChannelCredentials; maxReceiveBytes: number } | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** On plaintext the controller never sends the `service-cert` Secret (no key there): not waited for. */
  private serviceCertExpected = true;

  /** @param nodeId the proxy's CommonName (node.id; on mTLS the certificate says the same). */
  constructor(
    readonly nodeId: string,
    protected readonly observer: SidecarObserver,
    private readonly method: string,
  ) {}

  /** Opens the channel and the stream and sends the first (wildcard) CDS and LDS requests. */
  connect(address: string, credentials: grpc.ChannelCredentials, maxReceiveBytes: number): void {
    this.serviceCertExpected = credentials._isSecure();
    this.target = { address, credentials, maxReceiveBytes };
    this.open();
  }

  /** Opens a channel and the stream; a connection failure before any response is retried ({@link CONNECT_RETRY}). */
  private open(): void {
    const { address, credentials, maxReceiveBytes } = this.target!;
    const client = new grpc.Client(address, credentials, sidecarChannelOptions(credentials, maxReceiveBytes));
    this.client = client;
    const call = client.makeBidiStreamRequest(this.method, (b: Buffer) => b, (b: Buffer) => b);
    this.call = call;
    let received = false;
    let over = false;
    const ended = (status: { code: number; details: string }): void => {
      if (over) return;
      over = true;
      if (!received && !this.closed && status.code === grpc.status.UNAVAILABLE && this.reconnects < CONNECT_RETRY.attempts) {
        client.close();
        const delay = Math.random() * Math.min(CONNECT_RETRY.maxMs, CONNECT_RETRY.baseMs * 2 ** this.reconnects);
        this.reconnects++;
        this.first = true;
        this.observer.onReconnect?.(this, status);
        this.retryTimer = setTimeout(() => this.open(), delay);
        return;
      }
      this.end(status);
    };
    call.on('data', (buf: Buffer) => {
      received = true;
      this.onData(buf);
    });
    call.on('error', (err: grpc.ServiceError) => ended({ code: err.code ?? grpc.status.UNKNOWN, details: err.details ?? err.message }));
    call.on('status', (s: grpc.StatusObject) => ended({ code: s.code, details: s.details }));
    this.requestWildcards();
  }

  /** Starts a new measurement window. */
  mark(): void {
    this.markResponses = 0;
    this.markBytes = 0;
    this.markLastAck = 0;
  }

  /** Cancels the stream and closes the channel. */
  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.call?.cancel();
    this.client?.close();
  }

  /** Sends the first CDS and LDS requests. */
  protected abstract requestWildcards(): void;
  /** Handles one response (its ACK included), then calls {@link responded}. */
  protected abstract onData(buf: Buffer): void;

  /** The node, on the stream's first request only. */
  protected withNode(req: Record<string, unknown>): Record<string, unknown> {
    if (this.first) {
      req.node = { id: this.nodeId, cluster: this.nodeId.split('.')[2] ?? '' };
      this.first = false;
    }
    return req;
  }

  /** Counts a response of `type` of `bytes`, ACKed now, and reports the first full configuration. */
  protected responded(type: string, bytes: number): void {
    const ackAt = nowMs();
    this.markResponses++;
    this.markBytes += bytes;
    this.markLastAck = ackAt;
    this.observer.onResponse(this, type, bytes, ackAt);
    if (this.syncedAt === undefined && this.isSynced()) {
      this.syncedAt = ackAt;
      this.observer.onSynced(this);
    }
  }

  private end(status: { code: number; details: string }): void {
    if (this.ended) return;
    this.ended = status;
    this.observer.onEnded(this, status);
  }

  private isSynced(): boolean {
    if (!this.cdsAcked || !this.ldsAcked) return false;
    for (const type of PER_NAME_TYPES) {
      const wanted = this.wanted.get(type);
      if (!wanted) continue;
      const have = this.have.get(type);
      for (const n of wanted) {
        if (type === TypeUrl.Secret && !this.serviceCertExpected && n === 'service-cert') continue;
        if (!have?.has(n)) return false;
      }
    }
    return true;
  }
}

/** One simulated sidecar on its own channel (its own TCP connection), over state-of-the-world ADS. */
export class LeanSidecar extends SidecarStream {
  private readonly lastNonce = new Map<string, string>();
  private readonly lastVersion = new Map<string, string>();
  private clusterSecrets = new Set<string>();
  private listenerSecrets = new Set<string>();

  /**
   * @param nodeId the proxy's CommonName (node.id; on mTLS the certificate says the same).
   * @param verify cross-check the first CDS and LDS responses against a full decode.
   */
  constructor(
    nodeId: string,
    observer: SidecarObserver,
    private readonly verify = false,
  ) {
    super(nodeId, observer, ADS_METHOD);
  }

  protected requestWildcards(): void {
    this.send(TypeUrl.Cluster, []);
    this.send(TypeUrl.Listener, []);
  }

  private send(type: string, names: readonly string[]): void {
    if (!this.call || this.ended) return;
    const req = this.withNode({
      type_url: type,
      resource_names: [...names],
      version_info: this.lastVersion.get(type) ?? '',
      response_nonce: this.lastNonce.get(type) ?? '',
    });
    const t = types().request;
    this.call.write(Buffer.from(t.encode(t.fromObject(req)).finish()));
  }

  protected onData(buf: Buffer): void {
    const res = types().response.decode(buf) as DecodedResponse;
    const type = res.type_url ?? '';
    const resources = res.resources ?? [];
    this.lastNonce.set(type, res.nonce ?? '');
    this.lastVersion.set(type, res.version_info ?? '');

    let edsNames: Set<string> | undefined;
    let rdsNames: Set<string> | undefined;
    if (type === TypeUrl.Cluster) {
      const refs = clusterReferences(resources);
      edsNames = refs.eds;
      this.clusterSecrets = refs.secrets;
      this.cdsAcked = true;
      if (this.verify) this.check(type, resources, refs.eds, refs.secrets);
    } else if (type === TypeUrl.Listener) {
      const refs = listenerReferences(resources);
      rdsNames = refs.rds;
      this.listenerSecrets = refs.secrets;
      this.ldsAcked = true;
      if (this.verify) this.check(type, resources, refs.rds, refs.secrets);
    } else {
      let have = this.have.get(type);
      if (!have) this.have.set(type, (have = new Set()));
      for (const r of resources) if (r.value) have.add(nameField(r.value));
    }
    // ACK with the type's current subscription (wildcard for CDS/LDS).
    const isWildcard = type === TypeUrl.Cluster || type === TypeUrl.Listener;
    this.send(type, isWildcard ? [] : [...(this.wanted.get(type) ?? [])]);
    if (edsNames) this.subscribe(TypeUrl.ClusterLoadAssignment, edsNames);
    if (rdsNames) this.subscribe(TypeUrl.RouteConfiguration, rdsNames);
    if (type === TypeUrl.Cluster || type === TypeUrl.Listener) this.subscribe(TypeUrl.Secret, new Set([...this.clusterSecrets, ...this.listenerSecrets]));
    this.responded(type, buf.length);
  }

  private subscribe(type: string, names: Set<string>): void {
    const current = this.wanted.get(type);
    if (current && current.size === names.size && [...names].every((n) => current.has(n))) return;
    this.wanted.set(type, names);
    const have = this.have.get(type);
    if (have) for (const n of [...have]) if (!names.has(n)) have.delete(n);
    if (names.size === 0 && !current) return; // nothing to ask for yet
    this.send(type, [...names].sort());
  }

  private check(type: string, resources: readonly AnyMessage[], names: Set<string>, secrets: Set<string>): void {
    const full = fullReferences(type, resources);
    const same = (a: Set<string>, b: Set<string>): boolean => a.size === b.size && [...a].every((x) => b.has(x));
    if (!same(full.names, names) || !same(full.secrets, secrets)) {
      this.observer.onVerifyMismatch(
        this,
        `${type}: lean [${[...names].sort().join(',')}] secrets [${[...secrets].sort().join(',')}] vs full [${[...full.names].sort().join(',')}] secrets [${[...full.secrets].sort().join(',')}]`,
      );
    }
  }
}
