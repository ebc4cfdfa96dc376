import type { Cluster } from '../../api/generated/envoy/config/cluster/v3/Cluster.js';
import { clusterName, localClusterName, serviceKey } from '../../catalog/names.js';
import { inboundServices } from '../../catalog/traffic-policy.js';
import type { MeshService, MeshSettings, UpstreamTrafficSettingPolicy } from '../../catalog/types.js';
import type { ServiceIdentity } from '../../proxy/types.js';
import type { GenerationContext, ProxyProfile } from '../context.js';
import type { NamedResource } from '../resource.js';
import { sanMatchers, tlsTransportSocket, upstreamTlsContext } from '../tls.js';
import { ADS_CONFIG_SOURCE, durationMs } from '../typed-config.js';
import { generateEgressClusters } from './egress.js';
import { httpProtocolOptions, upstreamSettingFields, upstreamTrafficSettingFor, type UpstreamHttp } from '../upstream-settings.js';
import { byName } from '../../util/order.js';
import { meshChangeKind, type PushChange } from '../push-change.js';
import { TRACING_CLUSTER, tracingCluster } from '../telemetry.js';

/** Name of the cluster that points at Envoy's own admin port for Prometheus scraping (OSM). */
export const ENVOY_METRICS_CLUSTER = 'envoy-metrics-cluster';
/** Name of the original-destination cluster for egress passthrough (OSM). */
export const PASSTHROUGH_OUTBOUND_CLUSTER = 'passthrough-outbound';
/** Envoy's admin port, the target of {@link ENVOY_METRICS_CLUSTER}. */
export const ENVOY_ADMIN_PORT = 15000;
/** Connect timeout of upstream clusters, in ms (OSM's default 1 s). */
export const CONNECT_TIMEOUT_MS = 1000;

/** The upstream HTTP protocol of a service's clusters: HTTP/2 for gRPC, the downstream's for HTTP, none for TCP. */
function upstreamHttp(svc: MeshService): UpstreamHttp | undefined {
  return svc.protocol === 'grpc' ? 'http2' : svc.protocol === 'http' ? 'downstream' : undefined;
}

/**
 * The upstream cluster of a MeshService, the same for every proxy that reaches it: EDS over
 * ADS, mTLS with the proxy's own service certificate from SDS (`service-cert`, one name for every
 * proxy) and the mesh root from SDS combined with the service's identities as SANs
 * ({@link upstreamTlsContext}), SNI = FQDN, and the service's UpstreamTrafficSetting as circuit
 * breakers, connect timeout and max requests per connection (Envoy `config.cluster.v3.Cluster`;
 * OSM v1.2 `getUpstreamServiceCluster`). One shared object per service (it names no identity), so
 * every proxy's snapshot holds the very same encoded bytes, encoded and checked once. Given as
 * two parts (`NamedResource.parts`): all but the transport socket, which reads no MeshConfig
 * setting, and the transport socket, so that a MeshConfig change (its TLS settings) makes a new
 * socket part only, and the rest of the cluster is not checked and encoded again.
 */
export function upstreamCluster(context: GenerationContext, svc: MeshService): NamedResource<Cluster> {
  const name = clusterName(svc);
  const { snapshot } = context;
  // The identities behind the service are the SANs it accepts.
  const backing = snapshot.identitiesByService.get(serviceKey(svc)) ?? [];
  const sans = context.shared('SubjectAltNameMatchers', name, [backing], sanMatchers);
  const base = context.shared('UpstreamClusterBase', name, [svc, upstreamTrafficSettingFor(snapshot, svc)], upstreamClusterBase);
  const socket = context.shared('UpstreamClusterSocket', name, [svc, snapshot.settings, backing, sans], upstreamClusterSocket);
  return { name, resource: context.shared('Cluster', name, [base, socket], (b: Cluster, s: Cluster): Cluster => ({ ...b, ...s })), parts: [base, socket] };
}

/** All of a service's upstream cluster but its transport socket, from its inputs alone (see {@link upstreamCluster}). */
function upstreamClusterBase(svc: MeshService, setting: UpstreamTrafficSettingPolicy | undefined): Cluster {
  const name = clusterName(svc);
  return {
    name,
    alt_stat_name: name,
    type: 'EDS',
    eds_cluster_config: { eds_config: ADS_CONFIG_SOURCE, service_name: name },
    lb_policy: 'ROUND_ROBIN',
    ...upstreamSettingFields(setting, CONNECT_TIMEOUT_MS, upstreamHttp(svc)),
  };
}

/** The transport socket of a service's upstream cluster, as a Cluster part, from its inputs alone (see {@link upstreamCluster}). */
function upstreamClusterSocket(svc: MeshService, settings: MeshSettings, backing: readonly ServiceIdentity[], sans: ReturnType<typeof sanMatchers>): Cluster {
  return { transport_socket: tlsTransportSocket(upstreamTlsContext(svc, settings, backing, sans), true) };
}

function staticCluster(name: string, port: number, svc?: MeshService): Cluster {
  const upstream = svc ? upstreamHttp(svc) : undefined;
  const options = upstream ? httpProtocolOptions(upstream) : undefined;
  return {
    name,
    alt_stat_name: name,
    type: 'STATIC',
    connect_timeout: durationMs(CONNECT_TIMEOUT_MS),
    load_assignment: {
      cluster_name: name,
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: port } } } }] }],
    },
    ...(options ? { typed_extension_protocol_options: options } : {}),
  };
}

/**
 * The local cluster of a MeshService the proxy serves: STATIC, 127.0.0.1:targetPort, named
 * `<ns>/<svc>|<targetPort>|local` (OSM v1.2 `getLocalServiceCluster`).
 */
export function localCluster(svc: MeshService): Cluster {
  return staticCluster(localClusterName(svc), svc.targetPort, svc);
}

/** `envoy-metrics-cluster`: STATIC, Envoy's own admin port on 127.0.0.1 (OSM). */
function metricsCluster(): Cluster {
  return staticCluster(ENVOY_METRICS_CLUSTER, ENVOY_ADMIN_PORT);
}

/**
 * CDS for one proxy: an upstream cluster per service it may reach (and per TrafficSplit
 * backend), a local cluster per service it serves, `envoy-metrics-cluster`, `envoy-tracing-cluster`
 * when tracing is on ({@link tracingCluster}), and
 * `passthrough-outbound` when egress is on, the Egress policies' clusters
 * ({@link generateEgressClusters}). Names are unique; sorted by name.
 */
export function generateClusters(context: GenerationContext, profile: ProxyProfile): NamedResource<Cluster>[] {
  const clusters = new Map<string, NamedResource<Cluster>>();
  for (const c of generateUpstreamClusters(context, profile)) clusters.set(c.name, c);
  for (const c of generateOwnClusters(context, profile)) clusters.set(c.name, c);
  return [...clusters.values()].sort(byName);
}

/**
 * The upstream clusters of a proxy ({@link upstreamCluster} of each upstream of its outbound
 * view, sorted by name): the same for every proxy with that view.
 */
export function generateUpstreamClusters(context: GenerationContext, profile: ProxyProfile): NamedResource<Cluster>[] {
  return context.outboundView(profile.identity).upstreams.map((svc) => upstreamCluster(context, svc));
}

/**
 * The clusters of a proxy that are not upstream clusters of its view: a local cluster per
 * service it serves, `envoy-metrics-cluster`, `envoy-tracing-cluster` when MeshConfig turns
 * tracing on, the Egress policies' clusters and `passthrough-outbound` when egress is on. {@link generateClusters} is these and
 * {@link generateUpstreamClusters}, one of these winning a name both have.
 */
export function generateOwnClusters(context: GenerationContext, profile: ProxyProfile): NamedResource<Cluster>[] {
  const { snapshot } = context;
  const clusters = new Map<string, NamedResource<Cluster>>();
  const add = (name: string, resource: Cluster): void => void clusters.set(name, { name, resource });
  for (const svc of inboundServices(snapshot, profile.identity)) add(localClusterName(svc), context.shared('Cluster', localClusterName(svc), [svc], localCluster));
  add(ENVOY_METRICS_CLUSTER, context.shared('Cluster', ENVOY_METRICS_CLUSTER, [], metricsCluster));
  if (snapshot.settings.tracing) add(TRACING_CLUSTER, context.shared('Cluster', TRACING_CLUSTER, [snapshot.settings.tracing], tracingCluster));
  for (const c of generateEgressClusters(context, profile)) add(c.name ?? '', c);
  if (snapshot.settings.enableEgress) {
    add(PASSTHROUGH_OUTBOUND_CLUSTER, {
      name: PASSTHROUGH_OUTBOUND_CLUSTER,
      alt_stat_name: PASSTHROUGH_OUTBOUND_CLUSTER,
      type: 'ORIGINAL_DST',
      lb_policy: 'CLUSTER_PROVIDED',
      connect_timeout: durationMs(CONNECT_TIMEOUT_MS),
    });
  }
  return [...clusters.values()];
}

/**
 * Whether `change` makes a sidecar's Clusters regenerate (Istio's `cdsNeedsPush` idea):
 * for any change but one that only moves endpoints (EDS), only re-weights TrafficSplits (RDS: the
 * same clusters are reached) or only rotates the certificate (SDS: clusters name the secret, not its content);
 * a change of MeshConfig's TLS settings alone is one (the upstream clusters' TLS contexts).
 */
export function clustersNeedPush(change: PushChange): boolean {
  const kind = meshChangeKind(change);
  return kind === 'tls-settings' || kind === 'other';
}
