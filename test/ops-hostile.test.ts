/**
 * The operations server of a real `trellis controller` process against hostile or careless
 * clients: a burst of `/debug/explain` calls (each generates configuration on the controller's
 * event loop) must be refused past a time budget rather than starve everything else.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { watchController } from './helpers/controller-process.js';
import { eventually } from './helpers/wait.js';

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
const EXAMPLE = path.resolve(import.meta.dirname, '../examples/bookstore');
/** Ports of this file (the s9b range). */
const XDS_PORT = 19732;
const HTTP_PORT = 19733;

function get(agent: http.Agent, pathAndQuery: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port: HTTP_PORT, path: pathAndQuery, agent }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      })
      .on('error', reject);
  });
}

describe('the operations server against hostile clients', () => {
  let child: ChildProcess;
  let dir: string;
  let exited: Promise<number | null>;
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 's9b-ops-'));
    child = spawn(process.execPath, ['--import', 'tsx', CLI, 'controller', '--manifests', EXAMPLE, '--state-dir', path.join(dir, 'state'), '--xds-address', `127.0.0.1:${XDS_PORT}`, '--http-address', `127.0.0.1:${HTTP_PORT}`, '--warm-up-config', '0', '--resync-interval', '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
    exited = new Promise((resolve) => child.once('exit', (code) => resolve(code)));
    await watchController(child).httpPort;
  });
  after(async () => {
    child.kill('SIGTERM');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });

  it('a burst of /debug/explain calls is refused with 429 and Retry-After past its time budget, and served again after', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
    try {
      const query = '/debug/explain?from=bookbuyer/bookbuyer&to=bookstore.bookstore:14001&path=/books-bought&method=GET&header=client-app=bookbuyer';
      const answers = await Promise.all(Array.from({ length: 2000 }, () => get(agent, query)));
      const statuses = new Set(answers.map((a) => a.status));
      assert.deepEqual([...statuses].filter((s) => s !== 200 && s !== 429), [], 'only 200 and 429');
      const refused = answers.find((a) => a.status === 429);
      assert.ok(refused, 'some calls of the burst were refused');
      assert.match(String(refused.headers['retry-after']), /^\d+$/);
      assert.match(JSON.parse(refused.body).error, /too many explain requests/);
      await eventually(async () => (await get(agent, query)).status === 200, 'an explain served again', 10_000, 100);
      assert.equal((await get(agent, '/healthz')).status, 200);
    } finally {
      agent.destroy();
    }
  });
});
