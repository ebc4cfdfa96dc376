/**
 * What the state-of-the-world stream (`ads-server.ts`) and the incremental stream
 * (`delta-stream.ts`) share: the public types of the ADS server (hooks, authentication, the
 * debug view of a stream), its metrics, and a few small helpers. Kept apart so that the two
 * stream implementations and the server import it without importing each other in a circle.
 */
import type * as grpc from '@grpc/grpc-js';
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { PUSH_ORDER, TypeUrl } from '../../api/type-urls.js';
import type { Proxy } from '../../proxy/types.js';
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
   * controller registers the proxy and sets its first snapshot. Rejecting ends the stream with
   * `UNAVAILABLE` (and `onStreamClose` is still called). `node` is the first request's
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
  /** Names subscribed explicitly, sorted. */
  readonly resourceNames: readonly string[];
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

/** What the server keeps of any stream (SotW or delta): its id, debug view and a way to end it. */
export interface ServedStream {
  readonly streamId: number;
  /** Debug view of the stream; `undefined` before it is authenticated. */
  info(): StreamInfo | undefined;
  /** Ends the stream with a status (the client sees it as the call's error). */
  fail(code: grpc.status, details: string): void;
}

/** The `trellis_xds_*` metrics, shared by every stream of a server. */
export interface AdsMetrics {
  readonly connectedProxies: Gauge;
  readonly responses: Counter<'type'>;
  readonly nacks: Counter<'type'>;
  readonly pushDuration: Histogram;
  readonly responseBytes: Counter<'type'>;
}

/**
 * Creates the `trellis_xds_*` metrics in `registry`.
 * @throws Error when they are already registered there.
 */
export function createMetrics(registry: Registry): AdsMetrics {
  return {
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
  };
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

/** The message of an error, a gRPC status-like object, or anything else. */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (err && typeof err === 'object' && 'details' in err) return String((err as { details: unknown }).details);
  return String(err);
}
