/**
 * `trellis lab app` and `trellis lab traffic` against each other on loopback, as real processes
 * through bin/trellis.js.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { TrafficSummary } from '../src/lab/traffic.js';
import { total, TRELLIS } from './helpers/lab.js';
import { eventually } from './helpers/wait.js';

/** Starts `trellis lab app …` and resolves with its bound ports once it prints `listening …`. */
async function startApp(args: string[]): Promise<{ child: ChildProcess; ports: Record<string, number> }> {
  const child = spawn(process.execPath, [TRELLIS, 'lab', 'app', '--address', '127.0.0.1', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]);
    });
    child.once('exit', (code) => reject(new Error(`lab app exited (${code}): ${err}`)));
  });
  const ports: Record<string, number> = {};
  for (const m of line.matchAll(/(http|tcp|grpc):127\.0\.0\.1:(\d+)/g)) ports[m[1]] = Number(m[2]);
  return { child, ports };
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
}

/** Runs `trellis lab traffic …` to its end: exit code, the parsed summary (when it printed one), stderr. */
async function traffic(args: string[], whileRunning?: (child: ChildProcess) => Promise<void>): Promise<{ code: number | null; summary?: TrafficSummary; stderr: string }> {
  const child = spawn(process.execPath, [TRELLIS, 'lab', 'traffic', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = once(child, 'exit');
  if (whileRunning) await whileRunning(child);
  const [code] = (await exited) as [number | null];
  return { code, summary: stdout.trim() ? (JSON.parse(stdout) as TrafficSummary) : undefined, stderr };
}

describe('trellis lab app and trellis lab traffic', () => {
  let app: Awaited<ReturnType<typeof startApp>>;
  let teapot: Awaited<ReturnType<typeof startApp>>;

  before(async () => {
    [app, teapot] = await Promise.all([
      startApp(['--pod', 'bookstore-v1-0', '--namespace', 'bookstore', '--service-account', 'bookstore', '--listen', 'http:0', '--listen', 'tcp:0', '--listen', 'grpc:0', '--fail-first', '3']),
      startApp(['--pod', 'teapot-0', '--namespace', 'kitchen', '--listen', 'http:0', '--status', '418']),
    ]);
  });
  after(async () => {
    await Promise.all([stop(app?.child), stop(teapot?.child)]);
  });

  it('HTTP: the first --fail-first requests get 503, the rest 200, every answer names the pod', async () => {
    const { code, summary } = await traffic(['--url', `http://127.0.0.1:${app.ports.http}/books-bought`, '--requests', '200', '--concurrency', '4']);
    assert.equal(code, 0);
    assert.deepEqual({ ...summary, durationMs: 0 }, { requests: 200, statuses: { '200': 197, '503': 3 }, answeredBy: { 'bookstore-v1-0': 200 }, errors: {}, durationMs: 0 });
  });

  it('HTTP: the JSON answer names pod, namespace, service account, method, path and headers; --status fixes the status', async () => {
    const res = await fetch(`http://127.0.0.1:${app.ports.http}/books-bought?x=1`, { method: 'POST', headers: { 'x-client': 'bookbuyer' }, body: 'hello' });
    assert.equal(res.status, 200);
    const answer = (await res.json()) as Record<string, unknown>;
    assert.equal(answer.pod, 'bookstore-v1-0');
    assert.equal(answer.namespace, 'bookstore');
    assert.equal(answer.serviceAccount, 'bookstore');
    assert.equal(answer.method, 'POST');
    assert.equal(answer.path, '/books-bought?x=1');
    assert.equal((answer.headers as Record<string, string>)['x-client'], 'bookbuyer');

    const { summary } = await traffic(['--url', `http://127.0.0.1:${teapot.ports.http}/`, '--requests', '5', '--method', 'PUT', '--header', 'x-a: 1', '--new-connection-per-request']);
    assert.deepEqual(summary?.statuses, { '418': 5 });
    assert.deepEqual(summary?.answeredBy, { 'teapot-0': 5 });
  });

  it('HTTP: a request body over the bound is refused with 413, and headers over the bound with 431', async () => {
    // The body is announced and never sent: the answer comes from the announced length alone.
    const big = http.request({ host: '127.0.0.1', port: app.ports.http, method: 'POST', headers: { 'content-length': String(65 * 1024) } });
    big.flushHeaders();
    const [res] = (await once(big, 'response')) as [http.IncomingMessage];
    assert.equal(res.statusCode, 413);
    big.destroy();
    const huge = await fetch(`http://127.0.0.1:${app.ports.http}/`, { headers: { 'x-big': 'y'.repeat(20 * 1024) } });
    assert.equal(huge.status, 431);
  });

  it('TCP: each connection gets the pod line, then its line echoed', async () => {
    const { summary } = await traffic(['--tcp', `127.0.0.1:${app.ports.tcp}`, '--requests', '50', '--concurrency', '5']);
    assert.deepEqual({ ...summary, durationMs: 0 }, { requests: 50, statuses: { ok: 50 }, answeredBy: { 'bookstore-v1-0': 50 }, errors: {}, durationMs: 0 });
    const socket = net.connect(app.ports.tcp, '127.0.0.1');
    socket.setEncoding('utf8');
    let text = '';
    socket.on('data', (d: string) => (text += d));
    await eventually(() => text.includes('\n'), 'the greeting line');
    socket.write('ping\n');
    await eventually(() => text.endsWith('ping\n'), 'the echo');
    socket.destroy();
    assert.equal(text, 'pod=bookstore-v1-0 namespace=bookstore\nping\n');
  });

  it('gRPC: unary echo calls are answered by the pod', async () => {
    const { summary } = await traffic(['--grpc', `127.0.0.1:${app.ports.grpc}`, '--requests', '30', '--concurrency', '3']);
    assert.deepEqual({ ...summary, durationMs: 0 }, { requests: 30, statuses: { OK: 30 }, answeredBy: { 'bookstore-v1-0': 30 }, errors: {}, durationMs: 0 });
  });

  it('--until-signal counts the failures while the target is down and the answers after, then prints on SIGTERM', async () => {
    // Phase 1: a port that resets every connection; phase 2: an HTTP server on the same port.
    let resets = 0;
    const resetter = net.createServer((socket) => {
      resets++;
      socket.resetAndDestroy();
    });
    resetter.listen(0, '127.0.0.1');
    await once(resetter, 'listening');
    const port = (resetter.address() as net.AddressInfo).port;
    let answered = 0;
    const server = http.createServer((_req, res) => {
      answered++;
      res.end(JSON.stringify({ pod: 'steady-0' }));
    });
    const { code, summary } = await traffic(['--url', `http://127.0.0.1:${port}/`, '--until-signal', '--interval-ms', '5'], async (child) => {
      await eventually(() => resets >= 3, 'three connections reset', 30_000);
      resetter.close();
      resetter.unref();
      server.listen(port, '127.0.0.1');
      await once(server, 'listening');
      await eventually(() => answered >= 5, 'five answered requests', 30_000);
      child.kill('SIGTERM');
    });
    server.closeAllConnections();
    server.close();
    assert.equal(code, 0);
    assert.ok(summary);
    const failures = total(summary.errors);
    assert.ok(failures >= 3, `failures counted: ${JSON.stringify(summary.errors)}`);
    assert.ok(Object.keys(summary.errors).every((k) => ['ECONNRESET', 'ECONNREFUSED'].includes(k)), JSON.stringify(summary.errors));
    assert.ok(summary.answeredBy['steady-0'] >= 5 && summary.answeredBy['steady-0'] <= answered, JSON.stringify(summary));
    assert.equal(summary.requests, failures + summary.answeredBy['steady-0']);
  });

  it('traffic refuses a run with no target or no end', async () => {
    const none = await traffic(['--requests', '1']);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /give exactly one of --url, --tcp and --grpc/);
    const endless = await traffic(['--url', 'http://127.0.0.1:1/']);
    assert.equal(endless.code, 2);
    assert.match(endless.stderr, /give --requests or --until-signal/);
  });
});
