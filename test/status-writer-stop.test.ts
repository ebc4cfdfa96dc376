/**
 * The Kubernetes policy status writer's stop against an API server that accepts the connection
 * and never answers a PATCH: the controller's shutdown awaits this stop, so it must end.
 */
import assert from 'node:assert/strict';
import net from 'node:net';
import { describe, it } from 'node:test';
import { KubeConfig } from '@kubernetes/client-node';
import pino from 'pino';
import { PolicyStatusWriter, statusPatcherFor } from '../src/controller/policy-status-writer.js';
import type { PolicyStatus } from '../src/status/policy-status.js';
import { eventually } from './helpers/wait.js';

/** Port of this file (the s9b range). */
const HANG_PORT = 19734;

describe('policy status writer against an API server that never answers', () => {
  it('stop() returns although a PATCH never gets an answer', { timeout: 30_000 }, async () => {
    const sockets = new Set<net.Socket>();
    const server = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => server.listen(HANG_PORT, '127.0.0.1', r));
    try {
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromOptions({
        clusters: [{ name: 'c', server: `http://127.0.0.1:${HANG_PORT}`, skipTLSVerify: true }],
        users: [{ name: 'u', token: 't' }],
        contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
        currentContext: 'x',
      });
      const status: PolicyStatus = { kind: 'IngressBackend', namespace: 'bookstore', name: 'ib', generation: 1, accepted: true, problems: [], affected: 0, programmed: 0, nacked: 0, firstNack: null };
      const writer = new PolicyStatusWriter({
        patch: statusPatcherFor(kubeConfig),
        statuses: () => [status],
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
