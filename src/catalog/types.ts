import type { ServiceIdentity } from '../proxy/types.js';
import type { RetryPolicy, UpstreamTrafficSettingPolicy } from './upstream-policies.js';

export type { LocalRateLimit, RetryPolicy, UpstreamTrafficSettingPolicy } from './upstream-policies.js';

/** Application protocol of a service port (OSM's `appProtocol` values). */
export type AppProtocol = 'http' | 'tcp' | 'grpc' | 'tcp-server-first';

/**
 * One port of a Kubernetes Service in a monitored namespace (OSM's `MeshService`).
 * Its cluster name is `<namespace>/<name>|<targetPort>`.
 */
export interface MeshService {
  readonly name: string;
  readonly namespace: string;
  /** The Service's port (what clients dial). */
  readonly port: number;
  /** The port the workloads listen on (the endpoints' port); equals `port` if unset. */
  readonly targetPort: number;
  /** The Service port's name, if any. */
  readonly portName: string | undefined;
  readonly protocol: AppProtocol;
  /** ClusterIPs of the Service; empty for a headless Service. */
  readonly clusterIPs: readonly string[];
  /** True for a headless Service (`clusterIP: None`). */
  readonly headless: boolean;
}

/** An endpoint of a MeshService: an IP literal and the port it listens on. */
export interface MeshEndpoint {
  readonly ip: string;
  readonly port: number;
}

/** One HTTP match of an HTTPRouteGroup as it applies to a destination (SMI specs v1alpha4 `HTTPMatch`). */
export interface HttpRouteMatch {
  /** `<namespace>/<HTTPRouteGroup name>/<match name>`, for stat and route names. */
  readonly name: string;
  /** RE2 path regex; `undefined` matches every path. */
  readonly pathRegex: string | undefined;
  /** HTTP methods; empty means any method (SMI `*`). */
  readonly methods: readonly string[];
  /** Header name → RE2 regex the value must match. */
  readonly headers: Readonly<Record<string, string>>;
}

/**
 * What one TrafficTarget allows, resolved: sources may reach the destination identity's
 * services with these HTTP matches (HTTPRouteGroup rules) or on these TCP ports (TCPRoute rules).
 */
export interface TrafficTargetPolicy {
  /** `<namespace>/<name>` of the TrafficTarget. */
  readonly name: string;
  readonly destination: ServiceIdentity;
  readonly sources: readonly ServiceIdentity[];
  /** HTTP matches allowed; empty when the target has no HTTPRouteGroup rule. */
  readonly httpMatches: readonly HttpRouteMatch[];
  /**
   * TCP ports allowed by TCPRoute rules: `undefined` when there is no TCPRoute rule,
   * `'any'` when a TCPRoute lists no ports.
   */
  readonly tcpPorts: readonly number[] | 'any' | undefined;
}

/** A TrafficSplit, resolved: the apex service and its weighted backends in the same namespace. */
export interface TrafficSplitPolicy {
  /** `<namespace>/<name>` of the TrafficSplit. */
  readonly name: string;
  readonly namespace: string;
  /** Name of the apex (root) service. */
  readonly service: string;
  /** Backends with weight > 0, by service name, in the order given. */
  readonly backends: readonly { readonly service: string; readonly weight: number }[];
}

/** Mesh-wide settings from the MeshConfig (OSM defaults when there is none). */
export interface MeshSettings {
  readonly permissiveTrafficPolicyMode: boolean;
  readonly enableEgress: boolean;
  /** MeshConfig `spec.featureFlags.enableRetryPolicy` (OSM v1.2: false unless set): Retry policies apply only when true. */
  readonly enableRetryPolicy: boolean;
  /** MeshConfig `spec.featureFlags.enableEgressPolicy` (OSM v1.2 chart: true unless set false): Egress policies apply only when true. */
  readonly enableEgressPolicy: boolean;
  /** Validity of service certificates, in seconds. */
  readonly serviceCertValiditySeconds: number;
  /** TLS versions of the sidecars' mTLS (`TLSv1_2`, …; MeshConfig `sidecar.tlsMinProtocolVersion`/`tlsMaxProtocolVersion`). */
  readonly tlsMinProtocolVersion: TlsVersion;
  readonly tlsMaxProtocolVersion: TlsVersion;
  /** Cipher suites for TLS 1.0–1.2 (MeshConfig `sidecar.cipherSuites`); empty = Envoy's defaults. */
  readonly cipherSuites: readonly string[];
  /** ECDH curves (MeshConfig `sidecar.ecdhCurves`); empty = Envoy's defaults. */
  readonly ecdhCurves: readonly string[];
  /** Resync interval from MeshConfig `sidecar.configResyncInterval`, in seconds; undefined when unset. */
  readonly configResyncIntervalSeconds: number | undefined;
  /**
   * Access logs (Envoy's default format, to stdout) on the sidecars' inbound and outbound HTTP
   * listeners and their `tcp_proxy` chains: MeshConfig `spec.observability.enableAccessLog`
   * (a Trellis field: OSM v1.2 logs always), off unless true.
   */
  readonly accessLog: boolean;
  /** Zipkin tracing from MeshConfig `spec.observability.tracing` when `enable` is true and it is valid; undefined = off. */
  readonly tracing: TracingSettings | undefined;
}

/** Where and how much the sidecars trace (MeshConfig `spec.observability.tracing`, OSM v1.2 plus `sampledFraction`). */
export interface TracingSettings {
  /** Host name or IPv4 address of the Zipkin collector (`address`). */
  readonly address: string;
  /** Whether `address` is an IP address (`ip`: a STATIC cluster) or a host name (`dns`: STRICT_DNS). */
  readonly addressKind: 'ip' | 'dns';
  /** Its port (`port`, 1–65535; 9411 unless set). */
  readonly port: number;
  /** The HTTP path spans are POSTed to (`endpoint`; `/api/v2/spans` unless set). */
  readonly endpoint: string;
  /** Share of requests traced, in percent 0–100 (`sampledFraction` 0–1 × 100, as osm-edge names it; 100 unless set). */
  readonly samplingPercent: number;
}

/** Envoy `TlsParameters.TlsProtocol` names accepted in MeshConfig. */
export type TlsVersion = 'TLS_AUTO' | 'TLSv1_0' | 'TLSv1_1' | 'TLSv1_2' | 'TLSv1_3';

/**
 * An immutable, indexed view of the mesh built once per push from the store (the role of
 * OSM's MeshCatalog and Istio's PushContext). Generators read only this and the Proxy.
 */
export interface MeshSnapshot {
  /** Monotonic number of the snapshot, for logs. */
  readonly generation: number;
  readonly meshName: string;
  readonly settings: MeshSettings;
  /**
   * The MeshConfig `settings` come from (`<namespace>/<name>`); `deleted` when it is gone and
   * its last settings stay in force; `unreadable` (the source's error) when it could not be
   * loaded since the controller started: `settings` are OSM's defaults with permissive mode off
   * then; `misnamed` when it does not exist and a MeshConfig of another name or namespace did
   * since the controller started (a typo): the same closed settings, until it exists. Undefined
   * when the controller has seen none at all since it started: `settings` are OSM's defaults then.
   */
  readonly meshConfig?: { readonly name: string; readonly deleted: boolean; readonly unreadable?: string; readonly misnamed?: boolean };
  /** Names of the namespaces monitored by this mesh. */
  readonly namespaces: ReadonlySet<string>;
  /** Every MeshService, sorted by namespace, name, port. */
  readonly services: readonly MeshService[];
  /** Endpoints by cluster name `<ns>/<svc>|<targetPort>`, sorted by IP; absent = none. */
  readonly endpoints: ReadonlyMap<string, readonly MeshEndpoint[]>;
  /** Service identities whose workloads back a service, by `<ns>/<svc>`. */
  readonly identitiesByService: ReadonlyMap<string, readonly ServiceIdentity[]>;
  /** Services (`<ns>/<svc>` keys) whose workloads run as an identity. */
  readonly servicesByIdentity: ReadonlyMap<ServiceIdentity, readonly string[]>;
  readonly trafficTargets: readonly TrafficTargetPolicy[];
  readonly trafficSplits: readonly TrafficSplitPolicy[];
  /** Retry policies (OSM `Retry`). */
  readonly retryPolicies: readonly RetryPolicy[];
  /** Connection and rate limits per upstream host (OSM `UpstreamTrafficSetting`). */
  readonly upstreamTrafficSettings: readonly UpstreamTrafficSettingPolicy[];
  /** One entry per backend of every valid IngressBackend (OSM v1.2), sorted by policy name. */
  readonly ingressBackends: readonly IngressBackendPolicy[];
  /** Valid Egress policies (OSM v1.2), sorted by name. */
  readonly egressPolicies: readonly EgressPolicy[];
  /**
   * `Kind <namespace>/<name>` of the policies in force that are applied in part (they have
   * problems of their own, e.g. a match that does not exist): a build given this snapshot as
   * `previous` keeps only valid versions (`last-good.ts`). No generator reads it.
   */
  readonly partialPolicies: ReadonlySet<string>;
  /** Lookup tables over `services`, `trafficTargets` and `trafficSplits`, built with the snapshot (read them through `traffic-policy.ts`). */
  readonly index: MeshSnapshotIndex;
}

/**
 * Lookup tables over one MeshSnapshot's services and policies, built once with the snapshot
 * (`traffic-policy.ts` `indexMeshSnapshot`), so that a per-proxy query is proportional to what
 * the proxy reaches, not to the mesh's size. It names the lists it was built from: a copy of a
 * snapshot with other lists is not answered from it.
 */
export interface MeshSnapshotIndex {
  /** The lists indexed (the very arrays of the snapshot). */
  readonly services: readonly MeshService[];
  readonly trafficTargets: readonly TrafficTargetPolicy[];
  readonly trafficSplits: readonly TrafficSplitPolicy[];
  /** TrafficTargets by source identity. */
  readonly targetsBySource: ReadonlyMap<ServiceIdentity, readonly TrafficTargetPolicy[]>;
  /** TrafficTargets by destination identity. */
  readonly targetsByDestination: ReadonlyMap<ServiceIdentity, readonly TrafficTargetPolicy[]>;
  /** MeshServices (every port) by `<ns>/<svc>`, in snapshot order. */
  readonly servicesByKey: ReadonlyMap<string, readonly MeshService[]>;
  /** Position of each MeshService in `services`, to keep results in snapshot order. */
  readonly order: ReadonlyMap<MeshService, number>;
  /** TrafficSplits by apex `<ns>/<svc>` (the first of an apex: the catalog reports later ones as conflicts). */
  readonly splitsByApex: ReadonlyMap<string, TrafficSplitPolicy>;
}

/**
 * How one Kubernetes Ingress path (networking.k8s.io/v1 `HTTPIngressPath`) matches, resolved:
 * `exact` (pathType `Exact`), `prefix` (segment-wise, pathType `Prefix`; `/` matches every
 * path), `regex` (RE2, pathType `ImplementationSpecific` when the path is a regex) or
 * `string-prefix` (a plain string prefix, `ImplementationSpecific` otherwise).
 */
export interface IngressPathMatch {
  readonly kind: 'exact' | 'prefix' | 'regex' | 'string-prefix';
  /** The path, without a trailing `/` for `prefix` (except `/` itself). */
  readonly path: string;
}

/** One route to an ingress backend taken from an Ingress rule: virtual host and path match. */
export interface IngressRoute {
  /** `<ns>/<Ingress name>` the route comes from. */
  readonly ingress: string;
  /** The rule's `host` (may be `*.example.com`); undefined = any host. */
  readonly host: string | undefined;
  readonly match: IngressPathMatch;
}

/**
 * One backend of an OSM policy.openservicemesh.io/v1alpha1 IngressBackend, resolved: the
 * MeshService whose target port it names, the sources allowed in and how, and the routes the
 * Ingress objects pointing at that service give (OSM v1.2 `IngressTrafficMatch` + ingress
 * routes).
 */
export interface IngressBackendPolicy {
  /** `<namespace>/<name>` of the IngressBackend. */
  readonly name: string;
  /** The backend service port; `service.targetPort` is the IngressBackend's `port.number`. */
  readonly service: MeshService;
  readonly protocol: 'http' | 'https';
  /** `tls.skipClientCertValidation` (https only): accept any client, or none, without a certificate. */
  readonly skipClientCertValidation: boolean;
  /** `tls.sniHosts` (https only): the SNI the filter chain matches; empty = any. */
  readonly sniHosts: readonly string[];
  /**
   * Source CIDRs (`IPRange` sources, and `<ip>/32` or `/128` of each endpoint of `Service`
   * sources), deduplicated, sorted; empty = any source address.
   */
  readonly sourceIpRanges: readonly string[];
  /** `AuthenticatedPrincipal` source names (a client certificate SAN), sorted; used for https. */
  readonly principals: readonly string[];
  /**
   * Routes from the Ingress objects whose paths (or default backend) name this service port;
   * empty = no Ingress names it, every path is routed (OSM v1.2's wildcard ingress route).
   */
  readonly routes: readonly IngressRoute[];
}

/** One port of an Egress policy: number and protocol (OSM v1.2 `PortSpec`). */
export interface EgressPort {
  readonly number: number;
  readonly protocol: 'http' | 'https' | 'tcp' | 'tcp-server-first';
}

/**
 * An OSM policy.openservicemesh.io/v1alpha1 Egress, resolved: its source identities may reach
 * `hosts` and/or `ipRanges` on `ports`, HTTP restricted to `httpMatches`.
 */
export interface EgressPolicy {
  /** `<namespace>/<name>` of the Egress. */
  readonly name: string;
  readonly sources: readonly ServiceIdentity[];
  /** Host names (may be `*.example.com`), deduplicated, in the order given. */
  readonly hosts: readonly string[];
  /** Destination CIDRs (`ipAddresses`), deduplicated, in the order given; empty = any address. */
  readonly ipRanges: readonly string[];
  readonly ports: readonly EgressPort[];
  /** HTTP matches from the referenced HTTPRouteGroups; empty = every request (`prefix: /`). */
  readonly httpMatches: readonly HttpRouteMatch[];
  /** Names of UpstreamTrafficSettings named in `matches` (same namespace), for the CDS of the egress clusters. */
  readonly upstreamTrafficSettings: readonly string[];
}
