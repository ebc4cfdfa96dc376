import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import {
  createLabNetwork, createPodNetwork, deletePodNetwork, inNetns, removeLabNetwork, runCommand,
  type LabNetwork, type PodNetwork,
} from '../src/lab/network.js';
import { claimLabPrefix, releaseLabPrefix } from '../src/lab/state.js';
import { labLeftovers, labTestSkip } from './helpers/lab-prerequisites.js';

// h-lab's prefix and a slice of its subnet 10.251.0.0/24 (test/lab.test.ts uses another slice).
const PREFIX = 'tlan';
const SUBNET = '10.251.0.192/27';
const POD_A_IP = '10.251.0.240';
const POD_B_IP = '10.251.0.241';
const POD_PORT = 8080;
const BRIDGE_PORT = 19150;

const skip = labTestSkip(['ip']);

/** Runs argv, resolving with its exit code and output (never rejects on a non-zero exit). */
function run(argv: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(argv[0], argv.slice(1), { encoding: 'utf8', timeout: 20_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

/** A node one-liner that connects to host:port, sends `ping`, prints what comes back. */
function clientScript(host: string, port: number): string {
  return `const s=require('net').connect(${port},'${host}',()=>s.end('ping'));let d='';` +
    `s.on('data',(c)=>d+=c);s.on('end',()=>{process.stdout.write(d,()=>process.exit(0))});` +
    `s.on('error',(e)=>{console.error(e.message);process.exit(3)});setTimeout(()=>{console.error('timeout');process.exit(4)},10000).unref();`;
}

const SERVER_SCRIPT = `const srv=require('net').createServer((s)=>{let d='';s.on('data',(c)=>{d+=c});` +
  `s.on('end',()=>s.end(JSON.stringify({got:d,from:s.remoteAddress,to:s.localAddress})))});` +
  `srv.listen(${POD_PORT},'0.0.0.0',()=>console.log('listening'));`;

describe('lab network: a bridge and pod network namespaces', { skip }, () => {
  let lab: LabNetwork;
  let podA: PodNetwork;
  let podB: PodNetwork;
  let server: ChildProcess | undefined;
  const hostServer = net.createServer();
  const hostSeen: string[] = [];

  before(async () => {
    // One user of the prefix on the host (another worktree may run this test): claim it first.
    await claimLabPrefix(PREFIX, '/nonexistent');
    await removeLabNetwork(PREFIX); // a crashed earlier run
    lab = await createLabNetwork(PREFIX, SUBNET);
    const onLinkRoutes = [`${POD_A_IP}/32`, `${POD_B_IP}/32`];
    podA = await createPodNetwork(lab, { name: 'a.test', podIp: POD_A_IP, labAddress: '10.251.0.194', onLinkRoutes, hosts: `${POD_B_IP}\tb.test\n` });
    podB = await createPodNetwork(lab, { name: 'b.test', podIp: POD_B_IP, labAddress: '10.251.0.195', onLinkRoutes, hosts: `${POD_A_IP}\ta.test a.test.svc.cluster.local\n` });
  });

  after(async () => {
    server?.kill('SIGKILL');
    hostServer.close();
    await removeLabNetwork(PREFIX);
    await releaseLabPrefix(PREFIX);
  });

  it('puts the bridge on the subnet first address and gives the host only the connected route', async () => {
    assert.equal(lab.bridge, 'tlan-br');
    assert.equal(lab.bridgeAddress, '10.251.0.193');
    const addr = await runCommand(['ip', '-o', '-4', 'addr', 'show', 'dev', lab.bridge]);
    assert.match(addr, /inet 10\.251\.0\.193\/27/);
    const routes = (await runCommand(['ip', '-4', 'route', 'show', 'dev', lab.bridge])).trim().split('\n');
    assert.deepEqual(routes.map((r) => r.split(' ')[0]), ['10.251.0.192/27']);
  });

  it('keeps the bridge MAC address the pods resolved when a port with a lower address joins', async () => {
    const mac = async (link: string): Promise<string> => (await runCommand(['cat', `/sys/class/net/${link}/address`])).trim();
    const before = await mac(lab.bridge);
    await runCommand(['ip', 'link', 'add', 'tlan-mac0', 'type', 'veth', 'peer', 'name', 'tlan-mac1']);
    try {
      await runCommand(['ip', 'link', 'set', 'tlan-mac0', 'address', '00:00:00:00:00:01', 'master', lab.bridge, 'up']);
      assert.equal(await mac(lab.bridge), before);
    } finally {
      await runCommand(['ip', 'link', 'del', 'tlan-mac0']);
    }
  });

  it('has no IPv6 address on the bridge, a pod or its veth ends: nothing interception (IPv4) misses can flow', async () => {
    assert.equal((await runCommand(['ip', '-n', podA.netns, '-o', '-6', 'addr', 'show'])).trim(), '');
    assert.equal((await runCommand(['ip', '-o', '-6', 'addr', 'show', 'dev', lab.bridge])).trim(), '');
    const vethEnds = (await runCommand(['ip', '-o', 'link', 'show', 'master', lab.bridge])).trim().split('\n').filter((l) => l !== '');
    assert.ok(vethEnds.length >= 2, vethEnds.join('\n'));
    for (const line of vethEnds) {
      const name = /^\d+:\s+([^:@\s]+)/.exec(line)![1];
      assert.equal((await runCommand(['ip', '-o', '-6', 'addr', 'show', 'dev', name])).trim(), '', name);
    }
  });

  it('gives a pod its pod IP, its lab address, on-link routes and no default route', async () => {
    const addr = await runCommand(['ip', '-n', podA.netns, '-o', '-4', 'addr', 'show', 'dev', 'eth0']);
    assert.match(addr, /inet 10\.251\.0\.240\/32/);
    assert.match(addr, /inet 10\.251\.0\.194\/27/);
    const routes = await runCommand(['ip', '-n', podA.netns, '-4', 'route', 'show']);
    assert.doesNotMatch(routes, /default/);
    assert.match(routes, /10\.251\.0\.241 dev eth0 scope link src 10\.251\.0\.240/);
    assert.equal(await readFile(`/etc/netns/${podA.netns}/hosts`, 'utf8').then((t) => t.includes('b.test')), true);
  });

  it('carries TCP between two pods by pod IP, from the pod IP, and resolves lab names from the hosts file', async () => {
    const [command, ...args] = inNetns(podA.netns, [process.execPath, '-e', SERVER_SCRIPT]);
    server = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.on('data', (c: Buffer) => { if (c.toString().includes('listening')) resolve(); });
      server!.once('exit', (code) => reject(new Error(`server in ${podA.netns} exited with ${code}`)));
    });
    const byIp = await run(inNetns(podB.netns, [process.execPath, '-e', clientScript(POD_A_IP, POD_PORT)]));
    assert.equal(byIp.code, 0, byIp.stderr);
    assert.deepEqual(JSON.parse(byIp.stdout), { got: 'ping', from: POD_B_IP, to: POD_A_IP });
    const getent = await run(inNetns(podB.netns, ['getent', 'hosts', 'a.test.svc.cluster.local']));
    assert.equal(getent.code, 0, getent.stderr);
    assert.match(getent.stdout, /^10\.251\.0\.240\s/);
    const outside = await run(inNetns(podB.netns, ['getent', 'hosts', 'example.com']));
    assert.notEqual(outside.code, 0, 'a name outside the lab must not resolve');
  });

  it('lets a pod reach a listener on the bridge address, as the app user too', async () => {
    hostServer.on('connection', (s) => { hostSeen.push(s.remoteAddress ?? ''); s.on('data', () => s.end('pong')); });
    await new Promise<void>((resolve) => hostServer.listen(BRIDGE_PORT, lab.bridgeAddress, resolve));
    const res = await run(inNetns(podB.netns, [process.execPath, '-e', clientScript(lab.bridgeAddress, BRIDGE_PORT)], { uid: 65534, gid: 65534 }));
    assert.equal(res.code, 0, res.stderr);
    assert.equal(res.stdout, 'pong');
    assert.deepEqual(hostSeen, ['10.251.0.195']);
  });

  it('deletePodNetwork stops what runs in the pod and removes its netns, veth and /etc/netns dir', async () => {
    const exited = new Promise((resolve) => server!.once('exit', resolve));
    await deletePodNetwork(lab, podA.netns);
    await exited;
    assert.equal((await runCommand(['ip', 'netns', 'list'])).includes(podA.netns), false);
    assert.equal(existsSync(`/etc/netns/${podA.netns}`), false);
    await assert.rejects(deletePodNetwork(lab, 'other-ns'), /not named with the lab's prefix/);
  });

  it('removeLabNetwork leaves nothing named with the prefix', async () => {
    const removed = await removeLabNetwork(PREFIX);
    assert.ok(removed.includes(`netns ${podB.netns}`), removed.join(', '));
    assert.ok(removed.includes('link tlan-br'), removed.join(', '));
    assert.deepEqual(await labLeftovers(PREFIX), []);
    assert.deepEqual(await removeLabNetwork(PREFIX), []);
  });
});
