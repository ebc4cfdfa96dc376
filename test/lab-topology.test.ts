import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmod, mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import { podNetnsName, runCommand } from '../src/lab/network.js';
import type { LabState } from '../src/lab/state.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { labLeftovers } from './helpers/lab-prerequisites.js';
import { eventually } from './helpers/wait.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

// h-topo's prefix, subnet and operations port.
const PREFIX = 'tto';
const SUBNET = '10.241.0.0/24';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labTopology;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore']);

/** Pod `q` of a 63-character namespace: its netns name is cut and hashed. */
const LONG_NS = 'n'.repeat(63);
/** The namespace whose verbatim netns name was the cut-and-hashed name of `q` in {@link LONG_NS} (before names were made collision-free). */
const TWIN_NS = `${'n'.repeat(45)}-${createHash('sha256').update(`q.${LONG_NS}`).digest('hex').slice(0, 8)}`;

function pod(namespace: string, name: string, podIP: string): string {
  return `apiVersion: v1
kind: Pod
metadata: {name: ${name}, namespace: ${namespace}, labels: {app: ${name}}}
spec: {containers: [{name: app, ports: [{name: tcp-echo, containerPort: 7000}]}]}
status: {podIP: ${podIP}, phase: Running}
`;
}

async function writeManifests(dir: string, docs: readonly string[]): Promise<void> {
  const file = path.join(dir, 'pods.yaml');
  await writeFile(`${file}.tmp`, docs.join('---\n'));
  await rename(`${file}.tmp`, file);
}

function problem(state: LabState, key: string): string | undefined {
  return state.problems.find((p) => p.key === key)?.message;
}

describe('trellis lab: pod names, addresses and capacity', { skip }, () => {
  let dir: string;
  let manifests: string;
  let lab: Lab;
  const blocker = `${PREFIX}-blocked.plain`;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-lab-topo-'));
    await chmod(dir, 0o755); // Envoy (uid 1500) would read below the state dir
    manifests = path.join(dir, 'manifests');
    await mkdir(manifests);
    await writeManifests(manifests, [
      pod(LONG_NS, 'q', '10.9.1.1'),
      pod(TWIN_NS, 'q', '10.9.1.2'),
      pod('plain', 'a', '10.9.1.3'),
      pod('plain', 'b', '10.9.1.4'),
      pod('plain', 'c', '10.9.1.5'),
      pod('plain', 'reserved', '240.0.0.1'),
      pod('plain', 'loopback', '127.0.0.1'),
    ]);
    lab = await startLab({ manifestsDir: manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(dir, 'state'), maxPods: 4 });
    await lab.waitForAllAcked(60_000);
  });

  after(async () => {
    await lab?.stop();
    await runCommand(['ip', 'netns', 'del', blocker]).catch(() => undefined);
    if (dir) await rm(dir, { recursive: true, force: true });
    assert.deepEqual(await labLeftovers(PREFIX), []);
  });

  it('runs two pods whose cut-and-hashed and verbatim netns names used to be the same, each in its own netns', () => {
    const state = lab.state();
    const q = state.pods.filter((p) => p.name === 'q');
    assert.equal(q.length, 2);
    assert.ok(q.every((p) => p.error === undefined && p.appPid !== undefined), JSON.stringify(q));
    assert.notEqual(q[0].netns, q[1].netns);
  });

  it('lists pods over maxPods, with a reserved IP or refused by the manifests as not run, with the reason', () => {
    const state = lab.state();
    assert.deepEqual(state.pods.map((p) => `${p.namespace}/${p.name}`).sort(), [`${LONG_NS}/q`, `${TWIN_NS}/q`, 'plain/a', 'plain/b'].sort());
    assert.equal(problem(state, 'plain/c'), 'no lab address: the lab runs at most 4 pods (its maxPods), and 5 want to run');
    assert.equal(problem(state, 'plain/reserved'), 'status.podIP 240.0.0.1 is reserved (240.0.0.0/4, with the broadcast address 255.255.255.255): the lab never assigns it');
    assert.match(problem(state, 'plain/loopback') ?? '', /^refused by the manifests: .*pods\.yaml:\d+: Pod plain\/loopback: status\.podIP: "127\.0\.0\.1" may not be in the loopback range/);
  });

  it('starts a pod again after its start failed, without a change of its manifest', async () => {
    assert.equal(podNetnsName(PREFIX, 'blocked.plain'), blocker);
    await runCommand(['ip', 'netns', 'add', blocker]);
    await writeManifests(manifests, [pod(LONG_NS, 'q', '10.9.1.1'), pod(TWIN_NS, 'q', '10.9.1.2'), pod('plain', 'a', '10.9.1.3'), pod('plain', 'blocked', '10.9.1.6')]);
    const blocked = () => lab.state().pods.find((p) => p.name === 'blocked');
    await eventually(() => blocked()?.error !== undefined, 'the blocked pod fails to start', 30_000, 50);
    assert.match(blocked()!.error!, /already exists.*\(start 1 of 8: tried again in 1 s\)/);
    await runCommand(['ip', 'netns', 'del', blocker]);
    await eventually(() => blocked()?.error === undefined && blocked()?.appPid !== undefined, 'the blocked pod runs', 30_000, 50);
    await lab.waitForAllAcked(30_000);
  });

  it('counts the starts of a pod whose app exits after every start, so its restarts are bounded and back off', async () => {
    const crashing = `apiVersion: v1
kind: Pod
metadata: {name: crashing, namespace: plain, annotations: {lab.trellis.dev/command: '["sh", "-c", "sleep 0.2; exit 3"]'}}
spec: {containers: [{name: app}]}
status: {podIP: 10.9.1.7, phase: Running}
`;
    await writeManifests(manifests, [pod(LONG_NS, 'q', '10.9.1.1'), pod(TWIN_NS, 'q', '10.9.1.2'), pod('plain', 'a', '10.9.1.3'), crashing]);
    const error = () => lab.state().pods.find((p) => p.name === 'crashing')?.error ?? '';
    await eventually(() => /\(start 3 of 8: tried again in 4 s\)/.test(error()), 'the third start of the crashing pod', 60_000, 50);
    assert.match(error(), /^app \(pid \d+\) exited with 3 \(start 3 of 8: tried again in 4 s\)$/);
  });
});
