/**
 * The Kubernetes policy status writer against an API server that accepts the connection and
 * never answers a PATCH: the controller's shutdown awaits its stop, so it must end; and the
 * PATCH must end at its timeout, be logged at warn, and the next evaluation must write the
 * status (the server, a real HTTP server, answers the next PATCH).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { PolicyStatusWriter, statusPatcherFor } from '../src/controller/policy-status-writer.js';
import type { PolicyStatus } from '../src/status/policy-status.js';
import { eventually } from './helpers/wait.js';

/** Port of this file (the s9b range). */
const HANG_PORT = 19734;

/** Port of the timeout test (the s10 status range). */
const API_PORT = 19601;

/** A kubeconfig for an API server at `http://127.0.0.1:PORT`. */
function localKubeConfig(port: number): KubeConfig {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
    currentContext: 'x',
  });
  return kubeConfig;
}

/** The status the writer writes. */
const STATUS: PolicyStatus = { kind: 'IngressBackend', namespace: 'bookstore', name: 'ib', generation: 1, accepted: true, problems: [], affected: 0, programmed: 0, nacked: 0, firstNack: null };

describe('policy status writer against an API server that never answers', () => {
  it('stop() returns although a PATCH never gets an answer', { timeout: 30_000 }, async () => {
    const sockets = new Set<net.Socket>();
    const server = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => server.listen(HANG_PORT, '127.0.0.1', r));
    try {
      const writer = new PolicyStatusWriter({
        patch: statusPatcherFor(localKubeConfig(HANG_PORT)),
        statuses: () => [STATUS],
        storedStatus: () => undefined,
        isLeader: () => true,
        generation: () => 1,
        logger: pino({ level: 'silent' }),
        intervalMs: 10,
      });
      writer.start();
      await eventually(() => sockets.size > 0, 'the PATCH reached the API server', 10_000);
      await writer.stop();
      assert.ok(true, 'stop returned');
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    }
  });
});

describe('policy status writer: a PATCH that never gets an answer', () => {
  it('times the PATCH out, logs it at warn and writes the status at the next evaluation', { timeout: 30_000 }, async () => {
    const patches: string[] = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        patches.push(`${req.method} ${req.url} ${req.headers['content-type']}`);
        if (patches.length === 1) return; // the first PATCH: never answered
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ apiVersion: 'policy.openservicemesh.io/v1alpha1', kind: 'IngressBackend', metadata: { name: 'ib', namespace: 'bookstore' }, ...(JSON.parse(body) as object) }));
      });
    });
    await new Promise<void>((r) => server.listen(API_PORT, '127.0.0.1', r));
    const warnings: Record<string, unknown>[] = [];
    let written = 0;
    const patch = statusPatcherFor(localKubeConfig(API_PORT), { timeoutMs: 300 });
    const writer = new PolicyStatusWriter({
      patch: async (target, s) => {
        await patch(target, s);
        written++;
      },
      statuses: () => [STATUS],
      storedStatus: () => undefined,
      isLeader: () => true,
      generation: () => 1,
      logger: pino({ level: 'warn' }, { write: (line: string) => void warnings.push(JSON.parse(line) as Record<string, unknown>) }),
      intervalMs: 20,
    });
    writer.start();
    try {
      await eventually(() => written === 1, 'the status written after the unanswered PATCH', 20_000);
      assert.ok(patches.length >= 2, 'the status was PATCHed again');
      assert.match(patches[0]!, /^PATCH \/apis\/policy\.openservicemesh\.io\/v1alpha1\/namespaces\/bookstore\/ingressbackends\/ib\/status application\/merge-patch\+json$/);
      const warned = warnings.find((w) => w['msg'] === 'policy status not written; retrying');
      assert.ok(warned, 'the timed-out PATCH was logged');
      assert.equal(warned['level'], 40, 'at warn');
      assert.equal(warned['err'], 'no answer from the API server in 300 ms');
    } finally {
      await writer.stop();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
