/**
 * Kubernetes-shaped objects as the sources deliver them into the store. Only the fields
 * Trellis reads are typed; everything else is kept as it came. Field names and shapes follow
 * the Kubernetes API (core/v1, discovery.k8s.io/v1, apps/v1, networking.k8s.io/v1), SMI
 * (access.smi-spec.io/v1alpha3, specs.smi-spec.io/v1alpha4, split.smi-spec.io/v1alpha2) and
 * OSM's config.openservicemesh.io MeshConfig.
 */

/** `metadata` of every object. */
export interface ObjectMeta {
  name: string;
  namespace?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  uid?: string;
  resourceVersion?: string;
}

/** The kinds the store holds. Anything else is ignored by the sources. */
export const OBJECT_KINDS = [
  'Namespace',
  'Service',
  'Endpoints',
  'EndpointSlice',
  'Pod',
  'ServiceAccount',
  'Deployment',
  'TrafficTarget',
  'HTTPRouteGroup',
  'TCPRoute',
  'TrafficSplit',
  'MeshConfig',
  'Ingress',
  'IngressBackend',
  'Egress',
  'Retry',
  'UpstreamTrafficSetting',
] as const;

/** One of {@link OBJECT_KINDS}. */
export type ObjectKind = (typeof OBJECT_KINDS)[number];

/** Any object in the store: `apiVersion`, `kind`, `metadata`, and the rest untyped. */
export interface KubeObject {
  apiVersion: string;
  kind: ObjectKind;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

/** core/v1 Namespace. */
export interface Namespace extends KubeObject {
  kind: 'Namespace';
}

/** core/v1 ServicePort. `targetPort` may be a number or the name of a container port. */
export interface ServicePort {
  name?: string;
  port: number;
  targetPort?: number | string;
  protocol?: 'TCP' | 'UDP' | 'SCTP';
  appProtocol?: string;
}

/** core/v1 Service. `clusterIP: "None"` is a headless service. */
export interface Service extends KubeObject {
  kind: 'Service';
  spec: {
    selector?: Record<string, string>;
    ports?: ServicePort[];
    clusterIP?: string;
    clusterIPs?: string[];
    type?: string;
  };
}

/** core/v1 EndpointAddress. */
export interface EndpointAddress {
  ip: string;
  hostname?: string;
  targetRef?: { kind?: string; name?: string; namespace?: string };
}

/** core/v1 EndpointPort. */
export interface EndpointPort {
  name?: string;
  port: number;
  protocol?: string;
  appProtocol?: string;
}

/** core/v1 Endpoints: named after the Service they belong to. */
export interface Endpoints extends KubeObject {
  kind: 'Endpoints';
  subsets?: { addresses?: EndpointAddress[]; notReadyAddresses?: EndpointAddress[]; ports?: EndpointPort[] }[];
}

/** discovery.k8s.io/v1 EndpointSlice; its Service is named by the `kubernetes.io/service-name` label. */
export interface EndpointSlice extends KubeObject {
  kind: 'EndpointSlice';
  addressType?: 'IPv4' | 'IPv6' | 'FQDN';
  endpoints?: {
    addresses: string[];
    conditions?: { ready?: boolean };
    targetRef?: { kind?: string; name?: string; namespace?: string };
  }[];
  ports?: EndpointPort[];
}

/** core/v1 container port. */
export interface ContainerPort {
  name?: string;
  containerPort: number;
  protocol?: string;
}

/** core/v1 PodSpec (the fields Trellis reads). */
export interface PodSpec {
  serviceAccountName?: string;
  containers?: { name: string; ports?: ContainerPort[] }[];
}

/** core/v1 Pod. */
export interface Pod extends KubeObject {
  kind: 'Pod';
  spec?: PodSpec;
  status?: { podIP?: string; podIPs?: { ip: string }[]; phase?: string };
}

/** core/v1 ServiceAccount. */
export interface ServiceAccount extends KubeObject {
  kind: 'ServiceAccount';
}

/** apps/v1 Deployment: its pod template tells which service account a service's pods run as. */
export interface Deployment extends KubeObject {
  kind: 'Deployment';
  spec: {
    replicas?: number;
    selector?: { matchLabels?: Record<string, string> };
    template: { metadata?: { labels?: Record<string, string> }; spec?: PodSpec };
  };
}

/** SMI access v1alpha3 `IdentityBindingSubject` (only `ServiceAccount` is defined). */
export interface IdentityBindingSubject {
  kind: string;
  name: string;
  namespace?: string;
}

/** SMI access v1alpha3 `TrafficTargetRule`: a route group and the names of its matches. */
export interface TrafficTargetRule {
  kind: string;
  name: string;
  matches?: string[];
}

/** SMI access.smi-spec.io/v1alpha3 TrafficTarget. */
export interface TrafficTarget extends KubeObject {
  kind: 'TrafficTarget';
  spec: {
    destination: IdentityBindingSubject;
    sources?: IdentityBindingSubject[];
    rules?: TrafficTargetRule[];
  };
}

/** SMI specs v1alpha4 `HTTPMatch`. `headers` is a list of one-entry maps name → regex. */
export interface HTTPMatch {
  name: string;
  pathRegex?: string;
  methods?: string[];
  headers?: Record<string, string>[] | Record<string, string>;
}

/** SMI specs.smi-spec.io/v1alpha4 HTTPRouteGroup. */
export interface HTTPRouteGroup extends KubeObject {
  kind: 'HTTPRouteGroup';
  spec: { matches?: HTTPMatch[] };
}

/** SMI specs.smi-spec.io/v1alpha4 TCPRoute: `matches.ports` restricts the allowed ports. */
export interface TCPRoute extends KubeObject {
  kind: 'TCPRoute';
  spec: { matches?: { name?: string; ports?: number[] } };
}

/** SMI split.smi-spec.io/v1alpha2 TrafficSplit: `service` is the apex (root) service. */
export interface TrafficSplit extends KubeObject {
  kind: 'TrafficSplit';
  spec: { service: string; backends?: { service: string; weight: number }[] };
}

/** OSM config.openservicemesh.io MeshConfig (v1alpha1/v1alpha2), the fields Trellis reads. */
export interface MeshConfig extends KubeObject {
  kind: 'MeshConfig';
  spec?: {
    traffic?: {
      enablePermissiveTrafficPolicyMode?: boolean;
      enableEgress?: boolean;
      outboundIPRangeExclusionList?: string[];
      outboundPortExclusionList?: number[];
      inboundPortExclusionList?: number[];
    };
    certificate?: { serviceCertValidityDuration?: string };
    sidecar?: {
      logLevel?: string;
      tlsMinProtocolVersion?: string;
      tlsMaxProtocolVersion?: string;
      cipherSuites?: string[];
      ecdhCurves?: string[];
      /** Go duration, e.g. `90s`; `0s` or unset = no resync from MeshConfig. */
      configResyncInterval?: string;
    };
    observability?: { enableDebugServer?: boolean };
  };
}

/** networking.k8s.io/v1 IngressServiceBackend: a Service and a port by number or name. */
export interface IngressServiceBackend {
  name: string;
  port?: { number?: number; name?: string };
}

/** networking.k8s.io/v1 HTTPIngressPath. `pathType` is `Exact`, `Prefix` or `ImplementationSpecific`. */
export interface HTTPIngressPath {
  path?: string;
  pathType: 'Exact' | 'Prefix' | 'ImplementationSpecific';
  backend: { service?: IngressServiceBackend };
}

/** networking.k8s.io/v1 Ingress (the fields Trellis reads). */
export interface Ingress extends KubeObject {
  kind: 'Ingress';
  spec?: {
    ingressClassName?: string;
    defaultBackend?: { service?: IngressServiceBackend };
    rules?: { host?: string; http?: { paths: HTTPIngressPath[] } }[];
  };
}

/** OSM policy.openservicemesh.io/v1alpha1 IngressBackend: which ingress sources may reach which backends. */
export interface IngressBackend extends KubeObject {
  kind: 'IngressBackend';
  spec: {
    backends: { name: string; port: { number: number; protocol: string }; tls?: { skipClientCertValidation: boolean; sniHosts?: string[] } }[];
    /** `kind` is `Service` (name, namespace), `IPRange` (name = CIDR) or `AuthenticatedPrincipal` (name = SAN). */
    sources: { kind: string; name: string; namespace?: string }[];
    matches?: { apiGroup: string; kind: string; name: string }[];
  };
}

/** OSM policy.openservicemesh.io/v1alpha1 Egress: traffic from sources to destinations outside the mesh. */
export interface Egress extends KubeObject {
  kind: 'Egress';
  spec: {
    sources: IdentityBindingSubject[];
    hosts?: string[];
    ipAddresses?: string[];
    /** `protocol` is `http`, `https`, `tcp` or `tcp-server-first`. */
    ports: { number: number; protocol: string }[];
    matches?: { apiGroup: string; kind: string; name: string }[];
  };
}

/** OSM policy.openservicemesh.io/v1alpha1 Retry: a retry policy from one source to destination Services. */
export interface Retry extends KubeObject {
  kind: 'Retry';
  spec: {
    source: IdentityBindingSubject;
    destinations: { kind: string; name: string; namespace: string }[];
    /** Durations are Go duration strings (`1s`, `100ms`). */
    retryPolicy: { retryOn: string; perTryTimeout: string; numRetries: number; retryBackoffBaseInterval: string };
  };
}

/** Local rate limit of HTTP requests (OSM `HTTPLocalRateLimitSpec`). */
export interface HTTPLocalRateLimitSpec {
  requests: number;
  unit: 'second' | 'minute' | 'hour';
  burst?: number;
  responseStatusCode?: number;
  responseHeadersToAdd?: { name: string; value: string }[];
}

/** OSM policy.openservicemesh.io/v1alpha1 UpstreamTrafficSetting: connection limits and rate limits for one upstream host. */
export interface UpstreamTrafficSetting extends KubeObject {
  kind: 'UpstreamTrafficSetting';
  spec: {
    /** The upstream: a service FQDN `<svc>.<ns>.svc.cluster.local`, or an egress host. */
    host: string;
    connectionSettings?: {
      tcp?: { maxConnections?: number; connectTimeout?: string };
      http?: { maxRequests?: number; maxRequestsPerConnection?: number; maxPendingRequests?: number; maxRetries?: number };
    };
    rateLimit?: {
      local?: {
        tcp?: { connections: number; unit: 'second' | 'minute' | 'hour'; burst?: number };
        http?: HTTPLocalRateLimitSpec;
      };
    };
    httpRoutes?: { path: string; rateLimit?: { local?: HTTPLocalRateLimitSpec } }[];
  };
}

/** The store key of an object: `Kind/namespace/name` (`Kind//name` for cluster-scoped kinds). */
export function objectKey(kind: ObjectKind, namespace: string | undefined, name: string): string {
  return `${kind}/${namespace ?? ''}/${name}`;
}

/** Keys of objects already keyed: a rescan hands the store the same (frozen) objects again and again. */
const keysOfObjects = new WeakMap<KubeObject, string>();

/** {@link objectKey} of an object (its kind, namespace and name), remembered per object. */
export function objectKeyOf(object: KubeObject): string {
  let key = keysOfObjects.get(object);
  if (key === undefined) {
    key = objectKey(object.kind, object.metadata.namespace, object.metadata.name);
    keysOfObjects.set(object, key);
  }
  return key;
}

/**
 * The `apiVersion`s accepted for each kind (`group/version`, or `version` for the core group).
 * Manifests of a known kind with any other `apiVersion` are rejected by the sources.
 */
export const OBJECT_API_VERSIONS: Readonly<Record<ObjectKind, readonly string[]>> = {
  Namespace: ['v1'],
  Service: ['v1'],
  Endpoints: ['v1'],
  EndpointSlice: ['discovery.k8s.io/v1'],
  Pod: ['v1'],
  ServiceAccount: ['v1'],
  Deployment: ['apps/v1'],
  TrafficTarget: ['access.smi-spec.io/v1alpha3'],
  HTTPRouteGroup: ['specs.smi-spec.io/v1alpha4'],
  TCPRoute: ['specs.smi-spec.io/v1alpha4'],
  TrafficSplit: ['split.smi-spec.io/v1alpha2'],
  MeshConfig: ['config.openservicemesh.io/v1alpha1', 'config.openservicemesh.io/v1alpha2'],
  Ingress: ['networking.k8s.io/v1'],
  IngressBackend: ['policy.openservicemesh.io/v1alpha1'],
  Egress: ['policy.openservicemesh.io/v1alpha1'],
  Retry: ['policy.openservicemesh.io/v1alpha1'],
  UpstreamTrafficSetting: ['policy.openservicemesh.io/v1alpha1'],
};

/** True if `kind` is one of {@link OBJECT_KINDS} (a type guard). */
export function isObjectKind(kind: unknown): kind is ObjectKind {
  return typeof kind === 'string' && (OBJECT_KINDS as readonly string[]).includes(kind);
}

/** True if objects of `kind` live in a namespace (every kind but `Namespace`). */
export function isNamespacedKind(kind: ObjectKind): boolean {
  return kind !== 'Namespace';
}
