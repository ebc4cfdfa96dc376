import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import { runCommand } from '../src/lab/network.js';
import type { LabStatus } from '../src/lab/status.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { bookstoreLabDir } from './helpers/lab-manifests.js';

// h-lab's prefix and a slice of its subnet 10.251.0.0/24 (test/lab-network.test.ts uses another).
const PREFIX = 'tla';
const SUBNET = '10.251.0.0/25';
const HTTP_ADDRESS = '127.0.0.1:19102';
const TRELLIS = path.resolve(import.meta.dirname, '../bin/trellis.js');
const BUYER = { pod: 'bookbuyer-5d8c7f9b6-k2x4p', namespace: 'bookbuyer' };
// The HTTPRouteGroup of examples/bookstore allows /books-bought with these headers only.
const BOOKS_BOUGHT = ['curl', '-sS', '-m', '10', '-H', 'client-app: bookbuyer', '-A', 'bookbuyer-http-client/1.0', 'http://bookstore.bookstore:14001/books-bought'];

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore', 'curl']);

function trellis(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [TRELLIS, ...args], { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

async function netnsList(): Promise<string[]> {
  return (await runCommand(['ip', 'netns', 'list'])).split('\n').map((l) => l.split(' ')[0]).filter((n) => n !== '');
}

/** Polls `check` every 200 ms until it holds, or fails after `timeoutMs` with `what`. */
async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) assert.fail(`${what} did not happen in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

const EXTRA_POD = `apiVersion: v1
kind: Pod
metadata:
  name: bookstore-extra
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
  podIP: 10.244.3.30
`;

describe('trellis lab: examples/bookstore with real Envoy sidecars', { skip }, () => {
  let dir: string;
  let manifests: string;
  let lab: Lab;
  let acked: LabStatus;

  before(async () => {
    ({ dir, manifests } = await bookstoreLabDir(false));
    lab = await startLab({ manifestsDir: manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, stateDir: path.join(dir, 'state') });
    acked = await lab.waitForAllAcked(120_000);
  });

  after(async () => {
    await lab?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('runs every pod of the example, each sidecar LIVE with every type ACKed', () => {
    assert.deepEqual(acked.pods.map((p) => `${p.namespace}/${p.name}`).sort(), [
      'bookbuyer/bookbuyer-5d8c7f9b6-k2x4p', 'bookstore/bookstore-6b7f8d9c5-m4v1a', 'bookstore/bookstore-v2-8c4d5e6f7-r9v2b',
      'bookthief/bookthief-7c9d6b5f4-q8w2n', 'bookwarehouse/bookwarehouse-59f4c8b7d-t6h3c', 'bookwarehouse/mysql-0',
    ]);
    for (const pod of acked.pods) {
      assert.equal(pod.envoyState, 'LIVE', pod.name);
      assert.deepEqual(pod.nacks, [], pod.name);
      assert.ok(Object.keys(pod.types).includes('CDS') && Object.values(pod.types).every((t) => t === 'ACK'), `${pod.name}: ${JSON.stringify(pod.types)}`);
    }
  });

  it('routes bookbuyer → bookstore.bookstore:14001 through both sidecars to a bookstore pod', async () => {
    const result = await lab.exec(BUYER.pod, BUYER.namespace, BOOKS_BOUGHT);
    assert.equal(result.code, 0, result.stderr);
    const answer = JSON.parse(result.stdout) as { pod: string; namespace: string; headers: Record<string, string> };
    assert.match(answer.pod, /^bookstore-(6b7f8d9c5-m4v1a|v2-8c4d5e6f7-r9v2b)$/);
    assert.equal(answer.namespace, 'bookstore');
    assert.ok(answer.headers['x-request-id'], 'the request went through Envoy');
  });

  it('runs lab exec as the app user (root), not as Envoy uid 1500', async () => {
    const result = await lab.exec(BUYER.pod, BUYER.namespace, ['id', '-u']);
    assert.equal(result.stdout.trim(), '0');
  });

  it('trellis lab status lists every pod ACKed', async () => {
    const result = await trellis(['lab', 'status', '--prefix', PREFIX, '--state-dir', lab.stateDir, '--json']);
    assert.equal(result.code, 0, result.stderr);
    const status = JSON.parse(result.stdout) as LabStatus;
    assert.equal(status.pods.length, 6);
    for (const pod of status.pods) assert.deepEqual([...new Set(Object.values(pod.types))], ['ACK'], pod.name);
    const text = await trellis(['lab', 'status', '--prefix', PREFIX, '--state-dir', lab.stateDir]);
    assert.match(text.stdout, /bookbuyer-5d8c7f9b6-k2x4p\s+bookbuyer\s+10\.244\.1\.10/);
  });

  it('starts a pod added to the directory and stops it when its file is removed', async () => {
    const file = path.join(manifests, 'extra-pod.yaml');
    const netns = `${PREFIX}-bookstore-extra.bookstore`;
    await writeFile(file, EXTRA_POD);
    await until(`netns ${netns} appearing`, 60_000, async () => (await netnsList()).includes(netns));
    const status = await lab.waitForAllAcked(120_000);
    assert.ok(status.pods.some((p) => p.name === 'bookstore-extra' && p.types.LDS === 'ACK'));
    // The other pods reach it on-link.
    assert.match(await runCommand(['ip', '-n', `${PREFIX}-${BUYER.pod}.${BUYER.namespace}`, 'route', 'show', '10.244.3.30']), /dev eth0/);
    await rm(file);
    await until(`netns ${netns} vanishing`, 60_000, async () => !(await netnsList()).includes(netns));
    assert.equal(existsSync(`/etc/netns/${netns}`), false);
    await lab.settled();
    assert.ok(!lab.state().pods.some((p) => p.name === 'bookstore-extra'));
  });

  it('stop leaves nothing named with the prefix', async () => {
    const removed = await lab.stop();
    assert.ok(removed.includes(`link ${PREFIX}-br`), removed.join(', '));
    assert.deepEqual((await netnsList()).filter((n) => n.startsWith(`${PREFIX}-`)), []);
    assert.deepEqual((await runCommand(['ip', '-o', 'link', 'show'])).split('\n').filter((l) => new RegExp(`^\\d+:\\s+${PREFIX}-`).test(l)), []);
    assert.deepEqual(readdirSync('/etc/netns').filter((d) => d.startsWith(`${PREFIX}-`)), []);
    assert.equal(existsSync(lab.stateDir), false);
    const ps = await runCommand(['ps', '-eo', 'args']);
    assert.equal(ps.includes(lab.stateDir), false, 'no process of the lab is left');
  });
});
