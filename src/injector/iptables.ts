/**
 * Traffic interception of a meshed pod, as OSM v1.2's init container sets it up: iptables
 * rules in the `nat` table of the pod's network namespace that send the pod's outbound TCP to
 * Envoy's outbound listener (15001) and inbound TCP to its inbound listener (15003), except
 * Envoy's own traffic (uid 1500), loopback, Envoy's admin/metrics/health ports, and what the
 * MeshConfig (`spec.traffic.*List`) and the pod's `openservicemesh.io/*-list` annotations
 * exclude. The chain names are OSM v1.2's (`OSM_PROXY_INBOUND`, `OSM_PROXY_IN_REDIRECT`,
 * `OSM_PROXY_OUTBOUND`, `OSM_PROXY_OUT_REDIRECT`; OSM before v1.1 called them `PROXY_INBOUND`,
 * `PROXY_IN_REDIRECT`, `PROXY_OUTPUT`, `PROXY_REDIRECT`).
 *
 * {@link interceptionOptions} and {@link interceptionRules} are pure; {@link applyInterception}
 * runs `iptables-restore` in a network namespace. Nothing here knows the lab: the sidecar
 * injector reuses it for its init container.
 */
import { spawn } from 'node:child_process';
import { isIP } from 'node:net';
import { parseCidr } from '../catalog/cidr.js';
import { INBOUND_LISTENER, OUTBOUND_LISTENER } from '../envoy/lds/lds.js';
import type { MeshConfig, Pod } from '../store/objects.js';

/** The uid Envoy runs as in an OSM sidecar (`constants.EnvoyUID`); its traffic is never redirected. */
export const PROXY_UID = 1500;
/** Envoy's outbound listener port ({@link OUTBOUND_LISTENER}): the pod's outbound TCP is redirected here. */
export const OUTBOUND_PORT = OUTBOUND_LISTENER.port;
/** Envoy's inbound listener port ({@link INBOUND_LISTENER}): inbound TCP to the pod is redirected here. */
export const INBOUND_PORT = INBOUND_LISTENER.port;

/**
 * Inbound ports never redirected to Envoy: its admin (15000), Prometheus (15010), liveness,
 * readiness and startup probe listeners (15901–15903) and osm-healthcheck (15904).
 */
export const NEVER_REDIRECTED_INBOUND_PORTS: readonly number[] = [15000, 15010, 15901, 15902, 15903, 15904];

/** The nat-table chains the rules create (OSM v1.2's names). */
export const INTERCEPTION_CHAINS = {
  inbound: 'OSM_PROXY_INBOUND',
  inboundRedirect: 'OSM_PROXY_IN_REDIRECT',
  outbound: 'OSM_PROXY_OUTBOUND',
  outboundRedirect: 'OSM_PROXY_OUT_REDIRECT',
} as const;

/** OSM's pod annotations read by {@link interceptionOptions} (comma-separated lists). */
export const INTERCEPTION_ANNOTATIONS = {
  outboundIPRangeExclusions: 'openservicemesh.io/outbound-ip-range-exclusion-list',
  outboundIPRangeInclusions: 'openservicemesh.io/outbound-ip-range-inclusion-list',
  outboundPortExclusions: 'openservicemesh.io/outbound-port-exclusion-list',
  inboundPortExclusions: 'openservicemesh.io/inbound-port-exclusion-list',
} as const;

/** What the interception rules are made of. Every list is already merged (MeshConfig and pod). */
export interface InterceptionOptions {
  /** Envoy's uid: its outbound traffic is not redirected. */
  readonly proxyUid: number;
  /** Port of Envoy's outbound listener. */
  readonly outboundPort: number;
  /** Port of Envoy's inbound listener. */
  readonly inboundPort: number;
  /** IPv4 CIDRs whose outbound traffic is not redirected. */
  readonly outboundIPRangeExclusions: readonly string[];
  /** IPv4 CIDRs: when not empty, only outbound traffic to these is redirected. Exclusions win. */
  readonly outboundIPRangeInclusions: readonly string[];
  /** Destination ports whose outbound TCP is not redirected. */
  readonly outboundPortExclusions: readonly number[];
  /** Destination ports whose inbound TCP is not redirected. */
  readonly inboundPortExclusions: readonly number[];
  /** Interfaces whose traffic (in and out) is not redirected (an iptables name; `+` ends a prefix). */
  readonly networkInterfaceExclusions: readonly string[];
}

/** A list entry or option that cannot be turned into a rule; `field` names where it came from. */
export class InterceptionConfigError extends Error {
  /** @param field e.g. `MeshConfig osm-system/osm-mesh-config: spec.traffic.outboundPortExclusionList[1]`. */
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(`${field}: ${message}; the pod's traffic interception cannot be set up`);
    this.name = 'InterceptionConfigError';
  }
}

/** iptables' `multiport` match takes at most 15 ports. */
const MULTIPORT_MAX = 15;
/** An iptables interface name: at most 15 characters (IFNAMSIZ − 1), not starting or ending with `-`, `+` only at the end. */
const INTERFACE_NAME = /^(?=.{1,15}$)[A-Za-z0-9_.@](?:[A-Za-z0-9_.@-]*[A-Za-z0-9_.@])?\+?$/;

/** A value quoted for a message, at most 80 characters of it. */
function describe(value: unknown): string {
  const text = typeof value === 'string' ? value : (JSON.stringify(value) ?? String(value));
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}

function checkedCidr(value: unknown, field: string): string {
  const parts = typeof value === 'string' ? parseCidr(value.trim()) : undefined;
  if (!parts) throw new InterceptionConfigError(field, `${describe(value)} is not an IP range in CIDR notation (such as 10.0.0.0/8)`);
  if (isIP(parts.address) !== 4) throw new InterceptionConfigError(field, `${describe(value)} is an IPv6 range: the interception rules are IPv4 (iptables)`);
  return `${parts.address}/${parts.prefixLength}`;
}

function checkedPort(value: unknown, field: string): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 65535) {
    throw new InterceptionConfigError(field, `${describe(value)} is not a port (an integer from 1 to 65535)`);
  }
  return value;
}

/** A port written in an annotation: decimal digits only. */
function checkedPortText(value: unknown, field: string): number {
  return checkedPort(typeof value === 'string' && /^\d{1,5}$/.test(value) ? Number(value) : value, field);
}

function checkedInterface(value: unknown, field: string): string {
  if (typeof value !== 'string' || !INTERFACE_NAME.test(value)) {
    throw new InterceptionConfigError(field, `${describe(value)} is not a network interface name (1 to 15 letters, digits, "_", ".", "-", "@"; "+" at the end for a prefix)`);
  }
  return value;
}

/** The entries of a MeshConfig list field: absent is empty, anything but an array is an error. */
function meshConfigList<T>(traffic: Record<string, unknown> | undefined, name: string, where: string, check: (v: unknown, field: string) => T): T[] {
  const value = traffic?.[name];
  if (value === undefined || value === null) return [];
  const field = `${where}: spec.traffic.${name}`;
  if (!Array.isArray(value)) throw new InterceptionConfigError(field, `${describe(value)} is not a list`);
  return value.map((entry, i) => check(entry, `${field}[${i}]`));
}

/** The entries of a comma-separated pod annotation, as OSM reads them (an empty entry is invalid). */
function annotationList<T>(pod: Pod, annotation: string, check: (v: unknown, field: string) => T): T[] {
  const value = pod.metadata.annotations?.[annotation];
  if (value === undefined) return [];
  const field = `Pod ${pod.metadata.namespace ?? 'default'}/${pod.metadata.name}: metadata.annotations["${annotation}"]`;
  if (typeof value !== 'string') throw new InterceptionConfigError(field, `${describe(value)} is not a string`);
  return value.split(',').map((entry, i) => check(entry.trim(), `${field}[${i}]`));
}

function union<T>(first: readonly T[], second: readonly T[]): T[] {
  return [...new Set([...first, ...second])];
}

/**
 * The interception options of a pod, as OSM's injector merges them: the MeshConfig's
 * `spec.traffic` lists (`outboundIPRangeExclusionList`, `outboundIPRangeInclusionList`,
 * `outboundPortExclusionList`, `inboundPortExclusionList`, `networkInterfaceExclusionList`) with
 * the pod's annotations {@link INTERCEPTION_ANNOTATIONS} (IP ranges: the pod's first; ports: the
 * MeshConfig's first; duplicates dropped). Interfaces come from the MeshConfig only.
 * @param meshConfig the mesh's MeshConfig; undefined: OSM's defaults (no list).
 * @throws InterceptionConfigError naming the MeshConfig field or pod annotation (and the
 *   entry's index) of the first entry that is not an IPv4 CIDR, a port in 1–65535 or an
 *   interface name: the pod must not run without interception.
 */
export function interceptionOptions(meshConfig: MeshConfig | undefined, pod: Pod): InterceptionOptions {
  const where = meshConfig ? `MeshConfig ${meshConfig.metadata.namespace ?? ''}/${meshConfig.metadata.name}` : 'MeshConfig';
  const rawTraffic: unknown = meshConfig?.spec?.traffic;
  if (rawTraffic !== undefined && (typeof rawTraffic !== 'object' || rawTraffic === null || Array.isArray(rawTraffic))) {
    throw new InterceptionConfigError(`${where}: spec.traffic`, `${describe(rawTraffic)} is not an object`);
  }
  const traffic = rawTraffic as Record<string, unknown> | undefined;
  const A = INTERCEPTION_ANNOTATIONS;
  return {
    proxyUid: PROXY_UID,
    outboundPort: OUTBOUND_PORT,
    inboundPort: INBOUND_PORT,
    outboundIPRangeExclusions: union(
      annotationList(pod, A.outboundIPRangeExclusions, checkedCidr),
      meshConfigList(traffic, 'outboundIPRangeExclusionList', where, checkedCidr),
    ),
    outboundIPRangeInclusions: union(
      annotationList(pod, A.outboundIPRangeInclusions, checkedCidr),
      meshConfigList(traffic, 'outboundIPRangeInclusionList', where, checkedCidr),
    ),
    outboundPortExclusions: union(
      meshConfigList(traffic, 'outboundPortExclusionList', where, checkedPort),
      annotationList(pod, A.outboundPortExclusions, checkedPortText),
    ),
    inboundPortExclusions: union(
      meshConfigList(traffic, 'inboundPortExclusionList', where, checkedPort),
      annotationList(pod, A.inboundPortExclusions, checkedPortText),
    ),
    networkInterfaceExclusions: union([], meshConfigList(traffic, 'networkInterfaceExclusionList', where, checkedInterface)),
  };
}

/** `-m multiport --dports` rules of at most {@link MULTIPORT_MAX} ports each. */
function portRules(chain: string, ports: readonly number[], target: string): string[] {
  const rules: string[] = [];
  for (let i = 0; i < ports.length; i += MULTIPORT_MAX) {
    rules.push(`-A ${chain} -p tcp -m multiport --dports ${ports.slice(i, i + MULTIPORT_MAX).join(',')} -j ${target}`);
  }
  return rules;
}

function checkedOptions(options: InterceptionOptions): InterceptionOptions {
  const field = (name: string) => `InterceptionOptions.${name}`;
  const uid = options.proxyUid;
  if (!Number.isInteger(uid) || uid < 0 || uid > 0xfffffffe) throw new InterceptionConfigError(field('proxyUid'), `${describe(uid)} is not a uid`);
  const outboundPort = checkedPort(options.outboundPort, field('outboundPort'));
  const inboundPort = checkedPort(options.inboundPort, field('inboundPort'));
  if (outboundPort === inboundPort) throw new InterceptionConfigError(field('inboundPort'), `${inboundPort} is also the outbound port`);
  const list = <T>(name: keyof InterceptionOptions, check: (v: unknown, f: string) => T): T[] => {
    const value = options[name];
    if (!Array.isArray(value)) throw new InterceptionConfigError(field(name), `${describe(value)} is not a list`);
    return [...new Set(value.map((v, i) => check(v, `${field(name)}[${i}]`)))];
  };
  return {
    proxyUid: uid,
    outboundPort,
    inboundPort,
    outboundIPRangeExclusions: list('outboundIPRangeExclusions', checkedCidr),
    outboundIPRangeInclusions: list('outboundIPRangeInclusions', checkedCidr),
    outboundPortExclusions: list('outboundPortExclusions', checkedPort),
    inboundPortExclusions: list('inboundPortExclusions', checkedPort),
    networkInterfaceExclusions: list('networkInterfaceExclusions', checkedInterface),
  };
}

/**
 * The interception rules as `iptables-restore` input for the `nat` table, meant for
 * `iptables-restore --noflush` (OSM's init container runs it so; other tables and chains stay).
 *
 * Inbound (`PREROUTING` → `OSM_PROXY_INBOUND`): traffic arriving on an excluded interface, to
 * {@link NEVER_REDIRECTED_INBOUND_PORTS} or to an excluded inbound port returns; other TCP is
 * redirected to `inboundPort`. Outbound (`OUTPUT` → `OSM_PROXY_OUTBOUND`), in order: Envoy's
 * connections over `lo` to an address other than 127.0.0.1 (the pod's own IP: a service whose
 * endpoint is this pod) go to the inbound listener; anyone else's over `lo` return (an app
 * calling itself by its pod IP); every other connection of `proxyUid` returns; 127.0.0.1/32
 * returns; excluded interfaces, IP ranges and ports return; then, with inclusions, only the
 * included ranges are redirected to `outboundPort` (the rest returns), without them everything.
 * Only TCP is touched. The lists are emitted in the order given.
 * @throws InterceptionConfigError when an option is not valid (naming `InterceptionOptions.<field>[i]`).
 */
export function interceptionRules(options: InterceptionOptions): string {
  const o = checkedOptions(options);
  const { inbound, inboundRedirect, outbound, outboundRedirect } = INTERCEPTION_CHAINS;
  const lines = [
    '# Trellis sidecar traffic interception (OSM v1.2 rules), for iptables-restore --noflush',
    '*nat',
    `:${inbound} - [0:0]`,
    `:${inboundRedirect} - [0:0]`,
    `:${outbound} - [0:0]`,
    `:${outboundRedirect} - [0:0]`,
    // Inbound.
    `-A ${inboundRedirect} -p tcp -j REDIRECT --to-ports ${o.inboundPort}`,
    `-A PREROUTING -p tcp -j ${inbound}`,
    ...o.networkInterfaceExclusions.map((iface) => `-A ${inbound} -i ${iface} -j RETURN`),
    ...portRules(inbound, NEVER_REDIRECTED_INBOUND_PORTS, 'RETURN'),
    ...portRules(inbound, o.inboundPortExclusions, 'RETURN'),
    `-A ${inbound} -p tcp -j ${inboundRedirect}`,
    // Outbound.
    `-A ${outboundRedirect} -p tcp -j REDIRECT --to-ports ${o.outboundPort}`,
    `-A OUTPUT -p tcp -j ${outbound}`,
    `-A ${outbound} -o lo ! -d 127.0.0.1/32 -m owner --uid-owner ${o.proxyUid} -j ${inboundRedirect}`,
    `-A ${outbound} -o lo -m owner ! --uid-owner ${o.proxyUid} -j RETURN`,
    `-A ${outbound} -m owner --uid-owner ${o.proxyUid} -j RETURN`,
    `-A ${outbound} -d 127.0.0.1/32 -j RETURN`,
    ...o.networkInterfaceExclusions.map((iface) => `-A ${outbound} -o ${iface} -j RETURN`),
    ...o.outboundIPRangeExclusions.map((cidr) => `-A ${outbound} -d ${cidr} -j RETURN`),
    ...portRules(outbound, o.outboundPortExclusions, 'RETURN'),
    ...(o.outboundIPRangeInclusions.length > 0
      ? [...o.outboundIPRangeInclusions.map((cidr) => `-A ${outbound} -d ${cidr} -j ${outboundRedirect}`), `-A ${outbound} -j RETURN`]
      : [`-A ${outbound} -j ${outboundRedirect}`]),
    'COMMIT',
  ];
  return `${lines.join('\n')}\n`;
}

/** The most output kept of an iptables command (for its error message). */
const MAX_COMMAND_OUTPUT = 16 * 1024;

function run(argv: readonly string[], input?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ['pipe', 'pipe', 'pipe'] });
    const out = { stdout: '', stderr: '' };
    const keep = (key: 'stdout' | 'stderr') => (chunk: Buffer) => {
      if (out[key].length < MAX_COMMAND_OUTPUT) out[key] += chunk.toString('utf8').slice(0, MAX_COMMAND_OUTPUT - out[key].length);
    };
    child.stdout.on('data', keep('stdout'));
    child.stderr.on('data', keep('stderr'));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, ...out }));
    child.stdin.on('error', () => undefined);
    child.stdin.end(input ?? '');
  });
}

/**
 * Sets up the interception rules of `options` in the network namespace `netns`
 * (`ip netns exec <netns> iptables-restore --noflush`, one transaction: all rules or none), or,
 * with `netns` undefined, in the caller's own (what the injected `osm-init` container runs, via
 * `trellis iptables-init`). Needs root (CAP_NET_ADMIN) and iptables.
 * @throws InterceptionConfigError when an option is invalid (nothing is run); an Error naming
 *   the namespace when its nat table already has {@link INTERCEPTION_CHAINS} (the rules are set
 *   up once, as by an init container) or when iptables fails (with its message).
 */
export async function applyInterception(netns: string | undefined, options: InterceptionOptions): Promise<void> {
  const rules = interceptionRules(options);
  const inNetns = netns === undefined ? [] : ['ip', 'netns', 'exec', netns];
  netns ??= 'of this process';
  const existing = await run([...inNetns, 'iptables-save', '-t', 'nat']);
  if (existing.code !== 0) throw new Error(`network namespace ${netns}: iptables-save -t nat failed (exit ${existing.code}): ${existing.stderr.trim()}`);
  const present = Object.values(INTERCEPTION_CHAINS).filter((chain) => existing.stdout.split('\n').some((line) => line.startsWith(`:${chain} `)));
  if (present.length > 0) throw new Error(`network namespace ${netns}: traffic interception is already set up (nat chains ${present.join(', ')} exist)`);
  const applied = await run([...inNetns, 'iptables-restore', '--noflush'], rules);
  if (applied.code !== 0) throw new Error(`network namespace ${netns}: iptables-restore failed (exit ${applied.code}): ${applied.stderr.trim()}`);
}
