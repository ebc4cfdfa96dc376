/**
 * Synthetic mesh for the benchmark: writes a manifests directory the controller loads with
 * `--manifests`, and the edits of the four change scenarios.
 *
 * Layout of the directory:
 * - `00-namespaces.yaml`: the namespaces, labelled `openservicemesh.io/monitored-by: osm`.
 * - `01-meshconfig.yaml`: the MeshConfig (permissive off in `smi` mode, on in `permissive`).
 * - `services/<ns>/<svc>.yaml`: per service its ServiceAccount (one identity per service), the
 *   Service (port 8080, `http`) and E Pods (IP, service account, `version` v1/v2 alternately);
 *   a TrafficSplit apex also carries its two backend Services (`<svc>-v1`, `<svc>-v2`).
 * - `access/<ns>.yaml`: one HTTPRouteGroup per namespace and one TrafficTarget per destination
 *   identity listing its K sources (written in both modes; permissive mode ignores them).
 * - `splits.yaml`: the TrafficSplits (apex + 2 backends, 50/50).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';

/** Policy mode of the generated mesh. */
export type MeshMode = 'smi' | 'permissive';

/** Size and shape of the generated mesh. */
export interface MeshOptions {
  /** Number of services S (each with its own identity). */
  readonly services: number;
  /** Endpoints (Pods) per service E. */
  readonly endpoints: number;
  /** Destinations each identity may reach K (SMI TrafficTargets); clamped to S − 1. */
  readonly reach: number;
  readonly mode: MeshMode;
  /** Number of namespaces (default: S / 50, between 2 and 20). */
  readonly namespaces?: number;
  /** Number of TrafficSplits (default: S / 50, at least 1). */
  readonly splits?: number;
}

/** One generated service and its identity (service account of the same name). */
export interface BenchService {
  readonly index: number;
  readonly namespace: string;
  readonly name: string;
  readonly serviceAccount: string;
  readonly clusterIP: string;
  readonly podIps: readonly string[];
}

/** One generated TrafficSplit: the apex service index and its two backend Services. */
export interface BenchSplit {
  readonly name: string;
  readonly apex: number;
  readonly weights: readonly [number, number];
}

/** What was generated, with the reach graph the scenarios need. */
export interface MeshPlan {
  readonly options: Required<MeshOptions>;
  readonly namespaces: readonly string[];
  readonly services: readonly BenchService[];
  readonly splits: readonly BenchSplit[];
  /** `reachOf[i]`: the service indexes identity i may reach (SMI). */
  readonly reachOf: readonly (readonly number[])[];
  /** `sourcesOf[d]`: the identity indexes allowed to reach service d (SMI). */
  readonly sourcesOf: readonly (readonly number[])[];
}

/** The mesh name the generated namespaces are monitored by. */
export const MESH_NAME = 'osm';
/** Service port of every generated service. */
export const SERVICE_PORT = 8080;
/** Name of the per-namespace HTTPRouteGroup. */
export const ROUTE_GROUP = 'bench-routes';

const pad = (n: number, width = 4): string => String(n).padStart(width, '0');

/** An IPv4 address in `10.0.0.0/8` (pods) or `172.16.0.0/12` (cluster IPs) for a running index. */
function ipv4(base: [number, number], index: number): string {
  const n = index + 256; // stay clear of x.x.0.0
  return `${base[0]}.${base[1] + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
}

/**
 * Builds the plan of a mesh: names, IPs, splits and the reach graph. Identity i reaches the K
 * services `(i + 1 + m·⌊S/K⌋) mod S`, m = 0…K−1, so each service has exactly K sources and the
 * reach spreads over the namespaces. Deterministic.
 * @throws Error when a count is not a positive integer (reach may be 0).
 */
export function planMesh(options: MeshOptions): MeshPlan {
  const S = options.services;
  for (const [name, v] of [['services', S], ['endpoints', options.endpoints]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${name} must be a positive integer, got ${v}`);
  }
  if (!Number.isInteger(options.reach) || options.reach < 0) throw new Error(`reach must be a non-negative integer, got ${options.reach}`);
  const reach = Math.min(options.reach, S - 1);
  const nsCount = options.namespaces ?? Math.min(20, Math.max(2, Math.ceil(S / 50)));
  const splitCount = Math.min(S, options.splits ?? Math.max(1, Math.ceil(S / 50)));
  const full: Required<MeshOptions> = { ...options, reach, namespaces: nsCount, splits: splitCount };
  const namespaces = Array.from({ length: nsCount }, (_, i) => `bench-${pad(i, 2)}`);
  const services: BenchService[] = [];
  for (let i = 0; i < S; i++) {
    services.push({
      index: i,
      namespace: namespaces[i % nsCount],
      name: `svc-${pad(i)}`,
      serviceAccount: `svc-${pad(i)}`,
      clusterIP: ipv4([172, 16], i),
      podIps: Array.from({ length: options.endpoints }, (_, j) => ipv4([10, 0], i * options.endpoints + j)),
    });
  }
  const step = reach > 0 ? Math.max(1, Math.floor(S / reach)) : 1;
  const reachOf: number[][] = [];
  const sourcesOf: number[][] = Array.from({ length: S }, () => []);
  for (let i = 0; i < S; i++) {
    const list: number[] = [];
    for (let m = 0; m < reach; m++) list.push((i + 1 + m * step) % S);
    reachOf.push(list);
    for (const d of list) sourcesOf[d].push(i);
  }
  const splits: BenchSplit[] = [];
  for (let k = 0; k < splitCount; k++) {
    // +1: with N < S the proxies run as identities ⌊j·S/N⌋, and the sources of apex a are
    // a − 1 − m·⌊S/K⌋; the offset makes some of them connected proxies.
    const apex = (Math.floor((k * S) / splitCount) + 1) % S;
    splits.push({ name: `split-${pad(apex)}`, apex, weights: [50, 50] });
  }
  return { options: full, namespaces, services, splits, reachOf, sourcesOf };
}

type Doc = Record<string, unknown>;

function serviceAccountDoc(svc: BenchService): Doc {
  return { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: svc.serviceAccount, namespace: svc.namespace } };
}

function serviceDoc(namespace: string, name: string, selector: Record<string, string>, clusterIP: string): Doc {
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: { name, namespace, labels: selector },
    spec: { clusterIP, selector, ports: [{ name: 'http', port: SERVICE_PORT, targetPort: SERVICE_PORT }] },
  };
}

function podDocs(svc: BenchService, podIps: readonly string[]): Doc[] {
  return podIps.map((ip, j) => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `${svc.name}-${pad(j, 3)}`, namespace: svc.namespace, labels: { app: svc.name, version: j % 2 === 0 ? 'v1' : 'v2' } },
    spec: {
      serviceAccountName: svc.serviceAccount,
      containers: [{ name: 'app', image: 'bench/app:1', ports: [{ name: 'http', containerPort: SERVICE_PORT }] }],
    },
    status: { phase: 'Running', podIP: ip },
  }));
}

function yamlDocs(docs: readonly Doc[]): string {
  return docs.map((d) => stringify(d)).join('---\n');
}

/** Relative path of a service's file. */
export function serviceFile(svc: Pick<BenchService, 'namespace' | 'name'>): string {
  return path.join('services', svc.namespace, `${svc.name}.yaml`);
}

/**
 * The text of a service's file: ServiceAccount, Service, Pods, and for a split apex its two
 * backend Services (selecting the `version: v1` / `v2` pods).
 * @param podIps overrides the plan's pod IPs (the endpoint-change scenario).
 */
export function serviceFileText(plan: MeshPlan, index: number, podIps?: readonly string[]): string {
  const svc = plan.services[index];
  const docs: Doc[] = [serviceAccountDoc(svc), serviceDoc(svc.namespace, svc.name, { app: svc.name }, svc.clusterIP)];
  if (plan.splits.some((s) => s.apex === index)) {
    docs.push(serviceDoc(svc.namespace, `${svc.name}-v1`, { app: svc.name, version: 'v1' }, ipv4([172, 24], index * 2)));
    docs.push(serviceDoc(svc.namespace, `${svc.name}-v2`, { app: svc.name, version: 'v2' }, ipv4([172, 24], index * 2 + 1)));
  }
  docs.push(...podDocs(svc, podIps ?? svc.podIps));
  return yamlDocs(docs);
}

function routeGroupDoc(namespace: string): Doc {
  return {
    apiVersion: 'specs.smi-spec.io/v1alpha4',
    kind: 'HTTPRouteGroup',
    metadata: { name: ROUTE_GROUP, namespace },
    spec: { matches: [{ name: 'all', pathRegex: '.*', methods: ['*'] }] },
  };
}

function trafficTargetDoc(dest: Pick<BenchService, 'namespace' | 'serviceAccount'>, sources: readonly BenchService[]): Doc {
  return {
    apiVersion: 'access.smi-spec.io/v1alpha3',
    kind: 'TrafficTarget',
    metadata: { name: `tt-${dest.serviceAccount}`, namespace: dest.namespace },
    spec: {
      destination: { kind: 'ServiceAccount', name: dest.serviceAccount, namespace: dest.namespace },
      sources: sources.map((s) => ({ kind: 'ServiceAccount', name: s.serviceAccount, namespace: s.namespace })),
      rules: [{ kind: 'HTTPRouteGroup', name: ROUTE_GROUP, matches: ['all'] }],
    },
  };
}

/** The MeshConfig; `cipherSuites` given = the mesh-config-change scenario. */
export function meshConfigText(mode: MeshMode, cipherSuites?: readonly string[]): string {
  return stringify({
    apiVersion: 'config.openservicemesh.io/v1alpha2',
    kind: 'MeshConfig',
    metadata: { name: 'osm-mesh-config', namespace: 'osm-system' },
    spec: {
      traffic: { enablePermissiveTrafficPolicyMode: mode === 'permissive', enableEgress: false },
      sidecar: { tlsMinProtocolVersion: 'TLSv1_2', tlsMaxProtocolVersion: 'TLSv1_3', ...(cipherSuites ? { cipherSuites: [...cipherSuites] } : {}) },
    },
  });
}

/** The text of `splits.yaml`; `override` replaces the weights of one split (the split-change scenario). */
export function splitsText(plan: MeshPlan, override?: { index: number; weights: readonly [number, number] }): string {
  return yamlDocs(
    plan.splits.map((split, k) => {
      const apex = plan.services[split.apex];
      const weights = override?.index === k ? override.weights : split.weights;
      return {
        apiVersion: 'split.smi-spec.io/v1alpha2',
        kind: 'TrafficSplit',
        metadata: { name: split.name, namespace: apex.namespace },
        spec: {
          service: `${apex.name}.${apex.namespace}`,
          backends: [
            { service: `${apex.name}-v1`, weight: weights[0] },
            { service: `${apex.name}-v2`, weight: weights[1] },
          ],
        },
      };
    }),
  );
}

/**
 * Writes the whole manifests directory of `plan` into `dir` (created if needed).
 * @returns the number of files written.
 */
export async function writeMesh(dir: string, plan: MeshPlan): Promise<number> {
  let files = 0;
  const put = async (rel: string, text: string): Promise<void> => {
    const file = path.join(dir, rel);
    await mkdir(path.dirname(file), { recursive: true });
    await writeFile(file, text);
    files++;
  };
  await put(
    '00-namespaces.yaml',
    yamlDocs(plan.namespaces.map((name) => ({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: { 'openservicemesh.io/monitored-by': MESH_NAME } } }))),
  );
  await put('01-meshconfig.yaml', meshConfigText(plan.options.mode));
  for (const svc of plan.services) await put(serviceFile(svc), serviceFileText(plan, svc.index));
  for (const ns of plan.namespaces) {
    const docs: Doc[] = [routeGroupDoc(ns)];
    for (const svc of plan.services) {
      if (svc.namespace !== ns || plan.sourcesOf[svc.index].length === 0) continue;
      docs.push(trafficTargetDoc(svc, plan.sourcesOf[svc.index].map((i) => plan.services[i])));
    }
    await put(path.join('access', `${ns}.yaml`), yamlDocs(docs));
  }
  await put('splits.yaml', splitsText(plan));
  return files;
}

/** One file edit of a scenario, and the identities whose proxies it should reach (SMI). */
export interface ScenarioEdit {
  /** Path relative to the manifests directory. */
  readonly file: string;
  readonly text: string;
  /** Identity (service) indexes whose proxies should receive something, in SMI mode. */
  readonly affectedIdentities: readonly number[];
  /** Every proxy should receive something (mode or scenario touches all). */
  readonly affectsAll: boolean;
  readonly description: string;
}

/** (a) One pod IP of service `target` changes. */
export function endpointChange(plan: MeshPlan, target: number): ScenarioEdit {
  const svc = plan.services[target];
  const ips = [...svc.podIps];
  ips[0] = ipv4([10, 200], target);
  return {
    file: serviceFile(svc),
    text: serviceFileText(plan, target, ips),
    affectedIdentities: plan.sourcesOf[target],
    affectsAll: plan.options.mode === 'permissive',
    description: `pod ${svc.name}-000 of ${svc.namespace}/${svc.name}: IP ${svc.podIps[0]} → ${ips[0]}`,
  };
}

/** (b) The weights of split `index` go from 50/50 to 80/20. */
export function splitChange(plan: MeshPlan, index = 0): ScenarioEdit {
  const split = plan.splits[index];
  return {
    file: 'splits.yaml',
    text: splitsText(plan, { index, weights: [80, 20] }),
    affectedIdentities: plan.sourcesOf[split.apex],
    affectsAll: plan.options.mode === 'permissive',
    description: `TrafficSplit ${plan.services[split.apex].namespace}/${split.name}: 50/50 → 80/20`,
  };
}

/**
 * (c) A new service (its own identity, E pods) and a TrafficTarget letting `sources` reach it,
 * in one new file.
 */
export function newService(plan: MeshPlan, sources: readonly number[]): ScenarioEdit {
  const index = plan.services.length;
  const svc: BenchService = {
    index,
    namespace: plan.namespaces[0],
    name: 'svc-new',
    serviceAccount: 'svc-new',
    clusterIP: ipv4([172, 30], 0),
    podIps: Array.from({ length: plan.options.endpoints }, (_, j) => ipv4([10, 210], j)),
  };
  const docs: Doc[] = [
    serviceAccountDoc(svc),
    serviceDoc(svc.namespace, svc.name, { app: svc.name }, svc.clusterIP),
    ...podDocs(svc, svc.podIps),
    trafficTargetDoc(svc, sources.map((i) => plan.services[i])),
  ];
  return {
    file: serviceFile(svc),
    text: yamlDocs(docs),
    affectedIdentities: sources,
    affectsAll: plan.options.mode === 'permissive',
    description: `new service ${svc.namespace}/${svc.name} (${plan.options.endpoints} pods) reachable from ${sources.length} identities`,
  };
}

/** Cipher suites set by the mesh-config-change scenario. */
export const CHANGED_CIPHER_SUITES: readonly string[] = ['ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-AES128-GCM-SHA256'];

/** (d) MeshConfig `sidecar.cipherSuites` is set: every cluster and listener changes. */
export function meshConfigChange(plan: MeshPlan): ScenarioEdit {
  return {
    file: '01-meshconfig.yaml',
    text: meshConfigText(plan.options.mode, CHANGED_CIPHER_SUITES),
    affectedIdentities: plan.services.map((s) => s.index),
    affectsAll: true,
    description: `MeshConfig sidecar.cipherSuites: [] → [${CHANGED_CIPHER_SUITES.join(', ')}]`,
  };
}

/** A proxy of the benchmark: a deterministic UUID and the identity (service index) it runs as. */
export interface BenchProxy {
  readonly uuid: string;
  readonly identity: number;
  readonly namespace: string;
  readonly serviceAccount: string;
}

/**
 * The N proxies: proxy j runs as identity ⌊j·S/N⌋ when N ≤ S (spread over every namespace),
 * else j mod S. UUIDs are `00000000-0000-4000-8000-<j in hex>`.
 */
export function planProxies(plan: MeshPlan, count: number): BenchProxy[] {
  const S = plan.services.length;
  return Array.from({ length: count }, (_, j) => {
    const identity = count <= S ? Math.floor((j * S) / count) : j % S;
    const svc = plan.services[identity];
    return {
      uuid: `00000000-0000-4000-8000-${j.toString(16).padStart(12, '0')}`,
      identity,
      namespace: svc.namespace,
      serviceAccount: svc.serviceAccount,
    };
  });
}
