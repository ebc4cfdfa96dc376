/**
 * What the lab should be running for a set of objects: one pod entry per Pod with a usable
 * `status.podIP`, with its lab address, the on-link routes every pod gets, its hosts file (names
 * as cluster DNS would answer them), and what to run in it. Pure: reads a store, returns data.
 */
import { createHash } from 'node:crypto';
import { BlockList, isIPv4 } from 'node:net';
import { buildMeshSnapshot, DEFAULT_MESH_CONFIG, portProtocol } from '../catalog/build-snapshot.js';
import { selectorMatches } from '../catalog/labels.js';
import { SIDECAR_PORTS, sidecarPortMessage } from '../catalog/sidecar-ports.js';
import type { StoreReader } from '../store/store.js';
import type { MeshConfig, Pod, Service } from '../store/objects.js';
import { interceptionOptions, type InterceptionOptions } from '../injector/iptables.js';
import { compareIpv4, inLabSubnet, labSubnetHostCount } from './network.js';

/** Annotation naming a pod's own command, a JSON array of strings (argv). */
export const LAB_COMMAND_ANNOTATION = 'lab.trellis.dev/command';

/** Cluster domain the hosts files use (`<svc>.<ns>.svc.cluster.local`). */
export const CLUSTER_DOMAIN = 'cluster.local';

/** One port the app listens on: `<protocol>:<port>` as `trellis lab app --listen` takes it. */
export interface AppListen {
  readonly protocol: string;
  readonly port: number;
}

/** One pod the lab runs. */
export interface LabPodSpec {
  /** `<namespace>/<name>`. */
  readonly key: string;
  readonly name: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  readonly podIp: string;
  /** Whether the pod's namespace is monitored by the mesh: it gets interception and Envoy. */
  readonly mesh: boolean;
  /** The pod's own argv (annotation {@link LAB_COMMAND_ANNOTATION}), or undefined for `trellis lab app`. */
  readonly command: readonly string[] | undefined;
  /** The container ports the default app listens on. */
  readonly listen: readonly AppListen[];
  /** The Pod object (its labels and annotations). */
  readonly pod: Pod;
  /** The interception a pod of the mesh gets (MeshConfig's lists merged with the pod's annotations); undefined outside the mesh. */
  readonly interception: InterceptionOptions | undefined;
  /** A digest of what the pod runs: a pod whose digest changes is restarted. */
  readonly digest: string;
}

/** A pod the lab cannot run, and why. */
export interface LabPodProblem {
  readonly key: string;
  readonly message: string;
}

/** The lab's wanted state (see {@link labTopology}). */
export interface LabTopology {
  /** Pods to run, by key, sorted. */
  readonly pods: ReadonlyMap<string, LabPodSpec>;
  /** Every address the lab assigns (pod IPs and Service ClusterIPs), sorted: each pod's on-link routes. */
  readonly addresses: readonly string[];
  /** Pods that are left out, and why. */
  readonly problems: readonly LabPodProblem[];
  /** The MeshConfig the controller reads, if any (interception exclusions). */
  readonly meshConfig: MeshConfig | undefined;
  /** The monitored namespaces. */
  readonly meshNamespaces: ReadonlySet<string>;
  /** Service names and the addresses they resolve to, for the hosts files. */
  readonly services: readonly LabServiceAddress[];
}

/** A Service and the addresses its name resolves to (its ClusterIP, or headless: its pods' IPs). */
export interface LabServiceAddress {
  readonly namespace: string;
  readonly name: string;
  readonly addresses: readonly string[];
}

function parseCommand(pod: Pod): readonly string[] | undefined | Error {
  const text = pod.metadata.annotations?.[LAB_COMMAND_ANNOTATION];
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return new Error(`annotation ${LAB_COMMAND_ANNOTATION} is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!Array.isArray(value) || value.length === 0 || !value.every((a) => typeof a === 'string')) {
    return new Error(`annotation ${LAB_COMMAND_ANNOTATION} must be a non-empty JSON array of strings (argv)`);
  }
  return value as string[];
}

/** The protocol of a container port: that of a Service port targeting it, else its own name's. */
function containerPortProtocol(services: readonly Service[], pod: Pod, port: { name?: string; containerPort: number }): string {
  for (const svc of services) {
    if (!selectorMatches(svc.spec.selector, pod.metadata.labels)) continue;
    for (const sp of svc.spec.ports ?? []) {
      const target = sp.targetPort ?? sp.port;
      if (target === port.containerPort || (port.name !== undefined && target === port.name)) return portProtocol(sp);
    }
  }
  return portProtocol({ name: port.name });
}

/** IPv4 ranges no lab address may be in, with what they are. */
const NEVER_ASSIGNED = [
  ['0.0.0.0', 8, '"this network" (0.0.0.0/8)'],
  ['127.0.0.0', 8, 'loopback (127.0.0.0/8)'],
  ['169.254.0.0', 16, 'link-local (169.254.0.0/16)'],
  ['224.0.0.0', 4, 'multicast (224.0.0.0/4)'],
  ['240.0.0.0', 4, 'reserved (240.0.0.0/4, with the broadcast address 255.255.255.255)'],
].map(([network, length, what]) => {
  const list = new BlockList();
  list.addSubnet(network as string, length as number, 'ipv4');
  return { list, what: what as string };
});

/**
 * Why the lab cannot assign the IPv4 address `ip` (to a pod's `eth0`, or route a ClusterIP):
 * it is in 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4 or 240.0.0.0/4, or one of
 * `hostAddresses` (the host's own: the kernel would deliver it to the host); undefined if it can.
 */
export function labAddressViolation(ip: string, hostAddresses: ReadonlySet<string>): string | undefined {
  for (const range of NEVER_ASSIGNED) if (range.list.check(ip, 'ipv4')) return `${ip} is ${range.what}: the lab never assigns it`;
  if (hostAddresses.has(ip)) return `${ip} is an address of this host: the lab never assigns it`;
  return undefined;
}

/** The IPv4 addresses in `ip -o addr show` output (`2: eth0    inet 10.0.0.5/24 brd … scope global eth0`). */
export function parseHostAddresses(text: string): string[] {
  return [...text.matchAll(/\binet\s+(\d+\.\d+\.\d+\.\d+)\//g)].map((m) => m[1]).filter((ip) => isIPv4(ip));
}

function digest(value: unknown): string {
  return createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 16);
}

/**
 * The lab's wanted state for the objects of `store`: every Pod with an IPv4 `status.podIP`
 * (outside the lab subnet, not taken by another pod or a ClusterIP) is run; pods of monitored
 * namespaces (`meshName`, the catalog's notion) are in the mesh.
 */
export function labTopology(
  store: StoreReader,
  options: { readonly meshName: string; readonly subnet: string; readonly hostAddresses?: readonly string[] },
): LabTopology {
  const hostAddresses = new Set(options.hostAddresses ?? []);
  const snapshot = buildMeshSnapshot(store, { meshName: options.meshName, generation: 0 }).snapshot;
  const meshConfig = store.get<MeshConfig>('MeshConfig', DEFAULT_MESH_CONFIG.namespace, DEFAULT_MESH_CONFIG.name);
  const services = store.list<Service>('Service');
  const allPods = store.list<Pod>('Pod');
  const problems: LabPodProblem[] = [];
  const taken = new Map<string, string>();
  const clusterIps = new Map<string, string>();
  for (const svc of services) {
    for (const ip of new Set([svc.spec.clusterIP, ...(svc.spec.clusterIPs ?? [])])) {
      if (!ip || !isIPv4(ip) || inLabSubnet(options.subnet, ip) || clusterIps.has(ip)) continue;
      const violation = labAddressViolation(ip, hostAddresses);
      if (violation !== undefined) {
        problems.push({ key: `Service ${svc.metadata.namespace ?? 'default'}/${svc.metadata.name}`, message: `ClusterIP ${violation}: it is not routed` });
        continue;
      }
      clusterIps.set(ip, `Service ${svc.metadata.namespace}/${svc.metadata.name}`);
    }
  }
  const pods = new Map<string, LabPodSpec>();
  for (const pod of allPods) {
    const namespace = pod.metadata.namespace ?? 'default';
    const key = `${namespace}/${pod.metadata.name}`;
    const podIp = pod.status?.podIP;
    if (podIp === undefined) {
      problems.push({ key, message: 'has no status.podIP: the lab runs only pods with an address' });
      continue;
    }
    if (!isIPv4(podIp)) {
      problems.push({ key, message: `status.podIP "${podIp}" is not an IPv4 address` });
      continue;
    }
    if (inLabSubnet(options.subnet, podIp)) {
      problems.push({ key, message: `status.podIP ${podIp} is inside the lab subnet ${options.subnet}` });
      continue;
    }
    const violation = labAddressViolation(podIp, hostAddresses);
    if (violation !== undefined) {
      problems.push({ key, message: `status.podIP ${violation}` });
      continue;
    }
    const other = taken.get(podIp) ?? clusterIps.get(podIp);
    if (other !== undefined) {
      problems.push({ key, message: `status.podIP ${podIp} is already ${other}'s` });
      continue;
    }
    const command = parseCommand(pod);
    if (command instanceof Error) {
      problems.push({ key, message: command.message });
      continue;
    }
    const listen: AppListen[] = [];
    for (const container of pod.spec?.containers ?? []) {
      for (const port of container.ports ?? []) {
        if ((port.protocol ?? 'TCP') !== 'TCP') continue;
        listen.push({ protocol: containerPortProtocol(services, pod, port), port: port.containerPort });
      }
    }
    const serviceAccount = pod.spec?.serviceAccountName ?? 'default';
    const mesh = snapshot.namespaces.has(namespace);
    const sidecarPort = mesh ? listen.find((l) => SIDECAR_PORTS.has(l.port)) : undefined;
    if (sidecarPort) {
      problems.push({ key, message: `containerPort ${sidecarPortMessage(sidecarPort.port)}` });
      continue;
    }
    let interception: InterceptionOptions | undefined;
    try {
      interception = mesh ? interceptionOptions(meshConfig, pod) : undefined;
    } catch (err) {
      problems.push({ key, message: err instanceof Error ? err.message : String(err) });
      continue;
    }
    taken.set(podIp, `Pod ${key}`);
    pods.set(key, {
      key,
      name: pod.metadata.name,
      namespace,
      serviceAccount,
      podIp,
      mesh,
      command,
      listen,
      pod,
      interception,
      // The merged interception is in the digest: a MeshConfig change of an exclusion list restarts the pods it changes.
      digest: digest({ podIp, serviceAccount, mesh, command, listen, interception, annotations: pod.metadata.annotations ?? {} }),
    });
  }
  const serviceAddresses: LabServiceAddress[] = services.map((svc) => {
    const namespace = svc.metadata.namespace ?? 'default';
    const ip = svc.spec.clusterIP;
    const addresses = ip === 'None'
      ? [...pods.values()].filter((p) => p.namespace === namespace && selectorMatches(svc.spec.selector, p.pod.metadata.labels)).map((p) => p.podIp)
      : ip && clusterIps.has(ip) ? [ip] : [];
    return { namespace, name: svc.metadata.name, addresses };
  });
  const addresses = [...new Set([...[...pods.values()].map((p) => p.podIp), ...clusterIps.keys()])].sort(compareIpv4);
  return {
    pods: new Map([...pods].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))),
    addresses,
    problems,
    meshConfig,
    meshNamespaces: snapshot.namespaces,
    services: serviceAddresses,
  };
}

/**
 * The hosts file of a pod in `namespace`: every Service as `<svc>.<ns>`, `<svc>.<ns>.svc` and
 * `<svc>.<ns>.svc.cluster.local` (headless: one line per pod IP), the bare `<svc>` for services
 * of the pod's own namespace, and the pod's own name on its IP.
 */
export function labHostsFile(topology: LabTopology, pod: { readonly name: string; readonly namespace: string; readonly podIp: string }): string {
  const lines = [`${pod.podIp}\t${pod.name}`];
  for (const svc of topology.services) {
    const names = [`${svc.name}.${svc.namespace}`, `${svc.name}.${svc.namespace}.svc`, `${svc.name}.${svc.namespace}.svc.${CLUSTER_DOMAIN}`];
    if (svc.namespace === pod.namespace) names.unshift(svc.name);
    for (const address of svc.addresses) lines.push(`${address}\t${names.join(' ')}`);
  }
  return `${lines.join('\n')}\n`;
}

/** The most pods a lab runs unless told otherwise (`LabOptions.maxPods`). */
export const DEFAULT_LAB_MAX_PODS = 1000;

/**
 * Lab address numbers for the pods: a pod keeps the number it has (`current`), a new pod (in
 * the order of `keys`) takes the lowest free one from 2 (1 is the bridge's). Pods beyond the
 * subnet's host addresses, or beyond `maxPods` pods in all, get none (they are not in the map).
 */
export function assignLabAddresses(subnet: string, keys: readonly string[], current: ReadonlyMap<string, number>, maxPods = Infinity): Map<string, number> {
  const last = labSubnetHostCount(subnet);
  const out = new Map<string, number>();
  const used = new Set<number>();
  for (const key of keys) {
    const n = current.get(key);
    if (n !== undefined && n >= 2 && n <= last && out.size < maxPods) {
      out.set(key, n);
      used.add(n);
    }
  }
  let next = 2;
  for (const key of keys) {
    if (out.has(key)) continue;
    while (used.has(next)) next++;
    if (next > last || out.size >= maxPods) break;
    out.set(key, next);
    used.add(next);
  }
  return out;
}

/**
 * The pods of `topology` the lab runs, with their lab address numbers
 * ({@link assignLabAddresses}: running pods first, keeping theirs, then new pods by key): the
 * pods that get no number are moved to the problems (not run), and the addresses and headless
 * names are those of the pods that run.
 */
export function placeLabPods(
  topology: LabTopology,
  options: { readonly subnet: string; readonly current: ReadonlyMap<string, number>; readonly maxPods?: number },
): { readonly topology: LabTopology; readonly numbers: ReadonlyMap<string, number> } {
  const maxPods = options.maxPods ?? DEFAULT_LAB_MAX_PODS;
  const numbers = assignLabAddresses(options.subnet, [...topology.pods.keys()], options.current, maxPods);
  if (numbers.size === topology.pods.size) return { topology, numbers };
  const capacity = labSubnetHostCount(options.subnet) - 1;
  const reason = maxPods < capacity
    ? `no lab address: the lab runs at most ${maxPods} pods (its maxPods), and ${topology.pods.size} want to run`
    : `no lab address: the lab subnet ${options.subnet} has ${capacity} pod addresses, and ${topology.pods.size} pods want one`;
  const left = [...topology.pods.keys()].filter((key) => !numbers.has(key));
  const pods = new Map([...topology.pods].filter(([key]) => numbers.has(key)));
  const gone = new Set(left.map((key) => topology.pods.get(key)!.podIp));
  return {
    numbers,
    topology: {
      ...topology,
      pods,
      addresses: topology.addresses.filter((a) => !gone.has(a)),
      services: topology.services.map((svc) => ({ ...svc, addresses: svc.addresses.filter((a) => !gone.has(a)) })),
      problems: [...topology.problems, ...left.map((key) => ({ key, message: reason }))],
    },
  };
}
