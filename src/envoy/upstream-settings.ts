import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import { serviceKey } from '../catalog/names.js';
import type { MeshService, MeshSnapshot, UpstreamTrafficSettingPolicy } from '../catalog/types.js';

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
