/**
 * The lab's state file (`<state dir>/state.json`): what the supervisor runs, written by it at
 * every change, read by `trellis lab exec/status/down` (also after the supervisor crashed).
 */
import { readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
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

/** Writes the state file atomically (a temp file renamed over it), mode 0644. */
export async function writeLabState(state: LabState): Promise<void> {
  const file = labStateFile(state.stateDir);
  const temp = `${file}.${process.pid}.tmp`;
  await writeFile(temp, `${JSON.stringify(state, null, 2)}\n`, { mode: 0o644 });
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

/** Whether a process with this PID exists (signal 0). */
export function processAlive(pid: number | undefined): boolean {
  if (pid === undefined || !Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The command line of a process (`/proc/<pid>/cmdline`, NULs as spaces), or undefined when it is gone. */
export async function processCommandLine(pid: number): Promise<string | undefined> {
  try {
    return (await readFile(`/proc/${pid}/cmdline`, 'utf8')).split('\0').join(' ').trim();
  } catch {
    return undefined;
  }
}
