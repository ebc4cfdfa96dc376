/**
 * Kubernetes-shaped objects as the sources deliver them into the store. Only the fields
 * Trellis reads are typed; everything else is kept as it came. Field names and shapes follow
 * the Kubernetes API (core/v1, discovery.k8s.io/v1, apps/v1, networking.k8s.io/v1), SMI
 * (access.smi-spec.io/v1alpha3, specs.smi-spec.io/v1alpha4, split.smi-spec.io/v1alpha2) and
 * OSM's config.openservicemesh.io MeshConfig.
 */
import { BlockList, isIP } from 'node:net';

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
    observability?: {
      enableDebugServer?: boolean;
      /** Trellis: access logs on the sidecars' listeners (OSM v1.2 has no switch: it logs always). */
      enableAccessLog?: boolean;
      /** OSM v1.2 tracing, plus `sampledFraction` (0–1, osm-edge's name). */
      tracing?: { enable?: boolean; address?: string; port?: number; endpoint?: string; sampledFraction?: number };
    };
    /** OSM v1.2 feature flags; Trellis reads the two that decide whether Retry and Egress policies apply. */
    featureFlags?: { enableRetryPolicy?: boolean; enableEgressPolicy?: boolean };
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

/**
 * The name rules of the Kubernetes API server (apimachinery `IsDNS1123Label`,
 * `IsDNS1123Subdomain`, `IsDNS1035Label`): `dns1123-label` at most 63 characters of `a-z`,
 * `0-9` and `-`, starting and ending with a letter or digit; `dns1035-label` the same but
 * starting with a letter; `dns1123-subdomain` at most 253 characters, dot-separated DNS-1123
 * labels.
 */
export type NameRule = 'dns1123-label' | 'dns1035-label' | 'dns1123-subdomain';

const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS1035_LABEL = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * The rule `metadata.name` of each kind follows, as the API server validates it: Namespace a
 * DNS-1123 label, Service an RFC 1035 label, every other kind here (Pod, ServiceAccount,
 * Endpoints, EndpointSlice, Deployment, Ingress, and custom resources) a DNS-1123 subdomain.
 * `metadata.namespace` is always a DNS-1123 label (a Namespace's name).
 */
export const NAME_RULES: Readonly<Record<ObjectKind, NameRule>> = {
  Namespace: 'dns1123-label',
  Service: 'dns1035-label',
  Endpoints: 'dns1123-subdomain',
  EndpointSlice: 'dns1123-subdomain',
  Pod: 'dns1123-subdomain',
  ServiceAccount: 'dns1123-subdomain',
  Deployment: 'dns1123-subdomain',
  TrafficTarget: 'dns1123-subdomain',
  HTTPRouteGroup: 'dns1123-subdomain',
  TCPRoute: 'dns1123-subdomain',
  TrafficSplit: 'dns1123-subdomain',
  MeshConfig: 'dns1123-subdomain',
  Ingress: 'dns1123-subdomain',
  IngressBackend: 'dns1123-subdomain',
  Egress: 'dns1123-subdomain',
  Retry: 'dns1123-subdomain',
  UpstreamTrafficSetting: 'dns1123-subdomain',
};

/**
 * Why `value` breaks `rule`, e.g. `must be a DNS-1123 label: …`; undefined if it meets it.
 * The message quotes the value JSON-escaped, so a NUL, newline or bidi control shows as an escape.
 */
export function nameRuleViolation(rule: NameRule, value: string): string | undefined {
  const max = rule === 'dns1123-subdomain' ? 253 : 63;
  const pattern = rule === 'dns1123-label' ? DNS1123_LABEL : rule === 'dns1035-label' ? DNS1035_LABEL : DNS1123_SUBDOMAIN;
  if (value.length <= max && pattern.test(value)) return undefined;
  const shown = printableName(value.length > 300 ? `${value.slice(0, 300)}…` : value);
  const what =
    rule === 'dns1123-label'
      ? 'a DNS-1123 label (lower-case letters, digits and "-", starting and ending with a letter or digit'
      : rule === 'dns1035-label'
        ? 'an RFC 1035 label (lower-case letters, digits and "-", starting with a letter and ending with a letter or digit'
        : 'a DNS-1123 subdomain (dot-separated DNS-1123 labels: lower-case letters, digits, "-" and "."';
  return `${shown} is not ${what}, at most ${max} characters)`;
}

/** Control, format (bidi overrides, zero-width) and line/paragraph separator characters. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

/** True if `value` holds no control, format (bidi, zero-width) or line-separator character. */
export function isPrintableName(value: string): boolean {
  return value.search(UNPRINTABLE) < 0;
}

/** `value` JSON-quoted, with every non-printable character escaped (`"a\u0000b"`). */
export function printableName(value: string): string {
  return JSON.stringify(value).replace(UNPRINTABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** One place in an object that names an object (or an SMI match), and the rule it follows. */
export interface NameReference {
  /** Field path from the object's root, e.g. `['spec', 'sources', 0, 'name']`. */
  readonly path: readonly (string | number)[];
  readonly value: string;
  /** The rule, or `printable` for free-form names (SMI match names): no control or format characters. */
  readonly rule: NameRule | 'printable';
}

/**
 * Every name `object` holds that the API server (or Trellis's configuration) requires to be a
 * Kubernetes name: `metadata.name` (per {@link NAME_RULES}) and `metadata.namespace`, then the
 * references to other objects: service account names of Pods and Deployments; TrafficTarget
 * destination, sources and rules (and their match names); HTTPRouteGroup match names;
 * TrafficSplit apex and backend services; Ingress backend services; IngressBackend backends,
 * `Service` sources and matches; Egress sources and matches; Retry source and destinations.
 * Only string values are listed (a value of another type is the schema's to report).
 */
export function nameReferences(object: KubeObject): NameReference[] {
  const out: NameReference[] = [];
  const add = (path: readonly (string | number)[], value: unknown, rule: NameReference['rule']): void => {
    if (typeof value === 'string') out.push({ path, value, rule });
  };
  const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
  const record = (value: unknown): Record<string, unknown> => (typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {});
  /** A `{kind, name, namespace}` subject: ServiceAccount or Service by kind (others are not names). */
  const subject = (path: readonly (string | number)[], value: unknown, kinds: Partial<Record<string, NameRule>>): void => {
    const s = record(value);
    const rule = typeof s.kind === 'string' ? kinds[s.kind] : undefined;
    if (rule === undefined) return;
    add([...path, 'name'], s.name, rule);
    add([...path, 'namespace'], s.namespace, 'dns1123-label');
  };
  const SA = { ServiceAccount: NAME_RULES.ServiceAccount };
  const metadata = record(object.metadata);
  add(['metadata', 'name'], metadata.name, NAME_RULES[object.kind]);
  add(['metadata', 'namespace'], metadata.namespace, 'dns1123-label');
  const spec = record(object.spec);
  switch (object.kind) {
    case 'Pod':
      add(['spec', 'serviceAccountName'], spec.serviceAccountName, NAME_RULES.ServiceAccount);
      break;
    case 'Deployment':
      add(['spec', 'template', 'spec', 'serviceAccountName'], record(record(spec.template).spec).serviceAccountName, NAME_RULES.ServiceAccount);
      break;
    case 'TrafficTarget':
      subject(['spec', 'destination'], spec.destination, SA);
      list(spec.sources).forEach((s, i) => subject(['spec', 'sources', i], s, SA));
      list(spec.rules).forEach((r, i) => {
        add(['spec', 'rules', i, 'name'], record(r).name, NAME_RULES.HTTPRouteGroup);
        list(record(r).matches).forEach((m, j) => add(['spec', 'rules', i, 'matches', j], m, 'printable'));
      });
      break;
    case 'HTTPRouteGroup':
      list(spec.matches).forEach((m, i) => add(['spec', 'matches', i, 'name'], record(m).name, 'printable'));
      break;
    case 'TCPRoute':
      add(['spec', 'matches', 'name'], record(spec.matches).name, 'printable');
      break;
    case 'TrafficSplit':
      add(['spec', 'service'], spec.service, 'dns1123-subdomain');
      list(spec.backends).forEach((b, i) => add(['spec', 'backends', i, 'service'], record(b).service, NAME_RULES.Service));
      break;
    case 'Ingress':
      add(['spec', 'defaultBackend', 'service', 'name'], record(record(spec.defaultBackend).service).name, NAME_RULES.Service);
      list(spec.rules).forEach((r, i) =>
        list(record(record(r).http).paths).forEach((p, j) =>
          add(['spec', 'rules', i, 'http', 'paths', j, 'backend', 'service', 'name'], record(record(record(p).backend).service).name, NAME_RULES.Service),
        ),
      );
      break;
    case 'IngressBackend':
      list(spec.backends).forEach((b, i) => add(['spec', 'backends', i, 'name'], record(b).name, NAME_RULES.Service));
      list(spec.sources).forEach((s, i) => subject(['spec', 'sources', i], s, { Service: NAME_RULES.Service }));
      list(spec.matches).forEach((m, i) => add(['spec', 'matches', i, 'name'], record(m).name, NAME_RULES.UpstreamTrafficSetting));
      break;
    case 'Egress':
      list(spec.sources).forEach((s, i) => subject(['spec', 'sources', i], s, SA));
      list(spec.matches).forEach((m, i) => add(['spec', 'matches', i, 'name'], record(m).name, NAME_RULES.HTTPRouteGroup));
      break;
    case 'Retry':
      subject(['spec', 'source'], spec.source, SA);
      list(spec.destinations).forEach((d, i) => subject(['spec', 'destinations', i], d, { Service: NAME_RULES.Service }));
      break;
    default:
      break;
  }
  return out;
}

/** The violations of {@link nameReferences}' rules in `object`: field path and message. */
export function nameViolations(object: KubeObject): { path: readonly (string | number)[]; message: string }[] {
  const out: { path: readonly (string | number)[]; message: string }[] = [];
  for (const ref of nameReferences(object)) {
    const message = ref.rule === 'printable' ? (isPrintableName(ref.value) ? undefined : `${printableName(ref.value)} holds a control or format character`) : nameRuleViolation(ref.rule, ref.value);
    if (message !== undefined) out.push({ path: ref.path, message });
  }
  return out;
}

/** What kind of special address {@link specialAddress} found. */
export type SpecialAddressKind = 'unspecified' | 'loopback' | 'link-local' | 'multicast';

/** The ranges the API server refuses as an endpoint address (apimachinery `ValidateEndpointIP`), and all of multicast. */
const SPECIAL_RANGES = ([
  ['0.0.0.0', 32, 'ipv4', 'unspecified'],
  ['::', 128, 'ipv6', 'unspecified'],
  ['127.0.0.0', 8, 'ipv4', 'loopback'],
  ['::1', 128, 'ipv6', 'loopback'],
  ['169.254.0.0', 16, 'ipv4', 'link-local'],
  ['fe80::', 10, 'ipv6', 'link-local'],
  ['224.0.0.0', 4, 'ipv4', 'multicast'],
  ['ff00::', 8, 'ipv6', 'multicast'],
] as const).map(([network, length, family, kind]) => {
  const list = new BlockList();
  list.addSubnet(network, length, family);
  return { family, kind, range: `${network}/${length}`, list };
});

/**
 * Whether `ip` is unspecified, loopback, link-local or multicast (the API server refuses the
 * first three and link-local multicast as Endpoints and EndpointSlice addresses), and its range;
 * undefined for any other address and for what is not an IP.
 */
export function specialAddress(ip: string): { readonly kind: SpecialAddressKind; readonly message: string } | undefined {
  const family = isIP(ip) === 4 ? 'ipv4' : isIP(ip) === 6 ? 'ipv6' : undefined;
  const range = family && SPECIAL_RANGES.find((r) => r.family === family && r.list.check(ip, family));
  if (!range) return undefined;
  const what = range.kind === 'unspecified' ? 'unspecified' : `in the ${range.kind} range (${range.range})`;
  return { kind: range.kind, message: `${JSON.stringify(ip)} may not be ${what}: no pod or endpoint has such an address` };
}

/**
 * The special addresses ({@link specialAddress}) of a Pod (`status.podIP`,
 * `status.podIPs[i].ip`), Endpoints (`subsets[i].addresses[j].ip`, `…notReadyAddresses[j].ip`)
 * or EndpointSlice (`endpoints[i].addresses[j]`, unless `addressType: FQDN`): field path,
 * message and kind. The manifests refuse every one but a loopback endpoint address, which they
 * only warn of (a test bed on one host, such as the proxyless gRPC tests, serves its endpoints
 * on 127.0.0.0/8).
 */
export function addressViolations(object: KubeObject): { path: readonly (string | number)[]; address: string; message: string; kind: SpecialAddressKind }[] {
  const out: { path: readonly (string | number)[]; address: string; message: string; kind: SpecialAddressKind }[] = [];
  const check = (path: readonly (string | number)[], value: unknown): void => {
    const found = typeof value === 'string' ? specialAddress(value) : undefined;
    if (found !== undefined) out.push({ path, address: value as string, ...found });
  };
  const list = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
  const record = (value: unknown): Record<string, unknown> => (typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {});
  const o = object as unknown as Record<string, unknown>;
  if (object.kind === 'Pod') {
    const status = record(o.status);
    check(['status', 'podIP'], status.podIP);
    list(status.podIPs).forEach((p, i) => check(['status', 'podIPs', i, 'ip'], record(p).ip));
  } else if (object.kind === 'Endpoints') {
    list(o.subsets).forEach((s, i) => {
      for (const field of ['addresses', 'notReadyAddresses']) list(record(s)[field]).forEach((a, j) => check(['subsets', i, field, j, 'ip'], record(a).ip));
    });
  } else if (object.kind === 'EndpointSlice' && o.addressType !== 'FQDN') {
    list(o.endpoints).forEach((e, i) => list(record(e).addresses).forEach((a, j) => check(['endpoints', i, 'addresses', j], a)));
  }
  return out;
}
