/**
 * Traffic in a running lab, for tests: `trellis lab traffic` run in a pod (its summary), batches
 * of it until a condition holds (a configuration change reached Envoy), the versions a sidecar
 * ACKed (controller's /debug/proxies), and a pod's Envoy statistics (its admin socket).
 */
import assert from 'node:assert/strict';
import path from 'node:path';
import { EnvoyAdmin } from '../../src/lab/envoy.js';
import type { Lab } from '../../src/lab/lab.js';
import type { TrafficSummary } from '../../src/lab/traffic.js';

/** bin/trellis.js of this repository. */
export const TRELLIS = path.resolve(import.meta.dirname, '../../bin/trellis.js');

/** Runs several `lab traffic` argument lists in one process (test/fixtures/lab/traffic-runs.mjs). */
const TRAFFIC_RUNS = path.resolve(import.meta.dirname, '../fixtures/lab/traffic-runs.mjs');

/** A pod of the lab, by name and namespace. */
export interface LabPodRef {
  readonly pod: string;
  readonly namespace: string;
}

/** Runs `trellis lab traffic ARGS` in a pod and returns its summary. Fails the test when it exits non-zero. */
export async function labTraffic(lab: Lab, from: LabPodRef, args: readonly string[]): Promise<TrafficSummary> {
  const r = await lab.exec(from.pod, from.namespace, [process.execPath, TRELLIS, 'lab', 'traffic', ...args], { timeoutMs: 120_000 });
  assert.equal(r.code, 0, `lab traffic in ${from.namespace}/${from.pod} failed (${r.code}): ${r.stderr}`);
  return JSON.parse(r.stdout) as TrafficSummary;
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

/**
 * Sends batches of `args` traffic until a batch satisfies `done` (the configuration changed
 * and Envoy applied it), within a generous bound (60 s).
 * @returns the first satisfying batch and the time since `since` (ms).
 */
export async function labTrafficUntil(
  lab: Lab,
  from: LabPodRef,
  args: readonly string[],
  done: (s: TrafficSummary) => boolean,
  what: string,
  since = Date.now(),
): Promise<{ summary: TrafficSummary; afterMs: number }> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const summary = await labTraffic(lab, from, args);
    if (done(summary)) return { summary, afterMs: Date.now() - since };
    if (Date.now() > deadline) assert.fail(`${what}: still not after 60 s; last batch ${JSON.stringify(summary)}`);
  }
}

type TypeVersions = { versionAcked?: string | null; lastVersionSent?: string | null };

/** Per xDS type, the versions a proxy identity's streams have ACKed and been sent (controller's /debug/proxies), as sorted lines. */
export async function ackedVersions(lab: Lab, identity: string): Promise<{ acked: string; sent: string }> {
  const res = await fetch(`http://${lab.controllerHttp}/debug/proxies`);
  const proxies = (await res.json()) as { identity: string; streams: { types: Record<string, TypeVersions> }[] }[];
  const types = proxies.filter((p) => p.identity === identity).flatMap((p) => p.streams.flatMap((st) => Object.entries(st.types)));
  const line = (pick: (v: TypeVersions) => unknown) => types.map(([type, v]) => `${type}=${String(pick(v))}`).sort().join(' ');
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
