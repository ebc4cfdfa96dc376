/**
 * Real Envoy sidecars for the benchmark (`npm run bench -- --envoys K`): K lab pods (one
 * network namespace each, `src/lab/network.ts`), each running Envoy as uid 1500
 * (`src/lab/envoy.ts`) with a `trellis bootstrap` bootstrap (admin on a Unix socket, ADS over
 * mTLS to the controller on the lab's bridge address) for one of the bench's planned
 * identities, and the cheap reads of their admin interface the runner times them with:
 *
 * - {@link EnvoyFleet.versions}: what configuration an Envoy holds, as the `version_info` of
 *   every dynamic resource (`/config_dump?resource=…&mask=version_info`, a few hundred bytes,
 *   where a full dump of an S = 100 mesh is hundreds of KB). In state of the world Envoy
 *   stamps each resource with the version of the response that last changed it, so the string
 *   changes exactly when a response changed something.
 * - {@link EnvoyFleet.live}: `/ready` is 200 (`LIVE`) once Envoy's initial CDS/EDS and LDS/RDS
 *   fetches are done (or timed out: {@link EnvoyFleet.counters} has `init_fetch_timeout`).
 * - {@link EnvoyFleet.counters}: `*.update_rejected` (NACKs) and `*.init_fetch_timeout` sums.
 * - {@link EnvoyFleet.rssMb}: VmRSS from `/proc/<pid>/status`.
 *
 * Everything it creates is named with the lab prefix; {@link EnvoyFleet.stop} stops every
 * Envoy by PID, then removes the lab network ({@link removeLabNetwork}); {@link killFleetsSync}
 * kills Envoys by PID from a synchronous `exit` handler.
 */
import { chmod, chown, mkdir, readdir, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import path from 'node:path';
import { writeProxyBootstrap } from '../src/cli/bootstrap-command.js';
import { ENVOY_UID, EnvoyAdmin, startEnvoy, type EnvoyProcess } from '../src/lab/envoy.js';
import { createLabNetwork, createPodNetwork, labSubnetAddress, removeLabNetwork, runCommand, type LabNetwork, type PodNetwork } from '../src/lab/network.js';
import { sleep } from '../src/lab/process.js';
import type { BenchProxy } from './mesh-generator.js';

/** One real Envoy: the planned identity it runs as, its pod network, files and process. */
export interface FleetEnvoy {
  /** Index in the fleet (0…K−1). */
  readonly index: number;
  /** The identity (and namespace, service account) of a planned proxy; its own UUID. */
  readonly proxy: BenchProxy;
  readonly pod: PodNetwork;
  readonly dir: string;
  readonly adminSocket: string;
  readonly bootstrap: string;
  readonly logFile: string;
  readonly admin: EnvoyAdmin;
  process?: EnvoyProcess;
}

/** Options of {@link EnvoyFleet.create}. */
export interface FleetOptions {
  /** Lab prefix (names of everything created start with `${prefix}-`). */
  readonly prefix: string;
  /** Lab subnet (the bridge gets its first address; pods .2 upwards: at most 253 Envoys in a /24). */
  readonly subnet: string;
  readonly envoyPath: string;
  /** A directory of its own, outside any directory uid 1500 cannot traverse (made mode 0755 so it can reach its files; removed by {@link EnvoyFleet.stop}). */
  readonly workDir: string;
  /** Incremental xDS bootstraps (default state of the world). */
  readonly delta?: boolean;
}

/** Options of {@link EnvoyFleet.preparePods}. */
export interface FleetPodsOptions {
  /** The controller's state directory (its CA signs each Envoy's xDS client certificate). */
  readonly stateDir: string;
  /** The controller's mTLS ADS port on the bridge address. */
  readonly xdsPort: number;
  /**
   * One per Envoy: the identity it runs as (UUIDs distinct from the simulated ones') and the
   * pod IP its netns gets besides its lab address (e.g. the planned pod's: only the lab address
   * is used, to reach the controller).
   */
  readonly pods: readonly { readonly proxy: BenchProxy; readonly podIp: string }[];
}

const live = new Set<EnvoyFleet>();

/** A `<key>: <n> kB` line of `/proc/<Envoy's pid>/<file>`, in MB; null when Envoy is not running. */
function procMb(e: FleetEnvoy, file: string, key: string): number | null {
  if (!e.process) return null;
  try {
    const text = readFileSync(`/proc/${e.process.pid}/${file}`, 'utf8');
    return Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? Number.NaN) / 1024;
  } catch {
    return null;
  }
}

/** SIGKILLs every Envoy of every fleet not yet stopped, by PID (for a synchronous `exit` handler). */
export function killFleetsSync(): void {
  for (const fleet of live) fleet.killSync();
}

/** Bound on concurrent admin requests and `ip` commands the fleet issues. */
const CONCURRENCY = 8;

/** Runs `fn` over `items`, at most `limit` at a time, results in order. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/**
 * The admin reads that make up {@link EnvoyFleet.versions}: per resource list, each resource's
 * `version_info` (a few hundred bytes), except endpoints, whose `version_info` Envoy 1.40
 * leaves empty in its dump (and a mask cannot reach into their `Any`): there the whole list,
 * `last_updated` left out, hashed (about 2 KB per cluster of 5 endpoints).
 */
const VERSION_READS: readonly { path: string; hash: boolean }[] = [
  { path: '/config_dump?resource=dynamic_active_clusters&mask=version_info', hash: false },
  { path: '/config_dump?resource=dynamic_listeners&mask=active_state.version_info', hash: false },
  { path: '/config_dump?resource=dynamic_route_configs&mask=version_info', hash: false },
  { path: '/config_dump?resource=dynamic_active_secrets&mask=version_info', hash: false },
  { path: '/config_dump?resource=dynamic_endpoint_configs&include_eds', hash: true },
];

/** K real Envoys in lab pods. */
export class EnvoyFleet {
  private stopped = false;
  private list: FleetEnvoy[] = [];

  private constructor(
    readonly lab: LabNetwork,
    private readonly options: FleetOptions,
  ) {}

  /** The Envoys, in the order of {@link FleetOptions.proxies}. */
  get envoys(): readonly FleetEnvoy[] {
    return this.list;
  }

  /**
   * Removes what a crashed run left with this prefix and creates the lab's bridge (the
   * controller's ADS listens on its address).
   * @throws Error when a lab step fails (not root, the subnet malformed).
   */
  static async create(options: FleetOptions): Promise<EnvoyFleet> {
    const leftovers = await removeLabNetwork(options.prefix);
    if (leftovers.length > 0) process.stdout.write(`[bench] removed ${leftovers.length} leftovers of lab ${options.prefix}: ${leftovers.slice(0, 3).join(', ')}\n`);
    const fleet = new EnvoyFleet(await createLabNetwork(options.prefix, options.subnet), options);
    live.add(fleet);
    await mkdir(options.workDir, { recursive: true });
    await chmod(options.workDir, 0o755);
    return fleet;
  }

  /**
   * Creates one pod network, bootstrap (files owned by uid 1500) and admin socket path per
   * proxy. Starts nothing.
   * @throws Error when there are more pods than the subnet has addresses, or a lab step fails
   *   (what was created is removed by {@link stop}).
   */
  async preparePods(options: FleetPodsOptions): Promise<void> {
    const lab = this.lab;
    this.list = await mapLimit(options.pods, CONCURRENCY, async ({ proxy, podIp }, index) => {
      const labAddress = labSubnetAddress(lab.subnet, 2 + index);
      const pod = await createPodNetwork(lab, { name: `e${index}.${proxy.namespace}`, podIp, labAddress, onLinkRoutes: [] });
      const dir = path.join(this.options.workDir, `envoy-${index}`);
      await mkdir(dir, { recursive: true });
      const adminSocket = path.join(dir, 'admin.sock');
      const result = await writeProxyBootstrap({
        namespace: proxy.namespace,
        serviceAccount: proxy.serviceAccount,
        uuid: proxy.uuid,
        out: dir,
        stateDir: options.stateDir,
        xdsAddress: `${lab.bridgeAddress}:${options.xdsPort}`,
        delta: this.options.delta,
        adminSocketPath: adminSocket,
      });
      await chmod(dir, 0o755);
      for (const f of [dir, ...(await readdir(dir)).map((f) => path.join(dir, f))]) await chown(f, ENVOY_UID, ENVOY_UID);
      return {
        index, proxy, pod, dir, adminSocket, bootstrap: result.files.bootstrap, logFile: path.join(dir, 'envoy.log'),
        admin: new EnvoyAdmin(adminSocket, 16 * 1024 * 1024, 30_000),
      };
    });
  }

  /**
   * Starts every Envoy at once (each in its netns as uid 1500) and resolves when every admin
   * interface answers; returns, per Envoy, when its admin interface answered (`clock()` ms) or
   * the error text of one that did not start.
   */
  async start(clock: () => number): Promise<({ readyAt: number } | { error: string })[]> {
    return Promise.all(
      this.envoys.map(async (e) => {
        try {
          e.process = await startEnvoy({
            envoyPath: this.options.envoyPath, netns: e.pod.netns, bootstrapPath: e.bootstrap, adminSocket: e.adminSocket,
            logFile: e.logFile, readyTimeoutMs: 120_000,
          });
          return { readyAt: clock() };
        } catch (error) {
          return { error: error instanceof Error ? error.message : String(error) };
        }
      }),
    );
  }

  /** Envoys whose process is running. */
  get running(): FleetEnvoy[] {
    return this.envoys.filter((e) => e.process !== undefined);
  }

  /**
   * The `version_info` of every dynamic resource Envoy holds (clusters, listeners, route
   * configurations, endpoint assignments, secrets), sorted, joined: a string that changes
   * exactly when Envoy accepted a response that changed something.
   * @throws Error when the admin interface does not answer 200.
   */
  async versions(e: FleetEnvoy): Promise<string> {
    const parts: string[] = [];
    for (const read of VERSION_READS) {
      const { status, body } = await e.admin.get(read.path);
      if (status !== 200) throw new Error(`envoy ${e.index} ${read.path}: HTTP ${status}: ${body.slice(0, 200)}`);
      if (read.hash) parts.push(createHash('sha256').update(body.replace(/"last_updated":\s*"[^"]*"/g, '')).digest('hex').slice(0, 16));
      else parts.push([...body.matchAll(/"version_info":\s*"([^"]*)"/g)].map((m) => m[1]).sort().join(','));
    }
    return parts.join('|');
  }

  /** Whether Envoy's server state is LIVE (`/ready` answers 200). */
  async live(e: FleetEnvoy): Promise<boolean> {
    return (await e.admin.get('/ready')).status === 200;
  }

  /** Sums of Envoy's `*.update_rejected` (NACKs) and `*.init_fetch_timeout` counters. */
  async counters(e: FleetEnvoy): Promise<{ updateRejected: number; initFetchTimeout: number }> {
    const { status, body } = await e.admin.get('/stats?filter=(update_rejected|init_fetch_timeout)$');
    if (status !== 200) throw new Error(`envoy ${e.index} /stats: HTTP ${status}`);
    let updateRejected = 0;
    let initFetchTimeout = 0;
    for (const m of body.matchAll(/^(\S+): (\d+)$/gm)) {
      if (m[1].endsWith('update_rejected')) updateRejected += Number(m[2]);
      else initFetchTimeout += Number(m[2]);
    }
    return { updateRejected, initFetchTimeout };
  }

  /** Envoy's resident set (VmRSS, MB), or null when it is not running. */
  rssMb(e: FleetEnvoy): number | null {
    return procMb(e, 'status', 'VmRSS');
  }

  /** Envoy's proportional set size (Pss from `/proc/<pid>/smaps_rollup`: shared pages divided among their users, MB), or null. */
  pssMb(e: FleetEnvoy): number | null {
    return procMb(e, 'smaps_rollup', 'Pss');
  }

  /** SIGKILL to every running Envoy, by PID (synchronous). */
  killSync(): void {
    for (const e of this.envoys) {
      if (!e.process) continue;
      try {
        process.kill(e.process.pid, 'SIGKILL');
      } catch {
        // gone already
      }
    }
  }

  /**
   * Stops every Envoy by PID (SIGTERM, SIGKILL after 5 s), removes the lab network and the work
   * dir. Safe to call twice.
   * @throws Error when the lab network could not be removed ({@link removeLabNetwork}).
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    await Promise.all(this.envoys.map((e) => e.process?.stop().catch(() => undefined)));
    live.delete(this);
    await rm(this.options.workDir, { recursive: true, force: true });
    await this.deleteBridgePorts();
    await removeLabNetwork(this.lab.prefix);
    this.stopped = true;
  }

  /**
   * Deletes the host ends of the veth pairs on the lab's bridge (named `${prefix}-…`), which
   * takes their peers away at once: deleting the pods' netns afterwards leaves nothing for the
   * kernel to clean up late. Errors are ignored ({@link removeLabNetwork} removes what is left).
   */
  private async deleteBridgePorts(): Promise<void> {
    const out = await runCommand(['ip', '-o', 'link', 'show', 'master', this.lab.bridge]).catch(() => '');
    const ports = [...out.matchAll(/^\d+:\s+([^:@\s]+)/gm)].map((m) => m[1]).filter((n) => n.startsWith(`${this.lab.prefix}-`) && n !== this.lab.bridge);
    await mapLimit(ports, CONCURRENCY, (port) => runCommand(['ip', 'link', 'del', port]).catch(() => ''));
  }
}

/**
 * Polls `envoys` (at most {@link CONCURRENCY} admin requests at a time, a round at most every
 * `intervalMs`) until `done(e)` holds for each, or `timeoutMs` from `t0` (ms of `clock`).
 * @returns per Envoy the `clock()` time of the answer that first met `done`, or null.
 */
export async function pollUntil(
  envoys: readonly FleetEnvoy[],
  done: (e: FleetEnvoy) => Promise<boolean>,
  clock: () => number,
  t0: number,
  timeoutMs: number,
  intervalMs = 100,
): Promise<(number | null)[]> {
  const at = new Array<number | null>(envoys.length).fill(null);
  while (clock() - t0 < timeoutMs) {
    const round = clock();
    const pending = envoys.map((e, i) => ({ e, i })).filter(({ i }) => at[i] === null);
    if (pending.length === 0) break;
    await mapLimit(pending, CONCURRENCY, async ({ e, i }) => {
      if (await done(e).catch(() => false)) at[i] = clock();
    });
    await sleep(Math.max(0, intervalMs - (clock() - round)));
  }
  return at;
}

/** Shortest polling round of {@link watchChange} (ms): its resolution, and a bound on the admin load it adds. */
const WATCH_ROUND_MS = 100;

/** What {@link watchChange} saw. */
export interface ChangeWatchResult {
  /** Per watched Envoy: when its versions last changed (`clock()` ms), or null when they never did. */
  readonly changedAt: (number | null)[];
  /** Per watched Envoy: how many times its versions changed. */
  readonly changes: number[];
  /** Mean time of one polling round over the watched Envoys (ms): the resolution of `changedAt`. */
  readonly roundMs: number;
}

/**
 * Watches the versions ({@link EnvoyFleet.versions}) of `envoys` from `baseline`: polls them in
 * rounds (at most {@link CONCURRENCY} Envoys at a time) recording when each one's versions last
 * changed, until `stop()` says so (checked after each round, given the time of the last change
 * seen and whether every watched Envoy changed).
 */
export async function watchChange(
  fleet: EnvoyFleet,
  envoys: readonly FleetEnvoy[],
  baseline: readonly string[],
  clock: () => number,
  stop: (lastChangeAt: number, allChanged: boolean) => boolean,
): Promise<ChangeWatchResult> {
  const current = [...baseline];
  const changedAt = new Array<number | null>(envoys.length).fill(null);
  const changes = new Array<number>(envoys.length).fill(0);
  let rounds = 0;
  const started = clock();
  let lastChangeAt = 0;
  for (;;) {
    const round = clock();
    await mapLimit(envoys, CONCURRENCY, async (e, i) => {
      const v = await fleet.versions(e).catch(() => undefined);
      if (v !== undefined && v !== current[i]) {
        current[i] = v;
        changedAt[i] = clock();
        changes[i]++;
        lastChangeAt = changedAt[i]!;
      }
    });
    rounds++;
    if (stop(lastChangeAt, changedAt.every((t) => t !== null))) break;
    await sleep(Math.max(0, WATCH_ROUND_MS - (clock() - round)));
  }
  return { changedAt, changes, roundMs: (clock() - started) / rounds };
}
