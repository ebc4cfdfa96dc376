/**
 * The lab's state file (`<state dir>/state.json`): what the supervisor runs, written by it at
 * every change, read by `trellis lab exec/status/down` (also after the supervisor crashed).
 */
import { mkdir, readFile, rename, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { processAlive } from './process.js';
import type { LabPodProblem } from './topology.js';

/** Where a lab keeps its state by default: `/run/trellis-lab/<prefix>`. */
export function defaultLabStateDir(prefix: string): string {
  return path.join('/run/trellis-lab', prefix);
}

/** The state file's path in a state dir. */
export function labStateFile(stateDir: string): string {
  return path.join(stateDir, 'state.json');
}

/** Largest state file read, in bytes (a lab of a few hundred pods is far below it). */
const MAX_STATE_BYTES = 8 * 1024 * 1024;

/** One pod as the supervisor runs it. */
export interface LabPodState {
  readonly name: string;
  readonly namespace: string;
  readonly serviceAccount: string;
  readonly netns: string;
  readonly podIp: string;
  readonly labAddress: string;
  /** Whether the pod is in the mesh (interception and an Envoy sidecar). */
  readonly mesh: boolean;
  /** The sidecar's proxy UUID (its xDS certificate's CN starts with it). */
  readonly proxyUuid?: string;
  readonly envoyPid?: number;
  /** Envoy's admin interface (a Unix socket, mode 0600). */
  readonly adminSocket?: string;
  readonly appPid?: number;
  /** The app's argv. */
  readonly app?: readonly string[];
  /** The pod's TCP container ports: the app is ready once it listens on all of them. */
  readonly ports: readonly number[];
  /** Set when a process of the pod exited: `envoy exited with 1`, … */
  readonly exited?: readonly string[];
  /** Why the pod could not be started, if it could not. */
  readonly error?: string;
}

/** The whole lab. */
export interface LabState {
  readonly version: 1;
  readonly prefix: string;
  readonly subnet: string;
  readonly bridgeAddress: string;
  readonly manifestsDir: string;
  readonly stateDir: string;
  /** `host:port` of the controller's ops HTTP server. */
  readonly httpAddress: string;
  /** `host:port` of the controller's mTLS ADS listener (on the bridge address). */
  readonly xdsAddress: string;
  readonly delta: boolean;
  readonly supervisorPid: number;
  readonly controllerPid?: number;
  /** `starting` until the first pods run, `running`, `stopping`, or `failed` (see `error`). */
  readonly phase: 'starting' | 'running' | 'stopping' | 'failed';
  readonly error?: string;
  readonly pods: readonly LabPodState[];
  /** Pods of DIR the lab does not run, and why. */
  readonly problems: readonly LabPodProblem[];
}

/** Writes the state file atomically (a temp file renamed over it), mode 0600 (root's: pods and Envoy never read it). */
export async function writeLabState(state: LabState): Promise<void> {
  const file = labStateFile(state.stateDir);
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
  await rename(temp, file);
}

/**
 * Reads a lab's state file.
 * @returns undefined when there is none (no lab, or it was taken down).
 * @throws Error naming the file when it is unreadable, too large or not a lab state.
 */
export async function readLabState(stateDir: string): Promise<LabState | undefined> {
  const file = labStateFile(stateDir);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`cannot read ${file}: ${(err as Error).message}`);
  }
  if (text.length > MAX_STATE_BYTES) throw new Error(`${file} is larger than ${MAX_STATE_BYTES} bytes: not a lab state file`);
  let state: unknown;
  try {
    state = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file} is not JSON: ${(err as Error).message}`);
  }
  if (typeof state !== 'object' || state === null || (state as { version?: unknown }).version !== 1 || !Array.isArray((state as { pods?: unknown }).pods)) {
    throw new Error(`${file} is not a lab state file (version 1)`);
  }
  return state as LabState;
}

/** Where the lab records which process owns a prefix (`<prefix>.owner.json`). */
export const LAB_RUN_DIR = '/run/trellis-lab';

/** Who owns a lab prefix: the supervisor (or test) that runs the lab, and its state dir. */
export interface LabOwner {
  readonly pid: number;
  readonly stateDir: string;
  readonly since: string;
  /** Whether that process still runs (worked out when read). */
  readonly alive: boolean;
}

function ownerFile(prefix: string): string {
  return path.join(LAB_RUN_DIR, `${prefix}.owner.json`);
}

/** The recorded owner of `prefix` (alive or not: a crashed lab's state dir is found so), or undefined. */
export async function readLabOwner(prefix: string): Promise<LabOwner | undefined> {
  const text = await readFile(ownerFile(prefix), 'utf8').catch(() => undefined);
  if (text === undefined || text.length > 4096) return undefined;
  try {
    const owner = JSON.parse(text) as Omit<LabOwner, 'alive'>;
    if (!Number.isInteger(owner.pid) || typeof owner.stateDir !== 'string') return undefined;
    return { pid: owner.pid, stateDir: owner.stateDir, since: String(owner.since), alive: processAlive(owner.pid) };
  } catch {
    return undefined;
  }
}

/**
 * Claims `prefix` for this process (`/run/trellis-lab/<prefix>.owner.json`, created exclusively):
 * one lab per prefix on the host, whatever its state dir, so one lab never removes another's
 * names while cleaning up after a crash. An owner that died is replaced.
 * @throws Error naming the owner's PID and state dir when a live process owns the prefix.
 */
export async function claimLabPrefix(prefix: string, stateDir: string): Promise<void> {
  await mkdir(LAB_RUN_DIR, { recursive: true, mode: 0o755 });
  const owner = { pid: process.pid, stateDir, since: new Date().toISOString() };
  for (let attempt = 0; ; attempt++) {
    try {
      await writeFile(ownerFile(prefix), `${JSON.stringify(owner)}\n`, { flag: 'wx', mode: 0o600 });
      return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
    }
    const current = await readLabOwner(prefix);
    if (current?.pid === process.pid) return;
    if (current?.alive) throw new Error(`lab prefix "${prefix}" is in use by pid ${current.pid} (state dir ${current.stateDir}): trellis lab down --prefix ${prefix}, or use another prefix`);
    await unlink(ownerFile(prefix)).catch(() => undefined);
  }
}

/** Gives up `prefix` when `pid` (default: this process) owns it, or its owner died. */
export async function releaseLabPrefix(prefix: string, pid: number = process.pid): Promise<void> {
  const current = await readLabOwner(prefix);
  if (current === undefined || !current.alive || current.pid === pid) await unlink(ownerFile(prefix)).catch(() => undefined);
}
