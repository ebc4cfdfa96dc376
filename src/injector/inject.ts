/**
 * The sidecar injector's decision and mutation of a pod, as OSM's `osm-injector` makes them
 * (pkg/injector of OSM v1.2 and later): which pods get a sidecar, and what an injected pod holds
 * (the `osm-init` init container, the `envoy` sidecar, the bootstrap volume, the
 * `osm-proxy-uuid` label, rewritten probes, Prometheus annotations). Pure: the caller reads the
 * namespace and MeshConfig, issues the certificate and creates the bootstrap Secret.
 */
import type { V1Container, V1EnvVar, V1Pod, V1Secret, V1Volume } from '@kubernetes/client-node';
import { stringify } from 'yaml';
import { MONITORED_BY_LABEL } from '../catalog/labels.js';
import { DEFAULT_ADMIN_PORT, envoyBootstrap } from '../envoy/bootstrap.js';
import { parseCommonName, proxyCommonName } from '../proxy/types.js';
import { PROXY_UUID_LABEL } from '../proxy/pod-check.js';
import type { MeshConfig, Pod } from '../store/objects.js';
import { splitHostPort } from '../util/address.js';
import { INBOUND_PORT, interceptionOptions, PROXY_UID, type InterceptionOptions } from './iptables.js';
import { InjectionRefusal } from './refusal.js';
import { HEALTHCHECK_PORT, httpConnectionManager, ORIGINAL_PROBES_ANNOTATION, PROBE_PORTS, probeResources, recordedProbes, rewriteProbes, staticListener, type OriginalProbe } from './probes.js';

/** The annotation (namespace or pod; the pod's wins) that turns injection on or off. */
export const SIDECAR_INJECTION_ANNOTATION = 'openservicemesh.io/sidecar-injection';
/** The annotation (namespace or pod; the pod's wins) that turns Envoy's Prometheus listener on. */
export const METRICS_ANNOTATION = 'openservicemesh.io/metrics';
/** Name of the init container that sets up traffic interception (OSM's). */
export const INIT_CONTAINER_NAME = 'osm-init';
/** Name of the Envoy sidecar container (OSM's). */
export const ENVOY_CONTAINER_NAME = 'envoy';
/** Name of the container answering rewritten `tcpSocket` probes (OSM's). */
export const HEALTHCHECK_CONTAINER_NAME = 'osm-healthcheck';
/** Name of the pod volume holding the bootstrap Secret (OSM's): its presence marks an injected pod. */
export const BOOTSTRAP_VOLUME = 'envoy-bootstrap-config-volume';
/** Prefix of the per-pod bootstrap Secret's name; the proxy UUID follows. */
export const BOOTSTRAP_SECRET_PREFIX = 'envoy-bootstrap-config-';
/** Where the bootstrap Secret is mounted in the sidecar. */
export const BOOTSTRAP_MOUNT_PATH = '/etc/envoy';
/** Envoy's Prometheus listener port and path. */
export const PROMETHEUS_PORT = 15010;
/** Path Envoy's admin interface serves Prometheus metrics on, and the scrape path. */
export const PROMETHEUS_PATH = '/stats/prometheus';
/** Envoy's log level when MeshConfig `spec.sidecar.logLevel` is unset (OSM's default). */
export const DEFAULT_ENVOY_LOG_LEVEL = 'error';
/** Namespaces never injected, besides the injector's own (OSM's). */
export const NEVER_INJECTED_NAMESPACES: readonly string[] = ['kube-system', 'kube-public'];

/** What the injector knows of a namespace: its labels and annotations. */
export interface NamespaceMeta {
  readonly name: string;
  readonly labels?: Readonly<Record<string, string>>;
  readonly annotations?: Readonly<Record<string, string>>;
}

/** A pod's name as its request gives it: `metadata.name`, else `generateName` (the API server names it after admission). */
function requestedName(pod: V1Pod): string {
  return pod.metadata?.name ?? pod.metadata?.generateName ?? '';
}

/** The outcome of {@link injectionDecision}. */
export type InjectionDecision = { readonly inject: true } | { readonly inject: false; readonly reason: string };

function annotationSwitch(annotations: Readonly<Record<string, string>> | undefined, key: string, where: string): boolean | undefined {
  const value = annotations?.[key];
  if (value === undefined) return undefined;
  switch (value.toLowerCase()) {
    case 'enabled':
    case 'yes':
    case 'true':
      return true;
    case 'disabled':
    case 'no':
    case 'false':
      return false;
    default:
      throw new InjectionRefusal(`${where}: metadata.annotations["${key}"]`, `${JSON.stringify(value)} is not one of enabled, disabled (yes/no, true/false)`);
  }
}

/**
 * Whether a pod being created gets a sidecar (OSM's `mustInject`): not on the host network; its
 * namespace is in the mesh (`openservicemesh.io/monitored-by=<mesh>`) and is neither kube-system,
 * kube-public nor the injector's own; then the pod's `openservicemesh.io/sidecar-injection`
 * annotation decides when it has one, else the namespace's (`enabled`/`yes`/`true`,
 * `disabled`/`no`/`false`, any case); without either, no sidecar.
 * @param namespace the pod's namespace; undefined when it does not exist (no sidecar).
 * @throws InjectionRefusal naming the annotation when its value is none of those words.
 */
export function injectionDecision(pod: V1Pod, namespace: NamespaceMeta | undefined, options: { meshName: string; injectorNamespace: string }): InjectionDecision {
  if (pod.spec?.hostNetwork === true) return { inject: false, reason: 'the pod uses the host network (spec.hostNetwork)' };
  if (!namespace) return { inject: false, reason: 'the namespace is unknown' };
  if (NEVER_INJECTED_NAMESPACES.includes(namespace.name) || namespace.name === options.injectorNamespace) {
    return { inject: false, reason: `namespace ${namespace.name} is never injected` };
  }
  if (namespace.labels?.[MONITORED_BY_LABEL] !== options.meshName) return { inject: false, reason: `namespace ${namespace.name} is not in mesh ${options.meshName}` };
  const podName = `Pod ${namespace.name}/${requestedName(pod)}`;
  const podSwitch = annotationSwitch(pod.metadata?.annotations, SIDECAR_INJECTION_ANNOTATION, podName);
  const namespaceSwitch = annotationSwitch(namespace.annotations, SIDECAR_INJECTION_ANNOTATION, `Namespace ${namespace.name}`);
  const on = podSwitch ?? namespaceSwitch;
  if (on === true) return { inject: true };
  return { inject: false, reason: on === false ? `${podSwitch === false ? 'the pod' : 'the namespace'} disables injection` : 'injection is not enabled on the pod or its namespace' };
}

/** Settings of the injector that are not in the MeshConfig. */
export interface InjectorSettings {
  readonly meshName: string;
  /** `host:port` of the controller's ADS server as a pod reaches it. */
  readonly xdsAddress: string;
  /** Envoy image when MeshConfig `spec.sidecar.envoyImage` is unset. */
  readonly envoyImage: string;
  /** Image holding `trellis` (the init and healthcheck containers) when MeshConfig `spec.sidecar.initContainerImage` is unset. */
  readonly trellisImage: string;
  /** How `trellis` is run in that image, e.g. `['node', '/app/bin/trellis.js']`. */
  readonly trellisCommand: readonly string[];
  /** Incremental (delta) xDS in the bootstrap. */
  readonly delta?: boolean;
  /**
   * Envoy's admin interface on this Unix socket instead of 127.0.0.1:15000 (the lab reaches it
   * from the host so); the metrics cluster then points there too.
   */
  readonly adminSocketPath?: string;
}

/** MeshConfig `spec.sidecar` fields the injector reads beyond those in {@link MeshConfig}. */
interface SidecarSpec {
  envoyImage?: string;
  initContainerImage?: string;
  logLevel?: string;
  resources?: V1Container['resources'];
  enablePrivilegedInitContainer?: boolean;
}

function sidecarSpec(meshConfig: MeshConfig | undefined): SidecarSpec {
  const sidecar: unknown = meshConfig?.spec?.sidecar;
  return typeof sidecar === 'object' && sidecar !== null ? (sidecar as SidecarSpec) : {};
}

/** The args of `trellis iptables-init` that rebuild `options` (see {@link parseInterceptionArgs}). */
export function interceptionArgs(options: InterceptionOptions): string[] {
  const list = (flag: string, values: readonly (string | number)[]) => (values.length > 0 ? [`--${flag}=${values.join(',')}`] : []);
  return [
    ...list('outbound-ip-range-exclusions', options.outboundIPRangeExclusions),
    ...list('outbound-ip-range-inclusions', options.outboundIPRangeInclusions),
    ...list('outbound-port-exclusions', options.outboundPortExclusions),
    ...list('inbound-port-exclusions', options.inboundPortExclusions),
    ...list('network-interface-exclusions', options.networkInterfaceExclusions),
  ];
}

const DOWNWARD_ENV: readonly [string, string][] = [
  ['POD_UID', 'metadata.uid'],
  ['POD_NAME', 'metadata.name'],
  ['POD_NAMESPACE', 'metadata.namespace'],
  ['POD_IP', 'status.podIP'],
  ['SERVICE_ACCOUNT', 'spec.serviceAccountName'],
];

function envoyContainer(serviceAccount: string, namespace: string, meshConfig: MeshConfig | undefined, probes: readonly OriginalProbe[], settings: InjectorSettings): V1Container {
  const sidecar = sidecarSpec(meshConfig);
  const kinds = new Set(probes.filter((p) => p.protocol !== 'tcp').map((p) => p.kind));
  return {
    name: ENVOY_CONTAINER_NAME,
    image: sidecar.envoyImage || settings.envoyImage,
    imagePullPolicy: 'IfNotPresent',
    securityContext: { allowPrivilegeEscalation: false, runAsUser: PROXY_UID },
    ports: [
      { name: 'proxy-admin', containerPort: DEFAULT_ADMIN_PORT },
      { name: 'proxy-inbound', containerPort: INBOUND_PORT },
      { name: 'proxy-metrics', containerPort: PROMETHEUS_PORT },
      ...(['liveness', 'readiness', 'startup'] as const).filter((k) => kinds.has(k)).map((k) => ({ name: `${k}-port`, containerPort: PROBE_PORTS[k] })),
    ],
    volumeMounts: [{ name: BOOTSTRAP_VOLUME, readOnly: true, mountPath: BOOTSTRAP_MOUNT_PATH }],
    command: ['envoy'],
    args: ['--log-level', sidecar.logLevel || DEFAULT_ENVOY_LOG_LEVEL, '--config-path', `${BOOTSTRAP_MOUNT_PATH}/bootstrap.yaml`, '--service-cluster', `${serviceAccount}.${namespace}`],
    ...(sidecar.resources ? { resources: sidecar.resources } : {}),
    env: DOWNWARD_ENV.map(([name, fieldPath]): V1EnvVar => ({ name, valueFrom: { fieldRef: { fieldPath } } })),
  };
}

function initContainer(options: InterceptionOptions, meshConfig: MeshConfig | undefined, settings: InjectorSettings): V1Container {
  const sidecar = sidecarSpec(meshConfig);
  return {
    name: INIT_CONTAINER_NAME,
    image: sidecar.initContainerImage || settings.trellisImage,
    imagePullPolicy: 'IfNotPresent',
    command: [...settings.trellisCommand],
    args: ['iptables-init', ...interceptionArgs(options)],
    securityContext: {
      allowPrivilegeEscalation: sidecar.enablePrivilegedInitContainer === true,
      privileged: sidecar.enablePrivilegedInitContainer === true,
      capabilities: { add: ['NET_ADMIN'] },
      runAsNonRoot: false,
      runAsUser: 0,
    },
  };
}

function healthcheckContainer(meshConfig: MeshConfig | undefined, settings: InjectorSettings): V1Container {
  return {
    name: HEALTHCHECK_CONTAINER_NAME,
    image: sidecarSpec(meshConfig).initContainerImage || settings.trellisImage,
    imagePullPolicy: 'IfNotPresent',
    command: [...settings.trellisCommand],
    args: ['healthcheck', `--port=${HEALTHCHECK_PORT}`],
    ports: [{ containerPort: HEALTHCHECK_PORT }],
    securityContext: { allowPrivilegeEscalation: false, runAsNonRoot: true, runAsUser: 65532 },
  };
}

function bootstrapVolume(uuid: string): V1Volume {
  return { name: BOOTSTRAP_VOLUME, secret: { secretName: `${BOOTSTRAP_SECRET_PREFIX}${uuid}` } };
}

/** The UUID of an already injected pod (from its bootstrap volume's Secret), or undefined. */
export function injectedUuid(pod: V1Pod): string | undefined {
  const volume = pod.spec?.volumes?.find((v) => v.name === BOOTSTRAP_VOLUME);
  return volume ? (volume.secret?.secretName ?? '').replace(BOOTSTRAP_SECRET_PREFIX, '') : undefined;
}

/** What {@link injectPod} made: the pod to admit and what the bootstrap Secret is built from. */
export interface Injection {
  readonly pod: V1Pod;
  readonly uuid: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  /** The original probes (the bootstrap's probe listeners and clusters are made from them). */
  readonly probes: readonly OriginalProbe[];
  readonly metrics: boolean;
  /** True when the pod was injected already: only its UUID label and bootstrap volume changed. */
  readonly reinjected: boolean;
}

/**
 * The injected pod (a copy; `pod` is not changed), as OSM's `createPatch` makes it: label
 * {@link PROXY_UUID_LABEL}=`uuid`; the volume {@link BOOTSTRAP_VOLUME} of Secret
 * `envoy-bootstrap-config-<uuid>`; the init container `osm-init` running `trellis iptables-init`
 * with the interception lists of the MeshConfig and the pod's annotations; the probes rewritten
 * ({@link rewriteProbes}) and, when a `tcpSocket` probe was, the `osm-healthcheck` container;
 * the `envoy` sidecar (image, log level and resources from MeshConfig `spec.sidecar`, uid 1500);
 * with metrics on (the pod's `openservicemesh.io/metrics`, else the namespace's), Prometheus'
 * scrape annotations for 15010 `/stats/prometheus`.
 *
 * The original probes are recorded in {@link ORIGINAL_PROBES_ANNOTATION}. A pod injected
 * already (it has the bootstrap volume, e.g. a copy of an injected pod's spec) gets only a new
 * UUID label and volume: it never gets a second sidecar, two pods never share a proxy UUID, and
 * its bootstrap serves the probes of that annotation (its probes are rewritten already).
 * @throws InjectionRefusal or InterceptionConfigError naming the pod field, annotation or
 *   MeshConfig field that cannot be applied: an exclusion list that does not parse, a probe
 *   port that does not resolve, an annotation that is not a switch, containers missing, a
 *   service account name that cannot be the xDS identity's (not a DNS label).
 */
export function injectPod(
  original: V1Pod,
  namespace: NamespaceMeta,
  meshConfig: MeshConfig | undefined,
  uuid: string,
  settings: InjectorSettings,
): Injection {
  const pod = structuredClone(original);
  const spec = pod.spec;
  if (!spec || !Array.isArray(spec.containers) || spec.containers.length === 0) throw new InjectionRefusal('spec.containers', 'the pod has no containers');
  const serviceAccount = spec.serviceAccountName || 'default';
  // A ServiceAccount name may hold dots (a DNS subdomain); the xDS certificate's CommonName
  // needs a DNS label there, or the controller refuses every connection of the sidecar.
  try {
    parseCommonName(proxyCommonName(uuid, 'sidecar', namespace.name, serviceAccount));
  } catch {
    throw new InjectionRefusal(
      'spec.serviceAccountName',
      `${JSON.stringify(serviceAccount)} is not a DNS label: the sidecar's xDS identity <uuid>.sidecar.<serviceaccount>.<namespace>.cluster.local would not parse`,
    );
  }
  const podName = `Pod ${namespace.name}/${requestedName(pod)}`;
  pod.metadata = { ...pod.metadata, labels: { ...pod.metadata?.labels, [PROXY_UUID_LABEL]: uuid } };
  const metrics =
    annotationSwitch(original.metadata?.annotations, METRICS_ANNOTATION, podName) ?? annotationSwitch(namespace.annotations, METRICS_ANNOTATION, `Namespace ${namespace.name}`) ?? false;
  const base = { uuid, namespace: namespace.name, serviceAccount, metrics };

  if (injectedUuid(original) !== undefined) {
    spec.volumes = (spec.volumes ?? []).map((v) => (v.name === BOOTSTRAP_VOLUME ? bootstrapVolume(uuid) : v));
    // Its probes point at the probe listeners already: the new bootstrap serves them again.
    return { ...base, pod, probes: recordedProbes(original), reinjected: true };
  }
  for (const name of [INIT_CONTAINER_NAME, ENVOY_CONTAINER_NAME]) {
    for (const [list, containers] of [['initContainers', spec.initContainers ?? []], ['containers', spec.containers]] as const) {
      const i = containers.findIndex((c) => c.name === name);
      if (i >= 0) throw new InjectionRefusal(`spec.${list}[${i}].name`, `a container is already named ${name}, the name of the injected one`);
    }
  }
  // Throws InterceptionConfigError naming the MeshConfig field or annotation.
  const named = { ...original, metadata: { ...original.metadata, namespace: namespace.name, name: requestedName(original) } };
  const interception = interceptionOptions(meshConfig, named as unknown as Pod);
  const probes = rewriteProbes(pod);
  if (probes.length > 0) pod.metadata.annotations = { ...pod.metadata.annotations, [ORIGINAL_PROBES_ANNOTATION]: JSON.stringify(probes) };
  if (metrics) {
    pod.metadata.annotations = { ...pod.metadata.annotations, 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(PROMETHEUS_PORT), 'prometheus.io/path': PROMETHEUS_PATH };
  }
  spec.volumes = [...(spec.volumes ?? []), bootstrapVolume(uuid)];
  spec.initContainers = [...(spec.initContainers ?? []), initContainer(interception, meshConfig, settings)];
  if (probes.some((p) => p.protocol === 'tcp')) spec.containers.push(healthcheckContainer(meshConfig, settings));
  spec.containers.push(envoyContainer(serviceAccount, namespace.name, meshConfig, probes, settings));
  return { ...base, pod, probes, reinjected: false };
}

/** The metrics listener and cluster: `inbound-prometheus-listener` on 15010 → `envoy-metrics-cluster` (Envoy's admin). */
function metricsResources(settings: InjectorSettings): { listeners: Record<string, unknown>[]; clusters: Record<string, unknown>[] } {
  const address = settings.adminSocketPath !== undefined ? { pipe: { path: settings.adminSocketPath } } : { socket_address: { address: '127.0.0.1', port_value: DEFAULT_ADMIN_PORT } };
  return {
    listeners: [
      staticListener('inbound-prometheus-listener', PROMETHEUS_PORT, [
        { filters: [httpConnectionManager('prometheus', [{ match: { prefix: PROMETHEUS_PATH }, route: { cluster: 'envoy-metrics-cluster', prefix_rewrite: PROMETHEUS_PATH } }])] },
      ]),
    ],
    clusters: [
      { name: 'envoy-metrics-cluster', type: 'STATIC', connect_timeout: '1s', load_assignment: { cluster_name: 'envoy-metrics-cluster', endpoints: [{ lb_endpoints: [{ endpoint: { address } }] }] } },
    ],
  };
}

/** The bootstrap Secret's data keys, as files under {@link BOOTSTRAP_MOUNT_PATH}. */
export const BOOTSTRAP_FILES = { bootstrap: 'bootstrap.yaml', cert: 'cert.pem', key: 'key.pem', ca: 'ca.pem' } as const;

/**
 * The Envoy bootstrap of an injected pod ({@link envoyBootstrap}: node id = the xDS certificate's
 * CN `<uuid>.sidecar.<sa>.<ns>.cluster.local`, ADS to `settings.xdsAddress` with the files of
 * the Secret), plus the probe listeners and clusters ({@link probeResources}) and, with metrics,
 * `inbound-prometheus-listener`/`envoy-metrics-cluster`, as static resources.
 * @param directory where the Secret's files are as Envoy sees them (default {@link BOOTSTRAP_MOUNT_PATH}).
 */
export function injectedBootstrap(injection: Injection, settings: InjectorSettings, directory: string = BOOTSTRAP_MOUNT_PATH): Record<string, unknown> {
  const xds = splitHostPort(settings.xdsAddress);
  const bootstrap = envoyBootstrap({
    nodeId: proxyCommonName(injection.uuid, 'sidecar', injection.namespace, injection.serviceAccount),
    xdsHost: xds.host,
    xdsPort: xds.port,
    certFile: `${directory}/${BOOTSTRAP_FILES.cert}`,
    keyFile: `${directory}/${BOOTSTRAP_FILES.key}`,
    caFile: `${directory}/${BOOTSTRAP_FILES.ca}`,
    delta: settings.delta,
    adminSocketPath: settings.adminSocketPath,
  }) as unknown as Record<string, unknown> & { static_resources: { clusters: unknown[]; listeners?: unknown[] } };
  const probes = probeResources(injection.probes);
  const metrics = injection.metrics ? metricsResources(settings) : { listeners: [], clusters: [] };
  const listeners = [...probes.listeners, ...metrics.listeners];
  bootstrap.static_resources = {
    ...bootstrap.static_resources,
    clusters: [...bootstrap.static_resources.clusters, ...probes.clusters, ...metrics.clusters],
    ...(listeners.length > 0 ? { listeners } : {}),
  };
  return bootstrap;
}

/**
 * The per-pod bootstrap Secret `envoy-bootstrap-config-<uuid>` in the pod's namespace: data
 * `bootstrap.yaml` ({@link injectedBootstrap}), `cert.pem`/`key.pem` (the xDS client
 * certificate, CN with the UUID), `ca.pem` (the mesh root the controller's certificate chains to).
 */
export function bootstrapSecret(injection: Injection, settings: InjectorSettings, certificate: { certPem: string; keyPem: string; caPem: string }): V1Secret {
  const b64 = (text: string) => Buffer.from(text).toString('base64');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: `${BOOTSTRAP_SECRET_PREFIX}${injection.uuid}`,
      namespace: injection.namespace,
      labels: { [PROXY_UUID_LABEL]: injection.uuid, 'app.kubernetes.io/name': 'trellis', 'app.kubernetes.io/component': 'sidecar-bootstrap' },
    },
    type: 'Opaque',
    data: {
      [BOOTSTRAP_FILES.bootstrap]: b64(stringify(injectedBootstrap(injection, settings))),
      [BOOTSTRAP_FILES.cert]: b64(certificate.certPem),
      [BOOTSTRAP_FILES.key]: b64(certificate.keyPem),
      [BOOTSTRAP_FILES.ca]: b64(certificate.caPem),
    },
  };
}
