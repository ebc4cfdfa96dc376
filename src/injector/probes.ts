/**
 * Health-probe rewriting of an injected pod, as OSM's injector does it: once the pod's inbound
 * TCP goes to Envoy, the kubelet's probes to the application's ports would meet Envoy's mTLS
 * inbound listener and fail. So each container's liveness, readiness and startup probe is
 * pointed at a port of Envoy's that the interception rules never redirect (15901, 15902, 15903;
 * see {@link NEVER_REDIRECTED_INBOUND_PORTS}), on a path naming the container, and Envoy routes
 * it to the original port and path on 127.0.0.1. A `tcpSocket` probe becomes an `httpGet` of
 * `/osm-healthcheck` on 15904 with the header `Original-Tcp-Port` (answered by the
 * `osm-healthcheck` container, `trellis healthcheck`). An HTTPS `httpGet` probe keeps its
 * path and is passed through as TLS (a `tcp_proxy` chain), a gRPC probe is routed by HTTP/2.
 *
 * The listeners and clusters that serve the rewritten probes ({@link probeResources}) carry
 * OSM's names (`liveness_listener`, `<container>_liveness_cluster`, …) and go in the pod's
 * bootstrap as static resources, as OSM does: they depend on the pod's own spec, which only the
 * injector sees before the pod runs (the controller sees the rewritten spec).
 *
 * Pure functions of the pod; no I/O.
 */
import type { V1Container, V1Pod, V1Probe } from '@kubernetes/client-node';
import { STDOUT_ACCESS_LOG } from '../envoy/telemetry.js';
import { ExtensionType, typedConfig } from '../envoy/typed-config.js';
import { InjectionRefusal } from './refusal.js';

/** The three probe kinds of a container. */
export type ProbeKind = 'liveness' | 'readiness' | 'startup';

/** Envoy's probe ports and the path prefixes of the rewritten probes (OSM's constants). */
export const PROBE_PORTS: Readonly<Record<ProbeKind, number>> = { liveness: 15901, readiness: 15902, startup: 15903 };
/** Path prefix of each rewritten HTTP probe: `<prefix>/<container>`. */
export const PROBE_PATHS: Readonly<Record<ProbeKind, string>> = {
  liveness: '/osm-liveness-probe',
  readiness: '/osm-readiness-probe',
  startup: '/osm-startup-probe',
};
/** Port of the `osm-healthcheck` container that answers rewritten `tcpSocket` probes. */
export const HEALTHCHECK_PORT = 15904;
/** Path of the rewritten `tcpSocket` probes. */
export const HEALTHCHECK_PATH = '/osm-healthcheck';
/** Header of a rewritten `tcpSocket` probe holding the original port. */
export const ORIGINAL_TCP_PORT_HEADER = 'Original-Tcp-Port';

/** How a container's probe was served before the rewrite. */
export interface OriginalProbe {
  readonly kind: ProbeKind;
  readonly container: string;
  /** `http` (httpGet over HTTP), `https` (httpGet over HTTPS), `tcp` (tcpSocket), `grpc`. */
  readonly protocol: 'http' | 'https' | 'tcp' | 'grpc';
  /** The original port, a named port resolved through the container's ports. */
  readonly port: number;
  /** The original `httpGet.path` (http only; `/` when empty). */
  readonly path?: string;
  /** `timeoutSeconds` of the probe (Kubernetes' default 1). */
  readonly timeoutSeconds: number;
}

const PROBE_FIELDS: Readonly<Record<ProbeKind, 'livenessProbe' | 'readinessProbe' | 'startupProbe'>> = {
  liveness: 'livenessProbe',
  readiness: 'readinessProbe',
  startup: 'startupProbe',
};

function resolvePort(port: unknown, container: V1Container, field: string): number {
  if (typeof port === 'number') {
    if (Number.isInteger(port) && port >= 1 && port <= 65535) return port;
  } else if (typeof port === 'string') {
    if (/^\d+$/.test(port)) return resolvePort(Number(port), container, field);
    const named = container.ports?.find((p) => p.name === port)?.containerPort;
    if (named !== undefined) return resolvePort(named, container, field);
    throw new InjectionRefusal(field, `no port named ${JSON.stringify(port)} in the container's ports`);
  }
  throw new InjectionRefusal(field, `${JSON.stringify(port)} is not a port (1 to 65535, or the name of a container port)`);
}

/** Rewrites one probe in place; returns what it was, or undefined for an `exec` probe (left alone). */
function rewriteProbe(probe: V1Probe, kind: ProbeKind, container: V1Container, field: string): OriginalProbe | undefined {
  const timeoutSeconds = probe.timeoutSeconds ?? 1;
  const base = { kind, container: container.name, timeoutSeconds };
  if (probe.httpGet) {
    const port = resolvePort(probe.httpGet.port, container, `${field}.httpGet.port`);
    const scheme = (probe.httpGet.scheme ?? 'HTTP').toUpperCase();
    if (scheme !== 'HTTP' && scheme !== 'HTTPS') throw new InjectionRefusal(`${field}.httpGet.scheme`, `${JSON.stringify(probe.httpGet.scheme)} is neither HTTP nor HTTPS`);
    const original: OriginalProbe = scheme === 'HTTP' ? { ...base, protocol: 'http', port, path: probe.httpGet.path || '/' } : { ...base, protocol: 'https', port };
    if (scheme === 'HTTP') probe.httpGet.path = `${PROBE_PATHS[kind]}/${container.name}`;
    probe.httpGet.port = PROBE_PORTS[kind];
    return original;
  }
  if (probe.tcpSocket) {
    const port = resolvePort(probe.tcpSocket.port, container, `${field}.tcpSocket.port`);
    probe.httpGet = { path: HEALTHCHECK_PATH, port: HEALTHCHECK_PORT, httpHeaders: [{ name: ORIGINAL_TCP_PORT_HEADER, value: String(port) }] };
    delete probe.tcpSocket;
    return { ...base, protocol: 'tcp', port };
  }
  if (probe.grpc) {
    const port = resolvePort(probe.grpc.port, container, `${field}.grpc.port`);
    probe.grpc.port = PROBE_PORTS[kind];
    return { ...base, protocol: 'grpc', port };
  }
  return undefined;
}

/**
 * Rewrites the liveness, readiness and startup probes of every container of `pod` in place (see
 * the module comment) and returns the originals, in container order.
 * @throws InjectionRefusal naming the field when a probe's port is neither a port number nor a
 *   named port of its container, when an HTTP scheme is unknown, or when two containers have a
 *   gRPC (or HTTPS) probe of the same kind (Envoy could not tell them apart on one port).
 */
export function rewriteProbes(pod: V1Pod): OriginalProbe[] {
  const originals: OriginalProbe[] = [];
  const byPort = new Map<string, string>();
  (pod.spec?.containers ?? []).forEach((container, i) => {
    for (const kind of ['liveness', 'readiness', 'startup'] as const) {
      const probe = container[PROBE_FIELDS[kind]];
      if (!probe) continue;
      const field = `spec.containers[${i}].${PROBE_FIELDS[kind]}`;
      const original = rewriteProbe(probe, kind, container, field);
      if (!original) continue;
      if (original.protocol === 'grpc' || original.protocol === 'https') {
        const other = byPort.get(kind);
        if (other !== undefined) throw new InjectionRefusal(field, `${other} already has a gRPC or HTTPS ${kind} probe: Envoy's ${kind} port ${PROBE_PORTS[kind]} can pass through only one`);
        byPort.set(kind, field);
      }
      originals.push(original);
    }
  });
  return originals;
}

/**
 * The pod annotation holding its original probes (JSON, {@link OriginalProbe}s) once injected: a
 * copy of an injected pod (`kubectl debug --copy-to`, a backup restored) is injected again with
 * its probes already rewritten, and its new bootstrap serves them from this.
 */
export const ORIGINAL_PROBES_ANNOTATION = 'injector.trellis.dev/original-probes';

const PROTOCOLS: readonly OriginalProbe['protocol'][] = ['http', 'https', 'tcp', 'grpc'];

/**
 * The original probes an injected pod carries in {@link ORIGINAL_PROBES_ANNOTATION} (none when it
 * has no such annotation: injected before it was written).
 * @throws InjectionRefusal naming the annotation when it is not a list of probes of the pod's
 *   containers (kind, protocol, port 1 to 65535, an HTTP path starting with `/`, timeout).
 */
export function recordedProbes(pod: V1Pod): OriginalProbe[] {
  const text = pod.metadata?.annotations?.[ORIGINAL_PROBES_ANNOTATION];
  if (text === undefined) return [];
  const field = `metadata.annotations["${ORIGINAL_PROBES_ANNOTATION}"]`;
  let list: unknown;
  try {
    list = JSON.parse(text);
  } catch {
    throw new InjectionRefusal(field, 'not JSON');
  }
  if (!Array.isArray(list)) throw new InjectionRefusal(field, 'not a JSON list of probes');
  const containers = new Set((pod.spec?.containers ?? []).map((c) => c.name));
  return list.map((p: Partial<Record<keyof OriginalProbe, unknown>>, i): OriginalProbe => {
    const ok =
      typeof p === 'object' &&
      p !== null &&
      typeof p.kind === 'string' &&
      Object.hasOwn(PROBE_PORTS, p.kind) &&
      typeof p.container === 'string' &&
      containers.has(p.container) &&
      PROTOCOLS.includes(p.protocol as OriginalProbe['protocol']) &&
      Number.isInteger(p.port) &&
      (p.port as number) >= 1 &&
      (p.port as number) <= 65535 &&
      Number.isInteger(p.timeoutSeconds) &&
      (p.timeoutSeconds as number) >= 1 &&
      (p.protocol === 'http' ? typeof p.path === 'string' && /^\/[^\x00-\x1f\x7f]*$/.test(p.path) : p.path === undefined);
    if (!ok) throw new InjectionRefusal(`${field}[${i}]`, 'not a probe of one of the pod\'s containers (kind, container, protocol, port, path, timeoutSeconds)');
    const { kind, container, protocol, port, path, timeoutSeconds } = p as OriginalProbe;
    return { kind, container, protocol, port, timeoutSeconds, ...(path !== undefined ? { path } : {}) };
  });
}

/** The cluster a probe is routed to: `<container>_<kind>_cluster`, STATIC 127.0.0.1:<port> (OSM's names). */
function probeCluster(probe: OriginalProbe): Record<string, unknown> {
  const name = `${probe.container}_${probe.kind}_cluster`;
  return {
    name,
    type: 'STATIC',
    connect_timeout: '1s',
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: probe.port } } } }] }],
    },
    ...(probe.protocol === 'grpc'
      ? {
          typed_extension_protocol_options: {
            [ExtensionType.HttpProtocolOptions]: typedConfig(ExtensionType.HttpProtocolOptions, { explicit_http_config: { http2_protocol_options: {} } }),
          },
        }
      : {}),
  };
}

/** An HTTP connection manager filter routing `routes` (a `local_route` with one `*` virtual host). */
export function httpConnectionManager(statPrefix: string, routes: readonly Record<string, unknown>[]): Record<string, unknown> {
  return {
    name: 'http_connection_manager',
    typed_config: typedConfig(ExtensionType.HttpConnectionManager, {
      stat_prefix: statPrefix,
      codec_type: 'AUTO',
      access_log: STDOUT_ACCESS_LOG,
      route_config: { name: 'local_route', virtual_hosts: [{ name: 'local_service', domains: ['*'], routes }] },
      http_filters: [{ name: 'http_router', typed_config: typedConfig(ExtensionType.Router, {}) }],
    }),
  };
}

/** A static listener on 0.0.0.0:`port`. */
export function staticListener(name: string, port: number, filterChains: readonly Record<string, unknown>[], extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name, address: { socket_address: { address: '0.0.0.0', port_value: port } }, filter_chains: filterChains, ...extra };
}

/**
 * The Envoy listeners and clusters (bootstrap `static_resources`, Envoy's v3 JSON) serving the
 * rewritten probes: per probe kind in use, a listener `<kind>_listener` on its port whose HTTP
 * connection manager (`health_probes_http`) routes `<prefix>/<container>` to
 * `<container>_<kind>_cluster` with the original path as `prefix_rewrite` and the probe's
 * timeout, a gRPC probe's `/grpc.health.v1.Health/` to its HTTP/2 cluster, and an HTTPS probe's
 * TLS (a `tls_inspector`-matched `tcp_proxy` chain, `health_probes_https`) to its cluster. TCP
 * probes need none (the healthcheck container dials the port itself).
 */
export function probeResources(probes: readonly OriginalProbe[]): { listeners: Record<string, unknown>[]; clusters: Record<string, unknown>[] } {
  const listeners: Record<string, unknown>[] = [];
  const clusters: Record<string, unknown>[] = [];
  for (const kind of ['liveness', 'readiness', 'startup'] as const) {
    const ofKind = probes.filter((p) => p.kind === kind && p.protocol !== 'tcp');
    if (ofKind.length === 0) continue;
    const routes: Record<string, unknown>[] = [];
    let tlsChain: Record<string, unknown> | undefined;
    for (const probe of ofKind) {
      const cluster = probeCluster(probe);
      clusters.push(cluster);
      const timeout = `${probe.timeoutSeconds}s`;
      if (probe.protocol === 'http') {
        routes.push({ match: { prefix: `${PROBE_PATHS[kind]}/${probe.container}` }, route: { cluster: cluster.name, prefix_rewrite: probe.path, timeout } });
      } else if (probe.protocol === 'grpc') {
        routes.push({ match: { prefix: '/grpc.health.v1.Health/' }, route: { cluster: cluster.name, timeout } });
      } else {
        tlsChain = {
          filter_chain_match: { transport_protocol: 'tls' },
          filters: [{ name: 'tcp_proxy', typed_config: typedConfig(ExtensionType.TcpProxy, { stat_prefix: 'health_probes_https', cluster: cluster.name, access_log: STDOUT_ACCESS_LOG }) }],
        };
      }
    }
    const chains = [...(tlsChain ? [tlsChain] : []), ...(routes.length > 0 ? [{ filters: [httpConnectionManager('health_probes_http', routes)] }] : [])];
    const inspector = tlsChain
      ? { listener_filters: [{ name: 'envoy.filters.listener.tls_inspector', typed_config: typedConfig(ExtensionType.TlsInspector, {}) }] }
      : {};
    listeners.push(staticListener(`${kind}_listener`, PROBE_PORTS[kind], chains, inspector));
  }
  return { listeners, clusters };
}
