/**
 * `/debug/events` when a client joins between a change and the version watch's next look: the
 * clients already connected must still be told of that change (the join must not take it for
 * them as already sent).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { OpsServer } from '../src/debug/ops-server.js';
import { eventually } from './helpers/wait.js';

/** The `mesh` events' data of an open stream, as they arrive. */
function openEvents(url: string): Promise<{ events: { version: string }[]; close(): void }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, (res) => {
      const events: { version: string }[] = [];
      let buffer = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        buffer += chunk;
        let end;
        while ((end = buffer.indexOf('\n\n')) >= 0) {
          const data = buffer.slice(0, end).split('\n').find((l) => l.startsWith('data: '));
          buffer = buffer.slice(end + 2);
          if (data) events.push(JSON.parse(data.slice(6)) as { version: string });
        }
      });
      resolve({ events, close: () => req.destroy() });
    });
    req.once('error', reject);
  });
}

describe('/debug/events with a client joining after a change', () => {
  it('tells the clients already connected of a change that a later client joined after', async () => {
    let version = 'v1';
    const ops = new OpsServer(
      { ready: () => true, metrics: new Registry(), proxies: () => [], configDump: () => undefined, policies: () => ({}), explain: () => ({ status: 404, body: {} }), podProxy: () => ({ status: 404, error: 'no pod' }), policyStatus: () => undefined, mesh: () => ({}), meshVersion: () => version },
      pino({ level: 'silent' }),
      // The version watch looks every second: the second client joins before it does.
      { watchMs: 1000, quietMs: 10, maxDelayMs: 50 },
    );
    const port = await ops.start('127.0.0.1:0');
    const url = `http://127.0.0.1:${port}/debug/events`;
    try {
      const first = await openEvents(url);
      await eventually(() => first.events.length === 1, 'the event on connect');
      version = 'v2'; // e.g. a manifest error appeared: no ADS hook tells
      const second = await openEvents(url);
      await eventually(() => second.events.length === 1, 'the second client\'s event on connect');
      assert.equal(second.events[0].version, 'v2');
      await eventually(() => first.events.some((e) => e.version === 'v2'), 'the first client told of v2', 3000);
      first.close();
      second.close();
    } finally {
      await ops.stop();
    }
  });
});
