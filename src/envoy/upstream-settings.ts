import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import { serviceKey } from '../catalog/names.js';
import type { MeshService, MeshSnapshot, UpstreamTrafficSettingPolicy } from '../catalog/types.js';
import { durationMs, ExtensionType, typedConfig } from './typed-config.js';

/** The UpstreamTrafficSetting of a service, if any. */
export function upstreamTrafficSettingFor(snapshot: MeshSnapshot, svc: MeshService): UpstreamTrafficSettingPolicy | undefined {
  return snapshot.upstreamTrafficSettings.find((u) => u.service === serviceKey(svc));
}

/**
 * Circuit breakers from an UpstreamTrafficSetting's connection settings (OSM v1.2
 * `connectionSettings`): `tcp.maxConnections` → `max_connections`, `http.maxPendingRequests`
 * → `max_pending_requests`, `http.maxRequests` → `max_requests`, `http.maxRetries` →
 * `max_retries` (Envoy `config.cluster.v3.CircuitBreakers.Thresholds`, default priority).
 * Undefined when the setting has none of these.
 */
export function circuitBreakers(setting: UpstreamTrafficSettingPolicy | undefined): Cluster['circuit_breakers'] {
  if (!setting) return undefined;
  const thresholds = {
    ...(setting.tcp?.maxConnections !== undefined ? { max_connections: { value: setting.tcp.maxConnections } } : {}),
    ...(setting.http?.maxPendingRequests !== undefined ? { max_pending_requests: { value: setting.http.maxPendingRequests } } : {}),
    ...(setting.http?.maxRequests !== undefined ? { max_requests: { value: setting.http.maxRequests } } : {}),
    ...(setting.http?.maxRetries !== undefined ? { max_retries: { value: setting.http.maxRetries } } : {}),
  };
  return Object.keys(thresholds).length > 0 ? { thresholds: [thresholds] } : undefined;
}

/** How a cluster speaks HTTP upstream: HTTP/1.1, HTTP/2 (gRPC), or whatever the downstream spoke. */
export type UpstreamHttp = 'http1' | 'http2' | 'downstream';

/**
 * The cluster's `typed_extension_protocol_options` for `envoy.extensions.upstreams.http.v3.HttpProtocolOptions`:
 * the upstream protocol (`explicit_http_config` or `use_downstream_protocol_config`) and, when
 * given, `common_http_protocol_options.max_requests_per_connection`.
 */
export function httpProtocolOptions(upstream: UpstreamHttp, maxRequestsPerConnection?: number): Cluster['typed_extension_protocol_options'] {
  return {
    'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': typedConfig(ExtensionType.HttpProtocolOptions, {
      ...(upstream === 'http2'
        ? { explicit_http_config: { http2_protocol_options: {} } }
        : upstream === 'http1'
          ? { explicit_http_config: { http_protocol_options: {} } }
          : { use_downstream_protocol_config: { http_protocol_options: {}, http2_protocol_options: {} } }),
      ...(maxRequestsPerConnection !== undefined
        ? { common_http_protocol_options: { max_requests_per_connection: { value: maxRequestsPerConnection } } }
        : {}),
    }),
  };
}

/**
 * The fields an UpstreamTrafficSetting sets on a cluster (OSM v1.2 `connectionSettings`):
 * `connect_timeout` (`tcp.connectTimeout`, else `defaultConnectTimeoutMs`), `circuit_breakers`
 * ({@link circuitBreakers}) and, for an HTTP cluster (`upstream` given), its protocol options
 * with `http.maxRequestsPerConnection`.
 */
export function upstreamSettingFields(
  setting: UpstreamTrafficSettingPolicy | undefined,
  defaultConnectTimeoutMs: number,
  upstream: UpstreamHttp | undefined,
): Pick<Cluster, 'connect_timeout' | 'circuit_breakers' | 'typed_extension_protocol_options'> {
  const breakers = circuitBreakers(setting);
  return {
    connect_timeout: durationMs(setting?.tcp?.connectTimeoutMs ?? defaultConnectTimeoutMs),
    ...(breakers ? { circuit_breakers: breakers } : {}),
    ...(upstream ? { typed_extension_protocol_options: httpProtocolOptions(upstream, setting?.http?.maxRequestsPerConnection) } : {}),
  };
}

