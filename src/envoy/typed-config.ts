import { typeUrlOf } from '../api/type-urls.js';

/** Fully-qualified names of the extension messages the generators put in `typed_config`. */
export const ExtensionType = {
  HttpConnectionManager: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
  TcpProxy: 'envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy',
  NetworkRbac: 'envoy.extensions.filters.network.rbac.v3.RBAC',
  HttpRbac: 'envoy.extensions.filters.http.rbac.v3.RBAC',
  HttpRbacPerRoute: 'envoy.extensions.filters.http.rbac.v3.RBACPerRoute',
  Router: 'envoy.extensions.filters.http.router.v3.Router',
  OriginalDst: 'envoy.extensions.filters.listener.original_dst.v3.OriginalDst',
  TlsInspector: 'envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector',
  UpstreamTlsContext: 'envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext',
  DownstreamTlsContext: 'envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext',
  HttpProtocolOptions: 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
  NetworkLocalRateLimit: 'envoy.extensions.filters.network.local_ratelimit.v3.LocalRateLimit',
  HttpLocalRateLimit: 'envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit',
  StdoutAccessLog: 'envoy.extensions.access_loggers.stream.v3.StdoutAccessLog',
  ZipkinConfig: 'envoy.config.trace.v3.ZipkinConfig',
} as const;

/** A `google.protobuf.Any` in the object form the codec encodes: `@type` plus the message's fields. */
export type TypedConfig<T extends object = object> = { '@type': string } & T;

/**
 * Wraps a message as a `typed_config` Any: `{'@type': 'type.googleapis.com/<name>', ...message}`.
 * The codec encodes it (and throws on an unknown field).
 */
export function typedConfig<T extends object>(messageName: string, message: T): TypedConfig<T> {
  return { '@type': typeUrlOf(messageName), ...message };
}

/** A `google.protobuf.Duration` of `ms` milliseconds (`seconds` and `nanos`, zero parts omitted). */
export function durationMs(ms: number): { seconds?: number; nanos?: number } {
  const seconds = Math.floor(ms / 1000);
  const nanos = Math.round((ms % 1000) * 1_000_000);
  // Zero parts are left out, as proto3 leaves out default values on the wire.
  return { ...(seconds !== 0 ? { seconds } : {}), ...(nanos !== 0 ? { nanos } : {}) };
}

/** An ADS `ConfigSource` (`ads: {}`, resource API V3): resources come over the same ADS stream. */
export const ADS_CONFIG_SOURCE = { ads: {}, resource_api_version: 'V3' } as const;
