/**
 * The lab's status: every pod, its addresses, its Envoy and what the controller says of that
 * Envoy's xDS streams (connected, ACK/NACK per type, from `/debug/proxies`), plus whether
 * Envoy's admin says it is LIVE (`/ready`).
 */
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { splitHostPort } from '../util/address.js';
import { EnvoyAdmin } from './envoy.js';
import type { LabPodState, LabState } from './state.js';
import { processAlive } from './process.js';

/** State of one xDS type of a sidecar, as the controller sees it. */
export type XdsTypeState = 'ACK' | 'NACK' | 'PENDING';

/** One pod's status. */
export interface LabPodStatus {
  readonly name: string;
  readonly namespace: string;
  readonly netns: string;
  readonly podIp: string;
  readonly labAddress: string;
  readonly mesh: boolean;
  readonly appPid: number | undefined;
  readonly appRunning: boolean;
  /** The pod's container ports the app does not listen on (yet). */
  readonly appNotListening: readonly number[];
  readonly envoyPid: number | undefined;
  readonly envoyRunning: boolean;
  /** Whether the controller has an ADS stream of this pod's proxy. */
  readonly connected: boolean;
  /** The xDS variant of its latest stream: state of the world or incremental (delta). */
  readonly xdsMode: 'SotW' | 'delta' | undefined;
  /** Per xDS type the stream subscribed to (`CDS`, `EDS`, `LDS`, `RDS`, `SDS`). */
  readonly types: Readonly<Record<string, XdsTypeState>>;
  /** The last NACK of each type still in force: Envoy's error text. */
  readonly nacks: readonly { readonly type: string; readonly version: string; readonly message: string }[];
  /** Envoy's admin `/ready` answer (`LIVE`, `PRE_INITIALIZING`, …), or undefined when it does not answer. */
  readonly envoyState: string | undefined;
  readonly exited: readonly string[];
  readonly error: string | undefined;
}

/** The lab's status (see {@link labStatus}). */
export interface LabStatus {
  readonly prefix: string;
  readonly phase: LabState['phase'];
  readonly error: string | undefined;
  readonly supervisorPid: number;
  readonly supervisorRunning: boolean;
  readonly controllerPid: number | undefined;
  /** Whether the controller the supervisor recorded runs. */
  readonly controllerRunning: boolean;
  readonly controllerHttp: string;
  readonly xdsAddress: string;
  readonly subnet: string;
  readonly pods: readonly LabPodStatus[];
  readonly problems: LabState['problems'];
  /** Why the controller's `/debug/proxies` could not be read, if it could not. */
  readonly controllerError: string | undefined;
  /** How many problems the controller's `/debug/policies` lists (undefined when it could not be read). */
  readonly controllerProblems: ControllerProblems | undefined;
}

/** Counts of what the controller's `/debug/policies` reports as wrong in the manifests and policies. */
export interface ControllerProblems {
  /** `manifestErrors`: files or objects skipped. */
  readonly manifestErrors: number;
  /** `problems`: policies not applied (in part or whole). */
  readonly policyProblems: number;
  /** `configValidationFailures`: proxies whose generated configuration failed validation. */
  readonly validationFailures: number;
}

/** Types Envoy always subscribes to: a sidecar is not ACKed before it holds these. */
const REQUIRED_TYPES = ['CDS', 'LDS'] as const;

/** Largest answer read from the controller or an Envoy admin, in bytes. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
/** Time allowed for one status request, in ms. */
const REQUEST_TIMEOUT_MS = 5000;

/** GET `http://<address><requestPath>` (`address` is `host:port`); bounded body and time. */
export function httpGet(address: string, requestPath: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const { host, port } = splitHostPort(address);
    const req = http.request(
      { host, port, path: requestPath, method: 'GET', timeout: REQUEST_TIMEOUT_MS },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_ANSWER_BYTES) req.destroy(new Error(`${requestPath}: answer over ${MAX_ANSWER_BYTES} bytes`));
          else chunks.push(chunk);
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${requestPath}: no answer in ${REQUEST_TIMEOUT_MS} ms`)));
    req.on('error', reject);
    req.end();
  });
}

interface ProxyView {
  uuid: string;
  streams: { streamId: number; mode?: string; connectedAt: string; types: Record<string, { versionAcked: string | null; lastVersionSent: string | null; lastNack: { version: string; message: string } | null }> }[];
}

function typeStates(view: ProxyView | undefined): Pick<LabPodStatus, 'connected' | 'xdsMode' | 'types' | 'nacks'> {
  const stream = view?.streams.slice().sort((a, b) => b.streamId - a.streamId)[0];
  if (!stream) return { connected: false, xdsMode: undefined, types: {}, nacks: [] };
  const types: Record<string, XdsTypeState> = {};
  const nacks: { type: string; version: string; message: string }[] = [];
  for (const [type, t] of Object.entries(stream.types).sort(([a], [b]) => (a < b ? -1 : 1))) {
    const acked = t.lastVersionSent !== null && t.versionAcked === t.lastVersionSent;
    const nacked = t.lastNack !== null && t.lastNack.version === t.lastVersionSent;
    types[type] = acked ? 'ACK' : nacked ? 'NACK' : 'PENDING';
    if (t.lastNack !== null && !acked) nacks.push({ type, version: t.lastNack.version, message: t.lastNack.message });
  }
  return { connected: true, xdsMode: stream.mode === 'delta' ? 'delta' : 'SotW', types, nacks };
}

/**
 * The pod's ports nothing listens on in its netns, from `/proc/<app pid>/net/tcp{,6}` (the
 * sockets of the process's network namespace; state `0A` is LISTEN).
 */
async function notListening(pod: LabPodState): Promise<number[]> {
  const ports = pod.ports ?? [];
  if (ports.length === 0 || pod.appPid === undefined) return [...ports];
  const listening = new Set<number>();
  for (const table of ['tcp', 'tcp6']) {
    const text = await readFile(`/proc/${pod.appPid}/net/${table}`, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      if (fields[3] === '0A') listening.add(parseInt(fields[1]?.split(':')[1] ?? '', 16));
    }
  }
  return ports.filter((p) => !listening.has(p));
}

async function envoyState(pod: LabPodState): Promise<string | undefined> {
  if (!pod.adminSocket) return undefined;
  const answer = await new EnvoyAdmin(pod.adminSocket, MAX_ANSWER_BYTES, REQUEST_TIMEOUT_MS).get('/ready').catch(() => undefined);
  return answer?.body.trim() || undefined;
}

/** The counts of the controller's `/debug/policies` at `address`, or undefined when it cannot be read. */
async function controllerProblems(address: string): Promise<ControllerProblems | undefined> {
  try {
    const answer = await httpGet(address, '/debug/policies');
    if (answer.status !== 200) return undefined;
    const body = JSON.parse(answer.body) as { manifestErrors?: unknown[]; problems?: unknown[]; configValidationFailures?: unknown[] };
    return {
      manifestErrors: body.manifestErrors?.length ?? 0,
      policyProblems: body.problems?.length ?? 0,
      validationFailures: body.configValidationFailures?.length ?? 0,
    };
  } catch {
    return undefined;
  }
}

/**
 * The status of a lab from its state file, the controller's `/debug/proxies` and
 * `/debug/policies` and each Envoy's admin `/ready`. Never throws: what cannot be read is reported in the result.
 */
export async function labStatus(state: LabState): Promise<LabStatus> {
  let proxies: ProxyView[] = [];
  let controllerError: string | undefined;
  try {
    const answer = await httpGet(state.httpAddress, '/debug/proxies');
    if (answer.status !== 200) throw new Error(`HTTP ${answer.status}`);
    proxies = JSON.parse(answer.body) as ProxyView[];
  } catch (err) {
    controllerError = `controller ${state.httpAddress}/debug/proxies: ${err instanceof Error ? err.message : String(err)}`;
  }
  const pods = await Promise.all(state.pods.map(async (pod): Promise<LabPodStatus> => ({
    name: pod.name,
    namespace: pod.namespace,
    netns: pod.netns,
    podIp: pod.podIp,
    labAddress: pod.labAddress,
    mesh: pod.mesh,
    appPid: pod.appPid,
    appRunning: processAlive(pod.appPid),
    appNotListening: await notListening(pod),
    envoyPid: pod.envoyPid,
    envoyRunning: processAlive(pod.envoyPid),
    ...typeStates(proxies.find((p) => p.uuid === pod.proxyUuid)),
    envoyState: pod.mesh ? await envoyState(pod) : undefined,
    exited: pod.exited ?? [],
    error: pod.error,
  })));
  return {
    prefix: state.prefix,
    phase: state.phase,
    error: state.error,
    supervisorPid: state.supervisorPid,
    supervisorRunning: processAlive(state.supervisorPid),
    controllerPid: state.controllerPid,
    controllerRunning: processAlive(state.controllerPid),
    controllerHttp: state.httpAddress,
    xdsAddress: state.xdsAddress,
    subnet: state.subnet,
    pods,
    problems: state.problems,
    controllerError,
    controllerProblems: controllerError === undefined ? await controllerProblems(state.httpAddress) : undefined,
  };
}

/**
 * Whether one pod is ready: its app runs; in the mesh, its Envoy runs, is LIVE, is connected,
 * and has ACKed the last response of every type it subscribed to (at least CDS and LDS).
 */
export function podReady(pod: LabPodStatus): boolean {
  if (pod.error !== undefined || !pod.appRunning || pod.appNotListening.length > 0) return false;
  if (!pod.mesh) return true;
  const types = Object.keys(pod.types);
  return pod.envoyRunning && pod.envoyState === 'LIVE' && pod.connected &&
    REQUIRED_TYPES.every((t) => types.includes(t)) && types.every((t) => pod.types[t] === 'ACK');
}

/** Whether every pod of the lab is ready ({@link podReady}) and the lab is running with its controller. */
export function allReady(status: LabStatus): boolean {
  return status.phase === 'running' && labFailures(status).length === 0 && status.pods.every(podReady);
}

/**
 * Why the lab is of no use as it is (empty when it is fine): its supervisor or controller is
 * not running, the controller does not answer, or the directory has pods and none of them runs
 * (a directory without pods is fine). `lab up` and `lab status` exit 1 on any.
 */
export function labFailures(status: LabStatus): string[] {
  const failures: string[] = [];
  if (!status.supervisorRunning) failures.push(`the supervisor (pid ${status.supervisorPid}) is not running`);
  if (!status.controllerRunning && status.phase !== 'starting') failures.push(status.error ?? 'the controller is not running');
  else if (status.controllerError !== undefined) failures.push(status.controllerError);
  const wanted = status.pods.length + status.problems.length;
  if (status.phase === 'running' && wanted > 0 && !status.pods.some((p) => p.error === undefined && p.appRunning)) {
    failures.push(`none of the ${wanted} pods of the directory runs`);
  }
  return failures;
}

/** Whether waiting longer cannot make the lab ready: it failed ({@link labFailures}) and no pod is still starting. */
export function labFailedForGood(status: LabStatus): boolean {
  return status.phase === 'running' && (!status.supervisorRunning || !status.controllerRunning ||
    (status.pods.length + status.problems.length > 0 && status.pods.every((p) => p.error !== undefined)));
}

const TYPE_COLUMNS = ['CDS', 'EDS', 'LDS', 'RDS', 'SDS'] as const;

/** The status as a table (one line per pod), then NACKs, errors and problems, for `trellis lab status`. */
export function formatLabStatus(status: LabStatus): string {
  const header = ['POD', 'NAMESPACE', 'POD IP', 'APP', 'ENVOY', 'STATE', 'ADS', 'XDS', ...TYPE_COLUMNS];
  const rows = status.pods.map((p) => [
    p.name,
    p.namespace,
    p.podIp,
    p.appRunning ? `${p.appPid}${p.appNotListening.length > 0 ? ' (starting)' : ''}` : 'down',
    p.mesh ? (p.envoyRunning ? String(p.envoyPid) : 'down') : '-',
    p.mesh ? (p.envoyState ?? '?') : 'outside mesh',
    p.mesh ? (p.connected ? 'connected' : 'no') : '-',
    p.mesh ? (p.xdsMode ?? '-') : '-',
    ...TYPE_COLUMNS.map((t) => (p.mesh ? (p.types[t] ?? '-') : '-')),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd();
  const out = [
    `lab ${status.prefix}: ${status.phase}${status.supervisorRunning ? '' : ' (supervisor not running)'}; controller ${status.controllerHttp} (ADS ${status.xdsAddress}); subnet ${status.subnet}`,
    line(header),
    ...rows.map(line),
  ];
  if (rows.length > 0) out.push(`(${TYPE_COLUMNS.join('/')}: ACK, NACK, PENDING (sent, not ACKed yet), or - not subscribed; XDS: SotW or delta)`);
  if (status.error) out.push(`error: ${status.error}`);
  if (status.controllerError) out.push(`error: ${status.controllerError}`);
  for (const p of status.pods) {
    for (const n of p.nacks) out.push(`NACK ${p.namespace}/${p.name} ${n.type} version ${n.version}: ${n.message}`);
    if (p.error) out.push(`error ${p.namespace}/${p.name}: ${p.error}`);
    if (p.appRunning && p.appNotListening.length > 0) out.push(`starting ${p.namespace}/${p.name}: nothing listens on port ${p.appNotListening.join(', ')} yet`);
    for (const e of p.exited) out.push(`exited ${p.namespace}/${p.name}: ${e}`);
  }
  for (const problem of status.problems) out.push(`not run: ${problem.key}: ${problem.message}`);
  const counts = status.controllerProblems;
  const total = counts ? counts.manifestErrors + counts.policyProblems + counts.validationFailures : 0;
  if (counts && total > 0) {
    out.push(`controller: ${total} manifest/policy problem${total === 1 ? '' : 's'} (${counts.manifestErrors} manifest errors, ${counts.policyProblems} policy problems, ${counts.validationFailures} validation failures): see curl -s http://${status.controllerHttp}/debug/policies`);
  }
  return `${out.join('\n')}\n`;
}
