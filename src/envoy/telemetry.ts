import type { Cluster } from '../api/generated/envoy/config/cluster/v3/Cluster.js';
import type { AccessLog } from '../api/generated/envoy/config/accesslog/v3/AccessLog.js';
import type { TracingSettings } from '../catalog/types.js';
import { ExtensionType, durationMs, typedConfig } from './typed-config.js';

/** Name of the cluster of the Zipkin collector the sidecars send spans to (OSM). */
export const TRACING_CLUSTER = 'envoy-tracing-cluster';
/** Connect timeout of {@link TRACING_CLUSTER}, in ms. */
const TRACING_CONNECT_TIMEOUT_MS = 1000;

/**
 * What the listeners' HCMs and `tcp_proxy` filters log and trace, from the MeshConfig settings
 * (`MeshSettings.accessLog`, `MeshSettings.tracing`). Shared builds take the two fields as
 * inputs (the snapshot builder keeps the tracing settings the same object while they do not change).
 */
export interface ListenerTelemetry {
  /** Access logs to stdout in Envoy's default format. */
  readonly accessLog: boolean;
  /** Zipkin tracing; undefined = none. */
  readonly tracing: TracingSettings | undefined;
}

/** No access log, no tracing: what a mesh gets unless its MeshConfig turns them on. */
export const NO_TELEMETRY: ListenerTelemetry = Object.freeze({ accessLog: false, tracing: undefined });

/**
 * An access log to stdout in Envoy's default format (`envoy.access_loggers.stream`, no
 * `log_format`): the HCM's and `tcp_proxy`'s when MeshConfig turns it on, and the bootstrap's
 * admin and probe listeners'.
 */
export const STDOUT_ACCESS_LOG: readonly AccessLog[] = Object.freeze([
  Object.freeze({ name: 'envoy.access_loggers.stream', typed_config: Object.freeze(typedConfig(ExtensionType.StdoutAccessLog, {})) }),
]);

/** The `access_log` field of an HCM or `tcp_proxy` (none when off). */
export function accessLogFields(telemetry: ListenerTelemetry): { access_log?: AccessLog[] } {
  return telemetry.accessLog ? { access_log: STDOUT_ACCESS_LOG as AccessLog[] } : {};
}

/**
 * The HCM's `tracing` field (none when off): the Zipkin tracer (`envoy.tracers.zipkin`) sending
 * JSON v2 spans to {@link TRACING_CLUSTER} at the configured endpoint, sampling
 * `random_sampling` percent of requests (Envoy `HttpConnectionManager.Tracing`, `config.trace.v3.ZipkinConfig`).
 */
export function tracingFields(telemetry: ListenerTelemetry): { tracing?: object } {
  const { tracing } = telemetry;
  if (tracing === undefined) return {};
  return {
    tracing: {
      random_sampling: { value: tracing.samplingPercent },
      provider: {
        name: 'envoy.tracers.zipkin',
        typed_config: typedConfig(ExtensionType.ZipkinConfig, {
          collector_cluster: TRACING_CLUSTER,
          collector_endpoint: tracing.endpoint,
          collector_endpoint_version: 'HTTP_JSON',
          collector_hostname: tracing.address,
        }),
      },
    },
  };
}

/**
 * {@link TRACING_CLUSTER}: the collector at `address:port`, STATIC for an IP address, STRICT_DNS
 * for a host name (resolved to IPv4 addresses).
 */
export function tracingCluster(tracing: TracingSettings): Cluster {
  const ip = tracing.addressKind === 'ip';
  return {
    name: TRACING_CLUSTER,
    alt_stat_name: TRACING_CLUSTER,
    type: ip ? 'STATIC' : 'STRICT_DNS',
    ...(ip ? {} : { dns_lookup_family: 'V4_ONLY' }),
    lb_policy: 'ROUND_ROBIN',
    connect_timeout: durationMs(TRACING_CONNECT_TIMEOUT_MS),
    load_assignment: {
      cluster_name: TRACING_CLUSTER,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: tracing.address, port_value: tracing.port } } } }] }],
    },
  };
}
