/**
 * What the lab traffic tests share (test/lab-traffic.test.ts, test/lab-faults.test.ts,
 * test/lab-policies.test.ts): the bookstore pods of examples/bookstore and a copy of it,
 * `trellis lab traffic` run in a pod (a batch, several batches in one process, a batch repeated
 * until a condition holds, or a steady client stopped by a signal), the versions a sidecar ACKed
 * as the controller's `/debug/proxies` reports them, and a pod's Envoy admin interface and
 * statistics (its admin socket).
 */
import assert from 'node:assert/strict';
import { chmod, cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { EnvoyAdmin } from '../../src/lab/envoy.js';
import type { Lab } from '../../src/lab/lab.js';
import type { TrafficSummary } from '../../src/lab/traffic.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** bin/trellis.js of this repository (the whole CLI). */
export const TRELLIS = path.join(REPO, 'bin', 'trellis.js');
/** `trellis lab app|traffic` without the rest of the CLI (bin/trellis-lab-tools.js: same commands, starts faster). */
export const LAB_TOOLS = path.join(REPO, 'bin', 'trellis-lab-tools.js');

/** Runs several `lab traffic` argument lists in one process (test/fixtures/lab/traffic-runs.mjs). */
const TRAFFIC_RUNS = path.join(REPO, 'test', 'fixtures', 'lab', 'traffic-runs.mjs');

/** A pod of a lab, by name and namespace (as `Lab.exec` names it). */
export interface LabPodRef {
  readonly pod: string;
  readonly namespace: string;
}

/** The client pods of examples/bookstore. */
export const BOOKBUYER: LabPodRef = { pod: 'bookbuyer-5d8c7f9b6-k2x4p', namespace: 'bookbuyer' };
export const BOOKTHIEF: LabPodRef = { pod: 'bookthief-7c9d6b5f4-q8w2n', namespace: 'bookthief' };
export const BOOKWAREHOUSE: LabPodRef = { pod: 'bookwarehouse-59f4c8b7d-t6h3c', namespace: 'bookwarehouse' };
/** The names of the bookstore-v1 and bookstore-v2 pods of examples/bookstore (as `answeredBy` counts them). */
export const BOOKSTORE_V1 = 'bookstore-6b7f8d9c5-m4v1a';
export const BOOKSTORE_V2 = 'bookstore-v2-8c4d5e6f7-r9v2b';
/** The headers the `books-bought` match of HTTPRouteGroup bookstore-service-routes requires. */
export const BOOKBUYER_HEADERS = ['--header', 'user-agent:bookbuyer-http-client/1.0', '--header', 'client-app:bookbuyer'];
/** The URL of bookstore's `books-bought` route. */
export const BOOKS_BOUGHT = 'http://bookstore.bookstore:14001/books-bought';

/** A Pod manifest (YAML) of one more bookstore-v1 pod (service account bookstore, port 14001) named `name` at `podIP`. */
export function bookstoreV1Pod(name: string, podIP: string): string {
  return `apiVersion: v1
kind: Pod
metadata:
  name: ${name}
  namespace: bookstore
  labels:
    app: bookstore
    version: v1
spec:
  serviceAccountName: bookstore
  containers:
    - name: bookstore
      ports:
        - name: web
          containerPort: 14001
status:
  phase: Running
  podIP: ${podIP}
`;
}

/**
 * A copy of examples/bookstore (without its README) in a new temp dir named `<prefix>-manifests-…`,
 * mode 0755; `change` may edit the copy before the lab reads it.
 */
export async function bookstoreManifests(prefix: string, change?: (dir: string) => Promise<void>): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), `${prefix}-manifests-`));
  await chmod(dir, 0o755);
  await cp(path.join(REPO, 'examples', 'bookstore'), dir, { recursive: true });
  await rm(path.join(dir, 'README.md'));
  await change?.(dir);
  return dir;
}

/** Runs `trellis lab traffic ARGS` in a pod of `lab` and returns its summary; fails the test when it fails. */
export async function traffic(lab: Lab, from: LabPodRef, args: string[]): Promise<TrafficSummary> {
  const r = await lab.exec(from.pod, from.namespace, [process.execPath, LAB_TOOLS, 'lab', 'traffic', ...args], { timeoutMs: 120_000 });
  assert.equal(r.code, 0, `lab traffic in ${from.namespace}/${from.pod} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout) as TrafficSummary;
}

/**
 * Sends batches of `args` traffic until a batch satisfies `done` (the configuration changed
 * and Envoy applied it), within a generous bound (60 s).
 * @returns the first satisfying batch and the time since `since` (ms).
 */
export async function trafficUntil(
  lab: Lab,
  from: LabPodRef,
  args: string[],
  done: (s: TrafficSummary) => boolean,
  what: string,
  since = Date.now(),
): Promise<{ summary: TrafficSummary; afterMs: number }> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const summary = await traffic(lab, from, args);
    if (done(summary)) return { summary, afterMs: Date.now() - since };
    if (Date.now() > deadline) assert.fail(`${what}: still not after 60 s; last batch ${JSON.stringify(summary)}`);
  }
}

/** A steady `trellis lab traffic --until-signal` client running in a pod (see {@link steadyTraffic}). */
export interface SteadyTraffic {
  /** Sends it SIGTERM and returns the summary it prints. */
  stop(): Promise<TrafficSummary>;
}

/**
 * Starts `trellis lab traffic ARGS --until-signal` in a pod of `lab`: it sends until
 * {@link SteadyTraffic.stop} (or 10 minutes, then it is killed and the test fails).
 */
export function steadyTraffic(lab: Lab, from: LabPodRef, args: string[]): SteadyTraffic {
  const abort = new AbortController();
  const run = lab.exec(from.pod, from.namespace, [process.execPath, LAB_TOOLS, 'lab', 'traffic', ...args, '--until-signal'], {
    timeoutMs: 600_000,
    signal: abort.signal,
  });
  return {
    async stop() {
      abort.abort();
      const r = await run;
      // 143 (SIGTERM) with nothing printed: stopped before it could catch the signal.
      assert.equal(r.code, 0, `steady lab traffic in ${from.namespace}/${from.pod} failed (${r.code}${r.code === 143 && r.stdout === '' ? ': stopped before it started' : ''}): ${r.stderr}`);
      return JSON.parse(r.stdout) as TrafficSummary;
    },
  };
}

/** Per xDS type, the versions a proxy identity's streams have ACKed and been sent (controller's /debug/proxies). */
export async function ackedVersions(lab: Lab, identity: string): Promise<{ acked: string; sent: string }> {
  const res = await fetch(`http://${lab.controllerHttp}/debug/proxies`);
  const proxies = (await res.json()) as { identity: string; streams: { types: Record<string, { versionAcked?: string | null; lastVersionSent?: string | null }> }[] }[];
  const types = proxies.filter((p) => p.identity === identity).flatMap((p) => p.streams.flatMap((st) => Object.entries(st.types)));
  const line = (pick: (v: { versionAcked?: string | null; lastVersionSent?: string | null }) => unknown) =>
    types.map(([type, v]) => `${type}=${String(pick(v))}`).sort().join(' ');
  return { acked: line((v) => v.versionAcked), sent: line((v) => v.lastVersionSent) };
}

/**
 * Waits until the sidecar of `identity` has ACKed a configuration other than `before` and
 * everything it was sent (the controller's push applied), within a generous bound (60 s).
 * @returns the time since `since`, ms.
 */
export async function newConfigurationAcked(lab: Lab, identity: string, before: string, since: number): Promise<number> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const v = await ackedVersions(lab, identity);
    if (v.acked !== before && v.acked === v.sent) return Date.now() - since;
    if (Date.now() > deadline) assert.fail(`${identity}: no new configuration ACKed after 60 s (acked ${v.acked}, sent ${v.sent})`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * Runs `body` while steady clients send, then stops them and returns their summaries in order.
 * When `body` throws, the clients are stopped (their own failures ignored) and its error is
 * thrown, so a failing check is never hidden behind a client stopped too early.
 */
export async function whileSending<T>(clients: readonly SteadyTraffic[], body: () => Promise<T>): Promise<{ result: T; summaries: TrafficSummary[] }> {
  let result: T;
  try {
    result = await body();
  } catch (err) {
    await Promise.allSettled(clients.map((c) => c.stop()));
    throw err;
  }
  return { result, summaries: await Promise.all(clients.map((c) => c.stop())) };
}

/**
 * Runs `trellis lab traffic` once for each argument list of `runs`, one after the other, in
 * one process in a pod (the CLI's parser and client; a process start per run would dominate
 * short runs), and returns their summaries in order. Fails the test when a run fails.
 */
export async function labTrafficRuns(lab: Lab, from: LabPodRef, runs: readonly (readonly string[])[]): Promise<TrafficSummary[]> {
  const r = await lab.exec(from.pod, from.namespace, [process.execPath, TRAFFIC_RUNS, JSON.stringify(runs)], { timeoutMs: 180_000 });
  assert.equal(r.code, 0, `lab traffic runs in ${from.namespace}/${from.pod} failed (${r.code}): ${r.stderr}`);
  const summaries = r.stdout.split('\n').filter((l) => l.trim() !== '').map((l) => JSON.parse(l) as TrafficSummary);
  assert.equal(summaries.length, runs.length, `lab traffic runs in ${from.namespace}/${from.pod}: ${summaries.length} summaries for ${runs.length} runs`);
  return summaries;
}

/** The admin interface of a meshed pod's sidecar. @throws AssertionError when the lab runs no sidecar for it. */
export function labEnvoyAdmin(lab: Lab, of: LabPodRef): EnvoyAdmin {
  const pod = lab.state().pods.find((p) => p.name === of.pod && p.namespace === of.namespace);
  assert.ok(pod?.adminSocket, `the lab runs no sidecar for ${of.namespace}/${of.pod}`);
  return new EnvoyAdmin(pod.adminSocket);
}

/** A pod's Envoy counters and gauges by name (`/stats`). */
export function labEnvoyStats(lab: Lab, of: LabPodRef): Promise<Map<string, number>> {
  return labEnvoyAdmin(lab, of).stats();
}

/** The sum of the counters whose names `match` selects. */
export function sumStats(stats: ReadonlyMap<string, number>, match: (name: string) => boolean): number {
  let total = 0;
  for (const [name, value] of stats) if (match(name)) total += value;
  return total;
}

/** The sum of the values of `counts` (a summary's statuses, answeredBy or errors). */
export function total(counts: Readonly<Record<string, number>>): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}
