/**
 * The operations server's bounds, over real sockets: `/debug/mesh` computed once for many pages
 * while nothing changed, `/debug/mesh` and `/debug/policies` refused with 429 past their time
 * budget, and the number of connections and the time a request's headers may take bounded.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { describe, it } from 'node:test';
import pino from 'pino';
import { Registry } from 'prom-client';
import { isServedHost, OpsServer, type OpsServerLimits, type OpsSources } from '../src/debug/ops-server.js';
import { eventually } from './helpers/wait.js';

/** Sources whose views take `busyMs` of the event loop each and count their calls. */
function sources(busyMs: number): OpsSources & { calls: { mesh: number; policies: number } } {
  const calls = { mesh: 0, policies: 0 };
  const busy = () => {
    const until = performance.now() + busyMs;
    while (performance.now() < until);
  };
  return {
    calls,
    ready: () => true,
    metrics: new Registry(),
    proxies: () => [],
    configDump: () => undefined,
    policies: () => (busy(), { n: ++calls.policies }),
    mesh: () => (busy(), { n: ++calls.mesh }),
    meshVersion: () => '1',
    explain: () => ({ status: 404, body: {} }),
    podProxy: () => ({ status: 404, error: 'no pod' }),
    policyStatus: () => undefined,
  };
}

function get(port: number, path: string, agent?: http.Agent): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path, agent }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      })
      .on('error', reject);
  });
}

async function withServer(busyMs: number, limits: OpsServerLimits, test: (port: number, ops: OpsServer, s: ReturnType<typeof sources>) => Promise<void>): Promise<void> {
  const s = sources(busyMs);
  const ops = new OpsServer(s, pino({ level: 'silent' }), {}, {}, limits);
  const port = await ops.start('127.0.0.1:0');
  try {
    await test(port, ops, s);
  } finally {
    await ops.stop();
  }
}

/** Opens a TCP connection; resolves once connected, with a promise of its close. */
function connect(port: number): Promise<{ socket: net.Socket; closed: Promise<void> }> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    socket.on('error', () => {});
    socket.resume(); // read what the server sends (a 408), so its close is seen
    socket.once('connect', () => resolve({ socket, closed }));
    socket.once('error', reject);
  });
}

describe('operations server bounds', () => {
  it('computes /debug/mesh once for 32 pages while nothing changed, and again after a change', async () => {
    await withServer(0, {}, async (port, ops, s) => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
      try {
        const answers = await Promise.all(Array.from({ length: 32 }, () => get(port, '/debug/mesh', agent)));
        assert.deepEqual(new Set(answers.map((a) => `${a.status} ${a.body}`)), new Set(['200 {"n":1}']));
        assert.equal(s.calls.mesh, 1, 'one computation for 32 requests');
        ops.events.changed(); // a proxy ACKed (the ADS hooks' call)
        const after = await Promise.all(Array.from({ length: 32 }, () => get(port, '/debug/mesh', agent)));
        assert.deepEqual(new Set(after.map((a) => a.body)), new Set(['{"n":2}']));
        assert.equal(s.calls.mesh, 2);
      } finally {
        agent.destroy();
      }
    });
  });

  it('refuses /debug/mesh and /debug/policies with 429 and Retry-After past their time budget', async () => {
    await withServer(30, { viewBudget: { windowMs: 1000, budgetMs: 100 } }, async (port, ops, s) => {
      const statuses: number[] = [];
      for (let i = 0; i < 10; i++) statuses.push((await get(port, '/debug/policies')).status);
      assert.ok(statuses.includes(429), `policies: ${statuses.join(' ')}`);
      assert.ok(s.calls.policies <= 5, `${s.calls.policies} computations within the budget`);
      let refused: Awaited<ReturnType<typeof get>> | undefined;
      for (let i = 0; i < 10 && !refused; i++) {
        ops.events.changed(); // each request computes anew
        const answer = await get(port, '/debug/mesh');
        if (answer.status === 429) refused = answer;
      }
      assert.ok(refused, 'a /debug/mesh call refused');
      assert.match(String(refused.headers['retry-after']), /^\d+$/);
      assert.match((JSON.parse(refused.body) as { error: string }).error, /too many \/debug\/mesh requests/);
      await eventually(async () => (await get(port, '/debug/policies')).status === 200, 'served again after the window', 10_000);
    });
  });

  it('answers 421 to a Host that is not a name of the server (DNS rebinding), and serves IP addresses, localhost, service names and allowed names', async () => {
    await withServer(0, { allowedHosts: ['trellis.example.com'] }, async (port) => {
      const ask = (host: string): Promise<{ status: number; body: string }> =>
        new Promise((resolve, reject) => {
          http.get({ host: '127.0.0.1', port, path: '/debug/mesh', headers: { host } }, (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
          }).on('error', reject);
        });
      const refused = await ask('rebind.attacker.example:9091');
      assert.equal(refused.status, 421);
      assert.equal(refused.body, 'Host "rebind.attacker.example:9091" is not a name of this server: use its IP address or localhost, or start it with --http-allowed-host (a guard against DNS rebinding)\n');
      for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`, 'trellis.osm-system.svc:9091', 'trellis.osm-system.svc.cluster.local', 'Trellis.Example.com.']) {
        assert.equal((await ask(host)).status, 200, host);
      }
    });
    assert.equal(isServedHost(undefined), true, 'HTTP/1.0: no Host');
    for (const host of ['evil.com', 'localhost.evil.com', 'svc.evil.com', '10.0.0.1.evil.com', '[::1', 'cluster.local']) assert.equal(isServedHost(host), false, host);
  });

  it('past maxConnections closes the oldest connection with no request in progress, so a probe is served while others send nothing', async () => {
    await withServer(0, { maxConnections: 4, headersTimeoutMs: 60_000, requestTimeoutMs: 60_000, connectionsCheckingIntervalMs: 50 }, async (port) => {
      const slow = await Promise.all(Array.from({ length: 4 }, () => connect(port)));
      for (const { socket } of slow) socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'); // headers never end
      await new Promise((r) => setTimeout(r, 100));
      const probe = await get(port, '/healthz');
      assert.equal(probe.status, 200, 'served in place of a connection that sends nothing');
      await slow[0]!.closed; // the oldest
      let open = 0;
      for (const c of slow.slice(1)) if (!(await Promise.race([c.closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 50))]))) open++;
      assert.equal(open, 3, 'the three others stay open');
      for (const c of slow) c.socket.destroy();
    });
  });

  it('closes a new connection at once when every connection has a request in progress, and one whose headers never end after headersTimeout', async () => {
    await withServer(0, { maxConnections: 2, headersTimeoutMs: 300, requestTimeoutMs: 300, connectionsCheckingIntervalMs: 50 }, async (port) => {
      const streams = await Promise.all(Array.from({ length: 2 }, () => connect(port)));
      for (const { socket } of streams) socket.write('GET /debug/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'); // an event stream: in progress until closed
      await new Promise((r) => setTimeout(r, 200));
      const extra = await connect(port);
      const closed = await Promise.race([extra.closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), 1000))]);
      assert.equal(closed, true, 'the new connection closed: no place to take');
      for (const c of streams) c.socket.destroy();
      await Promise.all(streams.map((c) => c.closed));
      const slow = await connect(port);
      slow.socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'); // headers never end
      await slow.closed; // at its headers timeout (408 or a reset)
      assert.equal((await get(port, '/healthz')).status, 200);
    });
  });
});
