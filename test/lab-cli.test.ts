import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { envoyTestSkip } from './helpers/envoy.js';
import { labLeftovers } from './helpers/lab-prerequisites.js';
import { bookstoreLabDir } from './helpers/lab-manifests.js';
import { eventually } from './helpers/wait.js';
import { processAlive } from '../src/lab/process.js';
import type { LabStatus } from '../src/lab/status.js';
import { LAB_SUITE_PORTS } from './helpers/lab-ports.js';

// h-polish's prefix, subnet and ops port: what a new user of `trellis lab` meets when things go wrong.
const PREFIX = 'tpo';
const SUBNET = '10.243.0.0/24';
const { xds: XDS_PORT, http: HTTP_PORT } = LAB_SUITE_PORTS.labCli;
const HTTP_ADDRESS = `127.0.0.1:${HTTP_PORT}`;
const TRELLIS = path.resolve(import.meta.dirname, '../bin/trellis.js');

const { envoyPath, skip } = envoyTestSkip(['ip', 'setpriv', 'iptables-restore']);

function trellis(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [TRELLIS, ...args], { encoding: 'utf8', timeout: 120_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

describe('trellis lab up: failures are reported at once, with their reason', { skip }, () => {
  let dir: string;
  let manifests: string;
  let stateDir: string;
  const common = () => ['--prefix', PREFIX, '--state-dir', stateDir, '--subnet', SUBNET, '--http-address', HTTP_ADDRESS, '--xds-port', String(XDS_PORT), '--envoy', envoyPath!];

  before(async () => {
    ({ dir, manifests } = await bookstoreLabDir());
    stateDir = path.join(dir, 'state');
  });

  after(async () => {
    if (stateDir) await trellis(['lab', 'down', '--prefix', PREFIX, '--state-dir', stateDir]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('fails with the controller\'s own error when --http-address is taken (by a server that answers /readyz 200)', async () => {
    // Another controller on the address answers /readyz: up must not take it for the lab's.
    const other = http.createServer((_req, res) => res.end('ready\n'));
    await new Promise<void>((resolve) => other.listen(HTTP_PORT, '127.0.0.1', resolve));
    try {
      const up = await trellis(['lab', 'up', '--manifests', manifests, ...common(), '--timeout', '30']);
      assert.equal(up.code, 1, up.stdout);
      assert.match(up.stderr, new RegExp(`^trellis lab: the lab failed to start: the controller exited \\(1\\) before it was ready: operations server: cannot listen on --http-address 127\\.0\\.0\\.1:${HTTP_PORT}: .*EADDRINUSE`, 'm'));
      assert.doesNotMatch(up.stderr, /no mesh CA/);
      assert.equal(up.stdout, '', 'no status of a lab that did not start');
    } finally {
      await new Promise<void>((resolve) => other.close(() => resolve()));
    }
    assert.deepEqual(await labLeftovers(PREFIX), []);
    assert.equal(existsSync(stateDir), false);
  });

  it('says in one plain sentence that the --envoy file is missing', async () => {
    const up = await trellis(['lab', 'up', '--manifests', manifests, ...common().slice(0, -1), path.join(dir, 'no-envoy')]);
    assert.equal(up.code, 1);
    assert.match(up.stderr, new RegExp(`^trellis lab: lab up cannot start: Envoy is missing \\(no file ${dir}/no-envoy\\): python3 -m venv `));
  });

  it('names the --manifests directory and why when it is missing or a regular file', async () => {
    const missing = await trellis(['lab', 'up', '--manifests', path.join(dir, 'nope'), ...common()]);
    assert.equal(missing.code, 1);
    assert.equal(missing.stderr, `trellis lab: --manifests ${path.join(dir, 'nope')}: no such directory\n`);
    const file = await trellis(['lab', 'up', '--manifests', path.join(manifests, 'bookbuyer.yaml'), ...common()]);
    assert.equal(file.code, 1);
    assert.match(file.stderr, /^trellis lab: --manifests \S+bookbuyer\.yaml is not a directory/);
    assert.deepEqual(await labLeftovers(PREFIX), []);
  });
});

describe('trellis lab down/status without a lab', { skip }, () => {
  it('lab down says there is no lab and exits 0', async () => {
    const stateDir = path.join(os.tmpdir(), `${PREFIX}-no-lab-${process.pid}`);
    const down = await trellis(['lab', 'down', '--prefix', PREFIX, '--state-dir', stateDir]);
    assert.equal(down.code, 0, down.stderr);
    assert.equal(down.stdout, `no lab ${PREFIX}: nothing to remove\n`);
  });

  it('lab status --json prints an error object and exits 1', async () => {
    const stateDir = path.join(os.tmpdir(), `${PREFIX}-no-lab-${process.pid}`);
    const status = await trellis(['lab', 'status', '--json', '--prefix', PREFIX, '--state-dir', stateDir]);
    assert.equal(status.code, 1);
    assert.deepEqual(JSON.parse(status.stdout), { error: `no lab ${PREFIX} (no state in ${stateDir})`, prefix: PREFIX, stateDir });
  });
});

describe('trellis lab exec/status on a running lab (CLI, state of the world)', { skip }, () => {
  let dir: string;
  let stateDir: string;
  const common = () => ['--prefix', PREFIX, '--state-dir', stateDir];
  const BUYER = ['bookbuyer-5d8c7f9b6-k2x4p', '-n', 'bookbuyer'];

  before(async () => {
    let manifests: string;
    ({ dir, manifests } = await bookstoreLabDir());
    stateDir = path.join(dir, 'state');
    // A manifest the controller skips: one manifest error in its /debug/policies.
    await writeFile(path.join(manifests, 'broken.yaml'), 'kind: [unclosed\n');
    // A controller started by hand on the default 0.0.0.0:15128 holds that port on the lab bridge
    // too: stand one in (when the port is free; when it is not, something holds it already) while
    // the lab starts on its own --xds-port.
    const defaultAds = net.createServer();
    await new Promise<void>((resolve) => defaultAds.once('error', () => resolve()).listen(15128, '0.0.0.0', resolve));
    try {
      const up = await trellis(['lab', 'up', '--manifests', manifests, '--envoy', envoyPath!, '--subnet', SUBNET, '--http-address', HTTP_ADDRESS, '--xds-port', String(XDS_PORT), ...common()]);
      assert.equal(up.code, 0, up.stderr);
    } finally {
      defaultAds.close();
    }
  });

  it('runs beside a controller on the default 0.0.0.0:15128: its ADS is on the bridge at --xds-port', async () => {
    const json = JSON.parse((await trellis(['lab', 'status', '--json', ...common()])).stdout) as LabStatus;
    assert.equal(json.xdsAddress, `10.243.0.1:${XDS_PORT}`);
  });

  after(async () => {
    if (stateDir) await trellis(['lab', 'down', ...common()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('lab exec without -- hints where the command goes; a command not found exits 127', async () => {
    const noDashes = await trellis(['lab', 'exec', ...BUYER, ...common(), 'curl', '-s', 'http://bookstore.bookstore:14001/']);
    assert.equal(noDashes.code, 1);
    assert.match(noDashes.stderr, /unknown option '-s': put the pod's command after --: trellis lab exec POD -n NS -- CMD\.\.\./);
    const missing = await trellis(['lab', 'exec', ...BUYER, ...common(), '--', 'no-such-command-tpo', 'x']);
    assert.equal(missing.code, 127);
    assert.equal(missing.stderr, 'trellis lab: no-such-command-tpo: command not found\n');
    const shell = await trellis(['lab', 'exec', ...BUYER, ...common(), '--', 'sh', '-c', 'exit 3']);
    assert.equal(shell.code, 3);
  });

  it('lab status shows each sidecar\'s xDS mode, explains "-", and counts the controller\'s problems', async () => {
    const status = await trellis(['lab', 'status', ...common()]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /^POD\s+NAMESPACE\s+POD IP\s+APP\s+ENVOY\s+STATE\s+ADS\s+XDS\s+CDS\s+EDS\s+LDS\s+RDS\s+SDS$/m);
    assert.match(status.stdout, /bookbuyer-5d8c7f9b6-k2x4p\s+bookbuyer\s+10\.244\.1\.10\s+\d+\s+\d+\s+LIVE\s+connected\s+SotW\s+ACK/);
    assert.match(status.stdout, /^\(CDS\/EDS\/LDS\/RDS\/SDS: ACK, NACK, PENDING \(sent, not ACKed yet\), or - not subscribed; XDS: SotW or delta\)$/m);
    assert.match(status.stdout, new RegExp(`^controller: 1 manifest/policy problem \\(1 manifest errors, 0 policy problems, 0 validation failures\\): see curl -s http://127\\.0\\.0\\.1:${HTTP_PORT}/debug/policies$`, 'm'));
    const json = JSON.parse((await trellis(['lab', 'status', '--json', ...common()])).stdout) as LabStatus;
    assert.deepEqual(json.controllerProblems, { manifestErrors: 1, policyProblems: 0, validationFailures: 0 });
    assert.ok(json.pods.filter((p) => p.mesh).every((p) => p.xdsMode === 'SotW'));
  });

  it('lab status exits 1 once the controller is dead', async () => {
    const before = JSON.parse((await trellis(['lab', 'status', '--json', ...common()])).stdout) as LabStatus;
    process.kill(before.controllerPid!, 'SIGKILL');
    await eventually(() => !processAlive(before.controllerPid), 'the controller dying', 10_000, 50);
    await eventually(async () => (await trellis(['lab', 'status', ...common()])).code === 1, 'lab status failing', 30_000, 200);
    const status = await trellis(['lab', 'status', ...common()]);
    assert.match(status.stderr, new RegExp(`^trellis lab: lab ${PREFIX} is of no use: the controller \\(pid ${before.controllerPid}\\) exited \\(killed by a signal\\)`, 'm'));
  });
});
