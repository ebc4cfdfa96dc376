/**
 * Traffic in a running lab, for tests: `trellis lab traffic` runs in a pod (their summaries),
 * and a pod's Envoy admin interface and statistics (its admin socket).
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
