import type { ServiceIdentity } from '../proxy/types.js';

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
  /** Validity of service certificates, in seconds. */
  readonly serviceCertValiditySeconds: number;
}

/**
 * An immutable, indexed view of the mesh built once per push from the store (the role of
 * OSM's MeshCatalog and Istio's PushContext). Generators read only this and the Proxy.
 */
export interface MeshSnapshot {
  /** Monotonic number of the snapshot, for logs. */
  readonly generation: number;
  readonly meshName: string;
  readonly settings: MeshSettings;
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
}
