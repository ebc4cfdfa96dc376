import { isIP } from 'node:net';
import type {
  Deployment,
  EndpointSlice,
  Endpoints,
  HTTPRouteGroup,
  MeshConfig,
  Namespace,
  ObjectKind,
  Pod,
  PodSpec,
  Service,
  ServicePort,
  TCPRoute,
  TrafficSplit,
  TrafficTarget,
} from '../store/objects.js';
import { specialAddress } from '../store/objects.js';
import type { StoreReader } from '../store/store.js';
import { serviceIdentity, type ServiceIdentity } from '../proxy/types.js';
import { MONITORED_BY_LABEL, SERVICE_NAME_LABEL, selectorMatches } from './labels.js';
import { formatProblem, type PolicyProblem } from './problems.js';
import { SIDECAR_PORTS, sidecarPortMessage } from './sidecar-ports.js';
import type {
  AppProtocol,
  HttpRouteMatch,
  MeshEndpoint,
  MeshService,
  MeshSettings,
  MeshSnapshot,
  TlsVersion,
  TracingSettings,
  TrafficSplitPolicy,
  TrafficTargetPolicy,
} from './types.js';
import { clusterName, serviceKey } from './names.js';
import { parseGoDuration } from './duration.js';
import { HTTP_HEADER_NAME, re2Problem } from '../util/re2.js';
import { resolveRetryPolicies, resolveUpstreamTrafficSettings } from './upstream-policies.js';
import { keepLastGood, type KeptPolicies } from './last-good.js';
import { sameElements, sameSet } from '../util/same.js';
import { resolveIngressBackends } from './ingress.js';
import { resolveEgressPolicies } from './egress.js';
import { checkCipherSuites, checkEcdhCurves } from './tls-names.js';
import { indexMeshSnapshot } from './traffic-policy.js';

export { parseGoDuration } from './duration.js';

/** Default validity of service certificates (OSM `serviceCertValidityDuration` default, 24 h), in seconds. */
export const DEFAULT_SERVICE_CERT_VALIDITY_SECONDS = 24 * 3600;

/** Options of {@link buildMeshSnapshot}. */
export interface BuildOptions {
  /** Mesh name matched against the namespaces' `openservicemesh.io/monitored-by` label. */
  readonly meshName: string;
  /** Generation number to stamp on the snapshot. */
  readonly generation: number;
  /**
   * The previous snapshot: policies that now have problems keep their version from it
   * ({@link keepLastGood}), and so do the mesh settings when the MeshConfig was deleted.
   */
  readonly previous?: MeshSnapshot;
  /** The MeshConfig to read (default {@link DEFAULT_MESH_CONFIG}: `osm-system/osm-mesh-config`). */
  readonly meshConfig?: { readonly namespace: string; readonly name: string };
  /**
   * Why the MeshConfig may exist although the store has none: the source's error on it (an
   * invalid document of it, or a file it could be in that could not be read or parsed). While
   * it is set and no valid MeshConfig was seen, permissive mode is off (see `meshSettings`).
   */
  readonly meshConfigUnreadable?: string;
}

/** The result of {@link buildMeshSnapshot}: the snapshot, and the policies it had to skip. */
export interface BuildResult {
  readonly snapshot: MeshSnapshot;
  /** Each problem once (one found on several paths, e.g. a match every TrafficTarget names, is one). */
  readonly problems: readonly PolicyProblem[];
}

const PROTOCOL_PREFIXES: readonly [string, AppProtocol][] = [
  ['tcp-server-first', 'tcp-server-first'],
  ['http', 'http'],
  ['grpc', 'grpc'],
  ['tcp', 'tcp'],
];

/**
 * The application protocol of a Service port: its `appProtocol` if it is one OSM knows,
 * else the port name's prefix (`http-`, `tcp-`, `grpc-`, `tcp-server-first-`), else `http`
 * (OSM `pkg/k8s` protocol detection).
 */
export function portProtocol(port: Pick<ServicePort, 'name' | 'appProtocol'>): AppProtocol {
  const app = port.appProtocol?.toLowerCase();
  for (const [prefix, protocol] of PROTOCOL_PREFIXES) if (app === prefix) return protocol;
  const name = port.name?.toLowerCase() ?? '';
  for (const [prefix, protocol] of PROTOCOL_PREFIXES) if (name === prefix || name.startsWith(`${prefix}-`)) return protocol;
  return 'http';
}

const TLS_VERSIONS: readonly TlsVersion[] = ['TLS_AUTO', 'TLSv1_0', 'TLSv1_1', 'TLSv1_2', 'TLSv1_3'];

/**
 * OSM's defaults when there is no MeshConfig (permissive mode on, egress off, Retry policies off
 * and Egress policies on as OSM v1.2's chart sets the feature flags, 24 h certificates, TLS 1.2–1.3).
 */
const DEFAULT_SETTINGS: MeshSettings = {
  permissiveTrafficPolicyMode: true,
  enableEgress: false,
  enableRetryPolicy: false,
  enableEgressPolicy: true,
  serviceCertValiditySeconds: DEFAULT_SERVICE_CERT_VALIDITY_SECONDS,
  tlsMinProtocolVersion: 'TLSv1_2',
  tlsMaxProtocolVersion: 'TLSv1_3',
  cipherSuites: [],
  ecdhCurves: [],
  configResyncIntervalSeconds: undefined,
  accessLog: false,
  tracing: undefined,
};

/** The settings while the MeshConfig could not be loaded since the controller started: {@link DEFAULT_SETTINGS} with permissive mode off. */
const UNREADABLE_SETTINGS: MeshSettings = { ...DEFAULT_SETTINGS, permissiveTrafficPolicyMode: false };

/** The MeshConfig OSM's controller reads: `osm-mesh-config` in its namespace. */
export const DEFAULT_MESH_CONFIG = { namespace: 'osm-system', name: 'osm-mesh-config' } as const;

/**
 * The mesh settings and where they come from. The MeshConfig read is `wanted`'s; another one is
 * reported and ignored. When it is gone but the previous snapshot's settings came from it, those
 * settings stay in force (a deletion never opens the mesh). A controller that starts with it
 * `unreadable` (an invalid document, a file that does not parse) has never seen its settings:
 * permissive mode is off (an unknown never opens the mesh) with OSM's other defaults, until a
 * valid version is loaded. A MeshConfig of another name or namespace while `wanted` does not
 * exist (a typo) closes the mesh the same way until `wanted` exists, even once it is deleted. Only
 * a mesh that has had no MeshConfig at all since the controller started, and none unreadable at
 * start, gets {@link DEFAULT_SETTINGS}.
 */
function meshSettings(
  store: StoreReader,
  wanted: { readonly namespace: string; readonly name: string },
  previous: MeshSnapshot | undefined,
  unreadable: string | undefined,
  problems: PolicyProblem[],
): { settings: MeshSettings; meshConfig: MeshSnapshot['meshConfig'] } {
  const configs = store.list<MeshConfig>('MeshConfig');
  const wantedKey = `${wanted.namespace}/${wanted.name}`;
  const config = configs.find((c) => c.metadata.name === wanted.name && (c.metadata.namespace ?? 'default') === wanted.namespace);
  for (const other of configs) {
    if (other === config) continue;
    problems.push({
      kind: 'MeshConfig',
      namespace: other.metadata.namespace,
      name: other.metadata.name,
      field: 'metadata',
      message: `is not the MeshConfig this controller reads (${wantedKey}); ignored`,
    });
  }
  if (!config) {
    if (unreadable !== undefined && (previous === undefined || previous.meshConfig?.unreadable !== undefined)) {
      problems.push({
        kind: 'MeshConfig',
        namespace: wanted.namespace,
        name: wanted.name,
        field: 'metadata',
        message: `could not be loaded (${unreadable}); permissive mode is off (an unreadable MeshConfig never opens the mesh) and the other settings are the defaults until a valid version is loaded`,
      });
      return { settings: UNREADABLE_SETTINGS, meshConfig: { name: wantedKey, deleted: false, unreadable } };
    }
    if (previous?.meshConfig && previous.meshConfig.unreadable === undefined && !previous.meshConfig.misnamed) {
      problems.push({
        kind: 'MeshConfig',
        namespace: wanted.namespace,
        name: wanted.name,
        field: 'metadata',
        message: `was deleted; its last settings stay in force (permissive mode ${previous.settings.permissiveTrafficPolicyMode ? 'on' : 'off'}) until it is created again (a controller started without it uses the defaults)`,
      });
      return { settings: previous.settings, meshConfig: { name: wantedKey, deleted: true } };
    }
    if (configs.length > 0 || previous?.meshConfig?.misnamed) {
      const others = configs.map((c) => `${c.metadata.namespace ?? 'default'}/${c.metadata.name}`).join(', ');
      problems.push({
        kind: 'MeshConfig',
        namespace: wanted.namespace,
        name: wanted.name,
        field: 'metadata',
        message: `does not exist${others ? ` (MeshConfig ${others} is not it)` : ', and a MeshConfig of another name did'}; permissive mode is off (a misnamed MeshConfig never opens the mesh) and the other settings are the defaults until ${wantedKey} exists`,
      });
      return { settings: UNREADABLE_SETTINGS, meshConfig: { name: wantedKey, deleted: false, misnamed: true } };
    }
    return { settings: DEFAULT_SETTINGS, meshConfig: undefined };
  }
  return { settings: settingsOf(config, problems, previous?.settings), meshConfig: { name: wantedKey, deleted: false } };
}

/**
 * The settings of one MeshConfig; impossible values are reported and replaced by the defaults
 * (tracing: by `previous`'s, the last good ones, off when there are none).
 */
function settingsOf(config: MeshConfig, problems: PolicyProblem[], previous: MeshSettings | undefined): MeshSettings {
  const report = (field: string, message: string): void => {
    problems.push({ kind: 'MeshConfig', namespace: config.metadata.namespace, name: config.metadata.name, field, message });
  };
  let validity = DEFAULT_SERVICE_CERT_VALIDITY_SECONDS;
  const text = config.spec?.certificate?.serviceCertValidityDuration;
  if (text !== undefined) {
    const parsed = parseGoDuration(text);
    if (parsed === undefined || parsed < 60) report('spec.certificate.serviceCertValidityDuration', `"${text}" is not a duration of at least 1m; using 24h`);
    else validity = Math.round(parsed);
  }
  const sidecar = config.spec?.sidecar;
  const tlsVersion = (field: 'tlsMinProtocolVersion' | 'tlsMaxProtocolVersion', fallback: TlsVersion): TlsVersion => {
    const value = sidecar?.[field];
    if (value === undefined) return fallback;
    if ((TLS_VERSIONS as readonly string[]).includes(value)) return value as TlsVersion;
    report(`spec.sidecar.${field}`, `"${value}" is not one of ${TLS_VERSIONS.join(', ')}; using ${fallback}`);
    return fallback;
  };
  let tlsMin = tlsVersion('tlsMinProtocolVersion', DEFAULT_SETTINGS.tlsMinProtocolVersion);
  let tlsMax = tlsVersion('tlsMaxProtocolVersion', DEFAULT_SETTINGS.tlsMaxProtocolVersion);
  if (tlsMin !== 'TLS_AUTO' && tlsMax !== 'TLS_AUTO' && TLS_VERSIONS.indexOf(tlsMin) > TLS_VERSIONS.indexOf(tlsMax)) {
    report('spec.sidecar.tlsMinProtocolVersion', `${tlsMin} is above tlsMaxProtocolVersion ${tlsMax}; using TLSv1_2 to TLSv1_3`);
    tlsMin = DEFAULT_SETTINGS.tlsMinProtocolVersion;
    tlsMax = DEFAULT_SETTINGS.tlsMaxProtocolVersion;
  }
  // A name Envoy does not know makes it NACK every TLS context (and the secrets they use): such names are left out.
  const tlsNames = (
    field: 'cipherSuites' | 'ecdhCurves',
    value: readonly unknown[] | undefined,
    check: (names: readonly unknown[]) => { accepted: string[]; refused: { index: number; message: string }[] },
    fallback: string,
  ): string[] => {
    if (value === undefined) return [];
    const { accepted, refused } = check(Array.isArray(value) ? value : [value]);
    for (const r of refused) report(`spec.sidecar.${field}[${r.index}]`, r.message);
    if (refused.length > 0 && accepted.length === 0) report(`spec.sidecar.${field}`, `no entry is left; ${fallback}`);
    return accepted;
  };
  let resync: number | undefined;
  if (sidecar?.configResyncInterval !== undefined) {
    const parsed = parseGoDuration(sidecar.configResyncInterval);
    if (parsed === undefined) report('spec.sidecar.configResyncInterval', `"${sidecar.configResyncInterval}" is not a duration`);
    // OSM: a resync interval under 1 minute is raised to 1 minute; 0 means none.
    else if (parsed > 0) resync = Math.max(60, Math.round(parsed));
  }
  return {
    permissiveTrafficPolicyMode: config.spec?.traffic?.enablePermissiveTrafficPolicyMode ?? false,
    enableEgress: config.spec?.traffic?.enableEgress ?? false,
    enableRetryPolicy: config.spec?.featureFlags?.enableRetryPolicy ?? DEFAULT_SETTINGS.enableRetryPolicy,
    enableEgressPolicy: config.spec?.featureFlags?.enableEgressPolicy ?? DEFAULT_SETTINGS.enableEgressPolicy,
    serviceCertValiditySeconds: validity,
    tlsMinProtocolVersion: tlsMin,
    tlsMaxProtocolVersion: tlsMax,
    cipherSuites: tlsNames('cipherSuites', sidecar?.cipherSuites, checkCipherSuites, "Envoy's default cipher suites are used"),
    ecdhCurves: tlsNames('ecdhCurves', sidecar?.ecdhCurves, checkEcdhCurves, "Envoy's default curves are used"),
    configResyncIntervalSeconds: resync,
    accessLog: config.spec?.observability?.enableAccessLog === true,
    tracing: tracingOf(config.spec?.observability?.tracing, report, previous?.tracing),
  };
}

/** Zipkin's default port and span endpoint (OSM's chart and Zipkin's v2 API). */
const DEFAULT_TRACING = { port: 9411, endpoint: '/api/v2/spans' } as const;
/** A DNS name (RFC 1123 labels) or an IPv4 address: what `spec.observability.tracing.address` may hold. */
const TRACING_ADDRESS = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$/;

/**
 * The tracing settings of MeshConfig `spec.observability.tracing`: undefined unless `enable` is
 * true; an invalid field is reported and `previous` (the last good settings) stays in force.
 */
function tracingOf(
  tracing: NonNullable<NonNullable<MeshConfig['spec']>['observability']>['tracing'],
  report: (field: string, message: string) => void,
  previous: TracingSettings | undefined,
): TracingSettings | undefined {
  if (tracing?.enable !== true) return undefined;
  const field = 'spec.observability.tracing';
  const keep = previous ? `the last valid tracing settings (${previous.address}:${previous.port}${previous.endpoint}) stay in force` : 'tracing is off';
  const { address, port = DEFAULT_TRACING.port, endpoint = DEFAULT_TRACING.endpoint, sampledFraction = 1 } = tracing;
  if (typeof address !== 'string' || !(isIP(address) === 4 || (isIP(address) === 0 && TRACING_ADDRESS.test(address)))) {
    report(`${field}.address`, `${JSON.stringify(address ?? null)} is not a host name or IPv4 address; ${keep}`);
    return previous;
  }
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    report(`${field}.port`, `${JSON.stringify(port)} is not a port (1-65535); ${keep}`);
    return previous;
  }
  if (typeof endpoint !== 'string' || !/^\/[\x21-\x7e]*$/.test(endpoint)) {
    report(`${field}.endpoint`, `${JSON.stringify(endpoint)} is not an HTTP path (it starts with /); ${keep}`);
    return previous;
  }
  if (typeof sampledFraction !== 'number' || !(sampledFraction >= 0 && sampledFraction <= 1)) {
    report(`${field}.sampledFraction`, `${JSON.stringify(sampledFraction)} is not a fraction from 0 to 1; ${keep}`);
    return previous;
  }
  const settings: TracingSettings = {
    address: address.replace(/\.$/, ''),
    addressKind: isIP(address) === 4 ? 'ip' : 'dns',
    port,
    endpoint,
    samplingPercent: sampledFraction * 100,
  };
  // The same object as the last good one when nothing changed: generators compare inputs by identity.
  if (previous && previous.address === settings.address && previous.port === port && previous.endpoint === endpoint && previous.samplingPercent === settings.samplingPercent) return previous;
  return Object.freeze(settings);
}

/**
 * The policies of a kind a MeshConfig feature flag turns on (OSM v1.2 `featureFlags`): all of
 * them when `enabled`, else none, each reported (field `metadata`, `… is off: it is not in force`)
 * so that a policy the mesh ignores is never silent.
 */
function featureGated<T extends { readonly name: string }>(
  policies: T[],
  kind: string,
  enabled: boolean,
  flag: 'enableRetryPolicy' | 'enableEgressPolicy',
  problems: PolicyProblem[],
): T[] {
  if (enabled) return policies;
  for (const p of policies) {
    const [namespace, name] = p.name.split('/');
    problems.push({ kind, namespace, name, field: 'metadata', message: `MeshConfig spec.featureFlags.${flag} is off: it is not in force` });
  }
  return [];
}

/**
 * Objects of one kind by namespace and `label=value`, so a selector looks only at the objects
 * that carry its first label instead of every object of the namespace.
 */
class LabelIndex<T extends { metadata: { namespace?: string } }> {
  private readonly byLabel = new Map<string, T[]>();

  constructor(objects: readonly T[], labelsOf: (o: T) => Readonly<Record<string, string>> | undefined) {
    for (const o of objects) {
      for (const [k, v] of Object.entries(labelsOf(o) ?? {})) {
        const key = `${o.metadata.namespace ?? 'default'}\0${k}=${v}`;
        const list = this.byLabel.get(key);
        if (list) list.push(o);
        else this.byLabel.set(key, [o]);
      }
    }
  }

  /** Candidates for `selector` in `namespace` (they carry its first label; check the rest); none for an empty selector. */
  select(namespace: string, selector: Readonly<Record<string, string>> | undefined): readonly T[] {
    const first = Object.entries(selector ?? {})[0];
    return first ? (this.byLabel.get(`${namespace}\0${first[0]}=${first[1]}`) ?? []) : [];
  }
}

function podIp(pod: Pod): string | undefined {
  const ip = pod.status?.podIP ?? pod.status?.podIPs?.[0]?.ip;
  return ip && isIP(ip) && specialAddress(ip) === undefined ? ip : undefined;
}

function isLive(pod: Pod): boolean {
  const phase = pod.status?.phase;
  return phase !== 'Failed' && phase !== 'Succeeded';
}

/** Resolves a Service port's `targetPort` (a number, or a container port name looked up in the pod specs). */
function resolveTargetPort(port: ServicePort, specs: readonly PodSpec[]): number {
  const target = port.targetPort;
  if (typeof target === 'number') return target;
  if (typeof target === 'string' && /^\d+$/.test(target)) return Number(target);
  if (typeof target === 'string') {
    for (const spec of specs) {
      for (const c of spec.containers ?? []) {
        const found = c.ports?.find((p) => p.name === target);
        if (found) return found.containerPort;
      }
    }
  }
  return port.port;
}

/** An Endpoints/EndpointSlice address the catalog uses: not unspecified, link-local or multicast (loopback is: a test bed on one host). */
function usableEndpointAddress(ip: string): boolean {
  const special = specialAddress(ip);
  return special === undefined || special.kind === 'loopback';
}

function endpointsFromObjects(
  svc: Service,
  port: ServicePort,
  targetPort: number,
  portCount: number,
  ep: Endpoints | undefined,
  slices: readonly EndpointSlice[],
): MeshEndpoint[] | undefined {
  if (!ep && slices.length === 0) return undefined;
  const out: MeshEndpoint[] = [];
  const pickPort = (ports: readonly { name?: string; port: number }[] | undefined): number | undefined => {
    if (!ports || ports.length === 0) return targetPort;
    const named = ports.find((p) => (p.name ?? '') === (port.name ?? ''));
    if (named) return named.port;
    return portCount === 1 && ports.length === 1 ? ports[0].port : undefined;
  };
  for (const subset of ep?.subsets ?? []) {
    const p = pickPort(subset.ports);
    if (p === undefined) continue;
    for (const a of subset.addresses ?? []) if (isIP(a.ip) && usableEndpointAddress(a.ip)) out.push({ ip: a.ip, port: p });
  }
  for (const slice of slices) {
    if (slice.addressType === 'FQDN') continue;
    const p = pickPort(slice.ports);
    if (p === undefined) continue;
    for (const e of slice.endpoints ?? []) {
      if (e.conditions?.ready === false) continue;
      for (const ip of e.addresses) if (isIP(ip) && usableEndpointAddress(ip)) out.push({ ip, port: p });
    }
  }
  return out;
}

function uniqueSortedEndpoints(list: readonly MeshEndpoint[]): MeshEndpoint[] {
  const seen = new Map<string, MeshEndpoint>();
  for (const e of list) seen.set(`${e.ip}:${e.port}`, e);
  return [...seen.values()].sort((a, b) => (a.ip === b.ip ? a.port - b.port : a.ip < b.ip ? -1 : 1));
}

function resolveTrafficTargets(store: StoreReader, namespaces: ReadonlySet<string>, problems: PolicyProblem[]): TrafficTargetPolicy[] {
  const out: TrafficTargetPolicy[] = [];
  for (const tt of store.list<TrafficTarget>('TrafficTarget')) {
    const ns = tt.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    const report = (field: string, message: string): void => {
      problems.push({ kind: 'TrafficTarget', namespace: ns, name: tt.metadata.name, field, message });
    };
    const dest = tt.spec.destination;
    if (dest.kind !== 'ServiceAccount') {
      report('spec.destination.kind', `"${dest.kind}" is not ServiceAccount`);
      continue;
    }
    const destNs = dest.namespace ?? ns;
    if (destNs !== ns) {
      // SMI access v1alpha3: the destination must be in the TrafficTarget's namespace.
      report('spec.destination.namespace', `"${destNs}" differs from the TrafficTarget's namespace "${ns}"`);
      continue;
    }
    const sources: ServiceIdentity[] = [];
    (tt.spec.sources ?? []).forEach((s, i) => {
      if (s.kind !== 'ServiceAccount') report(`spec.sources[${i}].kind`, `"${s.kind}" is not ServiceAccount; the TrafficTarget applies without this source`);
      else sources.push(serviceIdentity(s.namespace ?? ns, s.name));
    });
    const httpMatches: HttpRouteMatch[] = [];
    let tcpPorts: number[] | 'any' | undefined;
    let valid = true;
    (tt.spec.rules ?? []).forEach((rule, i) => {
      if (rule.kind === 'HTTPRouteGroup') {
        const group = store.get<HTTPRouteGroup>('HTTPRouteGroup', ns, rule.name);
        if (!group) {
          report(`spec.rules[${i}].name`, `HTTPRouteGroup ${ns}/${rule.name} does not exist`);
          valid = false;
          return;
        }
        const wanted = rule.matches && rule.matches.length > 0 ? new Set(rule.matches) : undefined;
        const groupMatches = group.spec.matches ?? [];
        for (const name of wanted ?? []) {
          if (!groupMatches.some((m) => m.name === name)) report(`spec.rules[${i}].matches`, `HTTPRouteGroup ${ns}/${rule.name} has no match "${name}"; the TrafficTarget applies without match "${name}"`);
        }
        groupMatches.forEach((m, index) => {
          if (wanted && !wanted.has(m.name)) return;
          const headers: Record<string, string> = {};
          const list = Array.isArray(m.headers) ? m.headers : m.headers ? [m.headers] : [];
          for (const h of list) Object.assign(headers, h);
          const bad = httpMatchProblem(m.pathRegex, headers);
          if (bad) {
            // The match could never be sent to Envoy: skip it (the rest of the group still applies).
            problems.push({
              kind: 'HTTPRouteGroup',
              namespace: ns,
              name: rule.name,
              field: `spec.matches[${index}].${bad.field}`,
              message: `${bad.message}; TrafficTargets apply without match "${m.name}"`,
            });
            return;
          }
          const methods = (m.methods ?? []).includes('*') ? [] : [...(m.methods ?? [])];
          httpMatches.push({ name: `${ns}/${rule.name}/${m.name}`, pathRegex: m.pathRegex || undefined, methods, headers });
        });
      } else if (rule.kind === 'TCPRoute') {
        const route = store.get<TCPRoute>('TCPRoute', ns, rule.name);
        if (!route) {
          report(`spec.rules[${i}].name`, `TCPRoute ${ns}/${rule.name} does not exist`);
          valid = false;
          return;
        }
        const ports = route.spec.matches?.ports ?? [];
        if (ports.length === 0 || tcpPorts === 'any') tcpPorts = 'any';
        else tcpPorts = [...(tcpPorts ?? []), ...ports];
      } else {
        report(`spec.rules[${i}].kind`, `"${rule.kind}" is not HTTPRouteGroup or TCPRoute; the TrafficTarget applies without this rule`);
      }
    });
    if (!valid) continue;
    // What is left must grant something: a TrafficTarget with no source, or no match or port
    // left, is not in force (never "no matches" read as "everything").
    if (sources.length === 0) {
      report('spec.sources', 'no valid source: the TrafficTarget grants nothing');
      continue;
    }
    if (httpMatches.length === 0 && tcpPorts === undefined) {
      report('spec.rules', 'no valid HTTPRouteGroup match or TCPRoute: the TrafficTarget grants nothing');
      continue;
    }
    out.push({
      name: `${ns}/${tt.metadata.name}`,
      destination: serviceIdentity(ns, dest.name),
      sources,
      httpMatches,
      tcpPorts,
    });
  }
  return out;
}

/** The largest value of a protobuf uint32, Envoy's type for weights and `total_weight`. */
const MAX_UINT32 = 0xffff_ffff;

/**
 * Why an HTTPRouteGroup match cannot become an Envoy route match, as field and message, or
 * undefined: a path regex or header regex RE2 rejects, or a header name that is not an HTTP
 * token.
 */
function httpMatchProblem(pathRegex: string | undefined, headers: Readonly<Record<string, string>>): { field: string; message: string } | undefined {
  if (pathRegex) {
    const problem = re2Problem(pathRegex);
    if (problem) return { field: 'pathRegex', message: problem };
  }
  for (const [name, value] of Object.entries(headers)) {
    if (!HTTP_HEADER_NAME.test(name)) return { field: `headers.${name}`, message: `"${name}" is not a valid HTTP header name` };
    const problem = re2Problem(String(value));
    if (problem) return { field: `headers.${name}`, message: problem };
  }
  return undefined;
}

/** Splits an SMI `spec.service` (`svc`, `svc.ns`, or an FQDN) into the service name. */
function apexServiceName(text: string): string {
  return text.split('.')[0];
}

function resolveTrafficSplits(
  store: StoreReader,
  namespaces: ReadonlySet<string>,
  serviceNames: ReadonlySet<string>,
  problems: PolicyProblem[],
): TrafficSplitPolicy[] {
  const out: TrafficSplitPolicy[] = [];
  const apexTaken = new Map<string, string>();
  for (const split of store.list<TrafficSplit>('TrafficSplit')) {
    const ns = split.metadata.namespace ?? 'default';
    if (!namespaces.has(ns)) continue;
    const report = (field: string, message: string): void => {
      problems.push({ kind: 'TrafficSplit', namespace: ns, name: split.metadata.name, field, message });
    };
    const apex = apexServiceName(split.spec.service);
    const parts = split.spec.service.split('.');
    if (parts.length > 1 && parts[1] !== ns) {
      report('spec.service', `"${split.spec.service}" names namespace "${parts[1]}", not the TrafficSplit's namespace "${ns}"`);
      continue;
    }
    if (!serviceNames.has(`${ns}/${apex}`)) {
      report('spec.service', `Service ${ns}/${apex} does not exist`);
      continue;
    }
    const other = apexTaken.get(`${ns}/${apex}`);
    if (other) {
      report('spec.service', `Service ${ns}/${apex} is already split by TrafficSplit ${other}`);
      continue;
    }
    const backends: { service: string; weight: number }[] = [];
    (split.spec.backends ?? []).forEach((b, i) => {
      if (!Number.isInteger(b.weight) || b.weight < 0) {
        report(`spec.backends[${i}].weight`, `${String(b.weight)} is not a non-negative integer; the TrafficSplit applies without this backend`);
        return;
      }
      if (!serviceNames.has(`${ns}/${b.service}`)) {
        report(`spec.backends[${i}].service`, `Service ${ns}/${b.service} does not exist; the TrafficSplit applies without this backend`);
        return;
      }
      if (b.weight > MAX_UINT32) {
        report(`spec.backends[${i}].weight`, `${b.weight} is above ${MAX_UINT32}, the largest weight Envoy accepts; the TrafficSplit applies without this backend`);
        return;
      }
      if (b.weight > 0) backends.push({ service: b.service, weight: b.weight });
    });
    const total = backends.reduce((sum, b) => sum + b.weight, 0);
    if (total > MAX_UINT32) {
      report('spec.backends', `the weights add up to ${total}, above ${MAX_UINT32} (Envoy's total_weight is a uint32)`);
      continue;
    }
    apexTaken.set(`${ns}/${apex}`, `${ns}/${split.metadata.name}`);
    out.push({ name: `${ns}/${split.metadata.name}`, namespace: ns, service: apex, backends });
  }
  return out;
}

/**
 * Builds {@link MeshSnapshot}s one after another from a store, and keeps what a build resolved
 * that the next one can reuse while its inputs are the same objects (store objects are frozen
 * and the store's lists stay the same arrays until one of their objects changes): per monitored
 * namespace, its Services' resolutions (MeshServices, endpoints, identities), the label indexes
 * of its Pods and Deployments and its sidecar-port warnings; and the TrafficTarget resolution of
 * the last snapshot built. A build given that snapshot as `previous` returns the very objects of
 * it for what did not change (the diff and the generators' sharing compare by identity).
 *
 * What it keeps is bounded by the last build: a namespace no longer monitored (or gone) is
 * forgotten, and nothing of earlier builds is kept. The owner (the controller) keeps one
 * builder per store; reuse never changes a result: `build` returns what
 * {@link buildMeshSnapshot} returns for the same store and options.
 */
export class MeshSnapshotBuilder {
  /** By monitored namespace, as of the last build. */
  #namespaces: ReadonlyMap<string, NamespaceResolution> = new Map();
  /** The last snapshot built, and what its TrafficTargets were resolved from. */
  #last: { readonly snapshot: MeshSnapshot; readonly trafficTargets: TrafficTargetResolution } | undefined;

  /**
   * Builds the immutable {@link MeshSnapshot} from the store: monitored namespaces, one
   * MeshService per Service port (UDP ports skipped), endpoints (from Endpoints or
   * EndpointSlices, else from the Pods the selector matches), service identities (the service
   * accounts of those Pods, and of Deployments' pod templates), resolved TrafficTargets and
   * TrafficSplits, and MeshConfig settings (OSM's defaults, permissive mode on, while no
   * MeshConfig was seen; permissive mode off while it is `meshConfigUnreadable` since the start;
   * the last ones seen, kept in `previous`, once it is deleted),
   * IngressBackends with their Ingress routes (`ingress.ts`) and Egress policies (`egress.ts`),
   * and the snapshot's index (`traffic-policy.ts`).
   *
   * Reads only `store` and `options.previous` (what the builder keeps only saves work). Policies
   * that reference something missing or impossible are left out and listed in `problems`;
   * nothing throws.
   */
  build(store: StoreReader, options: BuildOptions): BuildResult {
    const problems: PolicyProblem[] = [];
    const namespaces = new Set(
      store
        .list<Namespace>('Namespace')
        .filter((n) => n.metadata.labels?.[MONITORED_BY_LABEL] === options.meshName)
        .map((n) => n.metadata.name),
    );
    const prev = options.previous;
    const { settings, meshConfig } = meshSettings(store, options.meshConfig ?? DEFAULT_MESH_CONFIG, prev, options.meshConfigUnreadable, problems);

    const resolutions = new Map<string, NamespaceResolution>();
    for (const ns of [...namespaces].sort()) resolutions.set(ns, resolveNamespace(store, ns, this.#namespaces.get(ns)));
    this.#namespaces = resolutions;
    const { services, endpoints, identitiesByService, servicesByIdentity } = buildServices(resolutions, problems);
    for (const resolution of resolutions.values()) problems.push(...resolution.sidecarPorts.services, ...resolution.sidecarPorts.pods);

    const names = (kind: ObjectKind) => new Set(store.list(kind).map((o) => `${o.metadata.namespace ?? 'default'}/${o.metadata.name}`));
    const previousPartial = prev?.partialPolicies ?? new Set<string>();
    const partial = new Set<string>();
    function kept<T>(result: KeptPolicies<T>): T[] {
      for (const key of result.partial) partial.add(key);
      return result.policies;
    }
    // TrafficTargets read only these kinds and the namespaces: when none changed since the
    // previous build (the last one of this builder), its resolution (and problems) stand.
    const inputs = [store.list('TrafficTarget'), store.list('HTTPRouteGroup'), store.list('TCPRoute')] as const;
    const known = this.#last !== undefined && this.#last.snapshot === prev ? this.#last.trafficTargets : undefined;
    let trafficTargets: TrafficTargetPolicy[];
    let trafficTargetProblems: PolicyProblem[];
    if (prev && known && sameElements(known.inputs, inputs) && sameSet(prev.namespaces, namespaces)) {
      trafficTargets = [...prev.trafficTargets];
      trafficTargetProblems = [...known.problems];
      for (const key of previousPartial) if (key.startsWith('TrafficTarget ')) partial.add(key);
    } else {
      trafficTargetProblems = [];
      trafficTargets = samePolicies(prev?.trafficTargets, kept(keepLastGood('TrafficTarget', resolveTrafficTargets(store, namespaces, trafficTargetProblems), prev?.trafficTargets, previousPartial, names('TrafficTarget'), (name) => {
        const [ns, n] = name.split('/');
        const tt = store.get<TrafficTarget>('TrafficTarget', ns, n);
        return (tt?.spec.rules ?? []).map((r) => `${r.kind} ${ns}/${r.name}`);
      }, trafficTargetProblems)));
    }
    problems.push(...trafficTargetProblems);
    const serviceNames = new Set(services.map(serviceKey));
    const none = () => [];
    const trafficSplits = kept(keepLastGood('TrafficSplit', resolveTrafficSplits(store, namespaces, serviceNames, problems), prev?.trafficSplits, previousPartial, names('TrafficSplit'), none, problems));
    const retryPolicies = featureGated(
      kept(keepLastGood('Retry', resolveRetryPolicies(store, namespaces, problems), prev?.retryPolicies, previousPartial, names('Retry'), none, problems)),
      'Retry',
      settings.enableRetryPolicy,
      'enableRetryPolicy',
      problems,
    );
    const upstreamTrafficSettings = kept(keepLastGood(
      'UpstreamTrafficSetting',
      resolveUpstreamTrafficSettings(store, namespaces, serviceNames, problems),
      prev?.upstreamTrafficSettings,
      previousPartial,
      names('UpstreamTrafficSetting'),
      none,
      problems,
    ));
    problems.push(...unknownServiceAccounts(store, trafficTargets, identitiesByService));
    if (namespaces.size === 0) {
      problems.push({
        kind: 'Mesh',
        severity: 'warning',
        namespace: undefined,
        name: options.meshName,
        field: '--mesh-name',
        message: `no namespace is labelled ${MONITORED_BY_LABEL}=${options.meshName}: the mesh has no services (label one with \`trellis namespace add NS --mesh-name ${options.meshName}\`)`,
      });
    }
    const ingressBackends = resolveIngressBackends(store, namespaces, services, problems);
    const egressPolicies = featureGated(resolveEgressPolicies(store, namespaces, problems), 'Egress', settings.enableEgressPolicy, 'enableEgressPolicy', problems);

    // Parts equal to the previous snapshot's are the previous objects: generators key what they
    // share between proxies and snapshots by these objects (`GenerationContext.shared`, src/envoy/context.ts).
    const lists = {
      services,
      trafficTargets: sameOrPrevious(prev?.trafficTargets, trafficTargets),
      trafficSplits: sameOrPrevious(prev?.trafficSplits, trafficSplits),
    };
    const snapshot: MeshSnapshot = {
      generation: options.generation,
      meshName: options.meshName,
      settings: sameOrPrevious(prev?.settings, settings),
      meshConfig,
      namespaces,
      services,
      endpoints,
      identitiesByService,
      servicesByIdentity,
      trafficTargets: lists.trafficTargets,
      trafficSplits: lists.trafficSplits,
      retryPolicies: sameOrPrevious(prev?.retryPolicies, retryPolicies),
      upstreamTrafficSettings: sameOrPrevious(prev?.upstreamTrafficSettings, upstreamTrafficSettings),
      ingressBackends: sameOrPrevious(prev?.ingressBackends, ingressBackends),
      egressPolicies: sameOrPrevious(prev?.egressPolicies, egressPolicies),
      partialPolicies: partial,
      index: indexMeshSnapshot(lists, prev?.index),
    };
    this.#last = { snapshot, trafficTargets: { inputs, problems: trafficTargetProblems } };
    return { snapshot, problems: [...new Map(problems.map((p) => [formatProblem(p), p])).values()] };
  }
}

/**
 * Builds one {@link MeshSnapshot} from the store with a builder of its own (see
 * {@link MeshSnapshotBuilder.build}), for one-off builds (tests, the CLI). A caller that builds
 * again and again (the controller) keeps a {@link MeshSnapshotBuilder}: with this function, a
 * build given `previous` returns new objects for the services and endpoints even where they did
 * not change. Pure: reads only `store` and `options.previous`.
 */
export function buildMeshSnapshot(store: StoreReader, options: BuildOptions): BuildResult {
  return new MeshSnapshotBuilder().build(store, options);
}

/** What the TrafficTargets of a build were resolved from, and the problems that resolution found. */
interface TrafficTargetResolution {
  /** The store's lists of TrafficTarget, HTTPRouteGroup and TCPRoute. */
  readonly inputs: readonly (readonly unknown[])[];
  /** The problems of that resolution (keep-last-good notes included). */
  readonly problems: readonly PolicyProblem[];
}

/**
 * Warnings for the ServiceAccounts the TrafficTargets in force name that exist nowhere: no
 * ServiceAccount object and no workload behind a service runs as them (a typo, most likely).
 * The TrafficTarget stays in force (it grants nothing to a name no workload has).
 */
function unknownServiceAccounts(
  store: StoreReader,
  trafficTargets: readonly TrafficTargetPolicy[],
  identitiesByService: ReadonlyMap<string, readonly ServiceIdentity[]>,
): PolicyProblem[] {
  if (trafficTargets.length === 0) return [];
  const known = new Set<string>(store.list('ServiceAccount').map((o) => serviceIdentity(o.metadata.namespace ?? 'default', o.metadata.name)));
  for (const ids of identitiesByService.values()) for (const id of ids) known.add(id);
  const out: PolicyProblem[] = [];
  for (const tt of trafficTargets) {
    const [namespace, name] = tt.name.split('/');
    const warn = (field: string, id: ServiceIdentity, role: string): void => {
      if (!known.has(id)) out.push({ kind: 'TrafficTarget', namespace, name, field, severity: 'warning', message: `ServiceAccount ${id} exists nowhere (no ServiceAccount object, no workload runs as it); the ${role} applies once it does` });
    };
    warn('spec.destination.name', tt.destination, 'TrafficTarget');
    for (const source of new Set(tt.sources)) warn('spec.sources', source, 'source');
  }
  return out;
}

/**
 * `current` with each policy that has the same name and content (JSON) as one of `previous`
 * replaced by that previous object: resolving again (after any TrafficTarget, HTTPRouteGroup or
 * TCPRoute changed) makes every policy anew, and what is derived from one policy (an identity's
 * inbound side) is shared by its identity.
 */
function samePolicies<T extends { readonly name: string }>(previous: readonly T[] | undefined, current: T[]): T[] {
  if (previous === undefined || previous.length === 0) return current;
  const byName = new Map(previous.map((p) => [p.name, p]));
  return current.map((c) => sameOrPrevious(byName.get(c.name), c));
}

/** `previous` when it has the same content as `current` (JSON), else `current`. */
function sameOrPrevious<T>(previous: T | undefined, current: T): T {
  if (previous === undefined) return current;
  if (Array.isArray(previous) && Array.isArray(current) && sameElements(previous, current)) return previous;
  return JSON.stringify(previous) === JSON.stringify(current) ? previous : current;
}

/** The services part of a MeshSnapshot. */
interface ServicesPart {
  readonly services: MeshService[];
  readonly endpoints: Map<string, MeshEndpoint[]>;
  readonly identitiesByService: Map<string, ServiceIdentity[]>;
  readonly servicesByIdentity: Map<ServiceIdentity, string[]>;
}

/**
 * What one Service resolved to, and from what: the next build reuses it (the same MeshService
 * and endpoint objects, so a diff can compare by identity) when the Service, the pods and pod
 * templates its selector matches, and its Endpoints and EndpointSlices are the same objects.
 */
interface ServiceResolution {
  readonly pods: readonly Pod[];
  readonly templates: readonly PodSpec[];
  readonly endpointsObject: Endpoints | undefined;
  readonly slices: readonly EndpointSlice[];
  readonly identities: ServiceIdentity[];
  /** Per TCP port (duplicates left out): the MeshService without its ClusterIPs, and its endpoints. */
  readonly ports: readonly { readonly service: Omit<MeshService, 'clusterIPs'>; readonly endpoints: MeshEndpoint[] }[];
  readonly problems: readonly PolicyProblem[];
  /** The MeshServices last built from {@link ports}, with the ClusterIPs they got then (set by {@link buildServices}). */
  meshServices: MeshService[] | undefined;
}

/**
 * What one monitored namespace resolved to, and the store lists it was resolved from: a build
 * that finds the same lists takes it whole; one that finds other lists takes from it what they
 * did not change (a Service's resolution, a label index, the warnings of a list).
 */
interface NamespaceResolution {
  /** The namespace's Service, Pod, Deployment, Endpoints and EndpointSlice lists. */
  readonly inputs: readonly [readonly Service[], readonly Pod[], readonly Deployment[], readonly Endpoints[], readonly EndpointSlice[]];
  /** Each Service of `inputs[0]`, in its order, and what it resolved to. */
  readonly services: readonly { readonly svc: Service; readonly resolution: ServiceResolution }[];
  /** Label indexes of `inputs[1]` and `inputs[2]`. */
  readonly podIndex: LabelIndex<Pod>;
  readonly deploymentIndex: LabelIndex<Deployment>;
  /** The sidecar-port warnings of `inputs[0]` and `inputs[1]` ({@link sidecarPortProblems}). */
  readonly sidecarPorts: { readonly services: readonly PolicyProblem[]; readonly pods: readonly PolicyProblem[] };
}

/** What namespace `ns` resolves to in `store`: `known` (its previous resolution) when none of its lists changed, else a new one reusing what it can of `known`. */
function resolveNamespace(store: StoreReader, ns: string, known: NamespaceResolution | undefined): NamespaceResolution {
  const inputs = [
    store.list<Service>('Service', ns),
    store.list<Pod>('Pod', ns),
    store.list<Deployment>('Deployment', ns),
    store.list<Endpoints>('Endpoints', ns),
    store.list<EndpointSlice>('EndpointSlice', ns),
  ] as const;
  if (known && known.inputs.every((list, i) => list === inputs[i])) return known;
  const [services, pods, deployments] = inputs;
  const podIndex = known?.inputs[1] === pods ? known.podIndex : new LabelIndex(pods, (p) => p.metadata.labels);
  const deploymentIndex = known?.inputs[2] === deployments ? known.deploymentIndex : new LabelIndex(deployments, (d) => d.spec.template.metadata?.labels);
  const previous = new Map(known?.services.map((s) => [s.svc, s.resolution]));
  const resolved = services.map((svc) => {
    const selector = svc.spec.selector;
    const selected = podIndex.select(ns, selector).filter((p) => isLive(p) && selectorMatches(selector, p.metadata.labels));
    const templates = deploymentIndex
      .select(ns, selector)
      .filter((d) => selectorMatches(selector, d.spec.template.metadata?.labels))
      .map((d) => d.spec.template.spec ?? {});
    return { svc, resolution: resolveService(store, svc, ns, selected, templates, previous.get(svc)) };
  });
  const sidecarPorts = {
    services: known?.inputs[0] === services ? known.sidecarPorts.services : sidecarPortProblems(ns, services, []),
    pods: known?.inputs[1] === pods ? known.sidecarPorts.pods : sidecarPortProblems(ns, [], pods),
  };
  return { inputs, services: resolved, podIndex, deploymentIndex, sidecarPorts };
}

/**
 * Warnings for the ports of a monitored namespace's Services (`spec.ports[i].port`, a numeric
 * `targetPort`) and Pods (`spec.containers[c].ports[p].containerPort`, TCP) that are one of
 * the sidecar's own ports ({@link SIDECAR_PORTS}): in a cluster the app and Envoy collide on
 * them. A warning only: the objects are used as given.
 */
function sidecarPortProblems(ns: string, services: readonly Service[], pods: readonly Pod[]): readonly PolicyProblem[] {
  const warning = (kind: string, name: string, field: string, port: number): PolicyProblem => ({ kind, namespace: ns, name, field, severity: 'warning', message: sidecarPortMessage(port) });
  return [
    ...services.flatMap((svc) => (svc.spec.ports ?? []).flatMap((p, i) => [
      ...((p.protocol ?? 'TCP') === 'TCP' && SIDECAR_PORTS.has(p.port) ? [warning('Service', svc.metadata.name, `spec.ports[${i}].port`, p.port)] : []),
      ...((p.protocol ?? 'TCP') === 'TCP' && typeof p.targetPort === 'number' && p.targetPort !== p.port && SIDECAR_PORTS.has(p.targetPort)
        ? [warning('Service', svc.metadata.name, `spec.ports[${i}].targetPort`, p.targetPort)] : []),
    ])),
    ...pods.flatMap((pod) => (pod.spec?.containers ?? []).flatMap((c, ci) => (c.ports ?? []).flatMap((p, pi) => (
      (p.protocol ?? 'TCP') === 'TCP' && SIDECAR_PORTS.has(p.containerPort)
        ? [warning('Pod', pod.metadata.name, `spec.containers[${ci}].ports[${pi}].containerPort`, p.containerPort)] : []
    )))),
  ];
}

/** What `svc` resolves to; `known` (its resolution in the previous build of its namespace, for the same Service object) when none of its inputs changed. */
function resolveService(
  store: StoreReader,
  svc: Service,
  ns: string,
  pods: readonly Pod[],
  templates: readonly PodSpec[],
  known: ServiceResolution | undefined,
): ServiceResolution {
  const endpointsObject = store.get<Endpoints>('Endpoints', ns, svc.metadata.name);
  const slices = store.list<EndpointSlice>('EndpointSlice', ns).filter((s) => s.metadata.labels?.[SERVICE_NAME_LABEL] === svc.metadata.name);
  if (
    known &&
    known.endpointsObject === endpointsObject &&
    sameElements(known.pods, pods) &&
    sameElements(known.templates, templates) &&
    sameElements(known.slices, slices)
  ) {
    return known;
  }
  const specs = [...pods.map((p) => p.spec ?? {}), ...templates];
  const identities = new Set<ServiceIdentity>();
  for (const spec of specs) identities.add(serviceIdentity(ns, spec.serviceAccountName || 'default'));
  const problems: PolicyProblem[] = [];
  const tcpPorts = (svc.spec.ports ?? []).filter((p) => (p.protocol ?? 'TCP') === 'TCP');
  const seenPorts = new Set<number>();
  const endpointsByCluster = new Map<string, MeshEndpoint[]>();
  const ports: { service: Omit<MeshService, 'clusterIPs'>; endpoints: MeshEndpoint[] }[] = [];
  const headless = svc.spec.clusterIP === 'None';
  for (const port of tcpPorts) {
    if (seenPorts.has(port.port)) {
      problems.push({ kind: 'Service', namespace: ns, name: svc.metadata.name, field: 'spec.ports', message: `port ${port.port} is listed twice` });
      continue;
    }
    seenPorts.add(port.port);
    const targetPort = resolveTargetPort(port, specs);
    const service = { name: svc.metadata.name, namespace: ns, port: port.port, targetPort, portName: port.name, protocol: portProtocol(port), headless };
    const cluster = clusterName(service);
    const fromObjects = endpointsFromObjects(svc, port, targetPort, tcpPorts.length, endpointsObject, slices);
    const list = fromObjects ?? pods.flatMap((p) => {
      const ip = podIp(p);
      return ip ? [{ ip, port: targetPort }] : [];
    });
    // Two ports with the same targetPort share a cluster: their endpoints merge.
    const merged = uniqueSortedEndpoints([...(endpointsByCluster.get(cluster) ?? []), ...list]);
    endpointsByCluster.set(cluster, merged);
    ports.push({ service, endpoints: merged });
  }
  for (const p of ports) p.endpoints = endpointsByCluster.get(clusterName(p.service))!;
  // New pods or endpoints rarely change the ports: keep the MeshService objects then.
  const samePorts = known !== undefined && JSON.stringify(known.ports.map((p) => p.service)) === JSON.stringify(ports.map((p) => p.service));
  if (samePorts) ports.forEach((p, i) => (p.service = known.ports[i].service));
  const resolution: ServiceResolution = {
    pods,
    templates,
    endpointsObject,
    slices,
    identities: [...identities].sort(),
    ports,
    problems,
    meshServices: samePorts ? known.meshServices : undefined,
  };
  return resolution;
}

/**
 * MeshServices (one per TCP port of a Service in a monitored namespace), their endpoints, and
 * the identities behind them. Services whose inputs did not change since the last build are
 * not resolved again ({@link ServiceResolution}).
 */
function buildServices(namespaces: ReadonlyMap<string, NamespaceResolution>, problems: PolicyProblem[]): ServicesPart {
  const services: MeshService[] = [];
  const endpoints = new Map<string, MeshEndpoint[]>();
  const identitiesByService = new Map<string, ServiceIdentity[]>();
  const servicesByIdentity = new Map<ServiceIdentity, string[]>();
  const clusterIPOwners = new Map<string, string>();
  // Namespace by namespace (`namespaces` is in name order), each in the store's order (by name),
  // which the ClusterIP ownership below depends on.
  for (const [ns, { services: resolved }] of namespaces) {
    for (const { svc, resolution } of resolved) {
      const key = serviceKey({ namespace: ns, name: svc.metadata.name });
      identitiesByService.set(key, resolution.identities);
      for (const id of resolution.identities) {
        const list = servicesByIdentity.get(id) ?? [];
        list.push(key);
        servicesByIdentity.set(id, list);
      }

      const clusterIPs = (
        svc.spec.clusterIP === 'None'
          ? []
          : (svc.spec.clusterIPs ?? (svc.spec.clusterIP ? [svc.spec.clusterIP] : [])).filter((ip) => isIP(ip) !== 0)
      ).filter((ip) => {
        // One address, one service: outbound traffic to it can only be matched to the first.
        const owner = clusterIPOwners.get(ip);
        if (owner === undefined) {
          clusterIPOwners.set(ip, `${ns}/${svc.metadata.name}`);
          return true;
        }
        problems.push({ kind: 'Service', namespace: ns, name: svc.metadata.name, field: 'spec.clusterIP', message: `${ip} is already the ClusterIP of Service ${owner}; not used for this one` });
        return false;
      });
      problems.push(...resolution.problems);
      const reuse = resolution.meshServices && resolution.meshServices.every((m) => sameElements(m.clusterIPs, clusterIPs));
      const meshServices = reuse ? resolution.meshServices! : resolution.ports.map((p) => ({ ...p.service, clusterIPs }));
      resolution.meshServices = meshServices;
      for (let i = 0; i < meshServices.length; i++) {
        services.push(meshServices[i]);
        endpoints.set(clusterName(meshServices[i]), resolution.ports[i].endpoints);
      }
    }
  }
  services.sort((a, b) => (a.namespace !== b.namespace ? (a.namespace < b.namespace ? -1 : 1) : a.name !== b.name ? (a.name < b.name ? -1 : 1) : a.port - b.port));
  return { services, endpoints, identitiesByService, servicesByIdentity };
}
