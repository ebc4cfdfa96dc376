/**
 * The operator's commands (`trellis wait`, `status`, `proxies`, `explain`) against a controller
 * that misbehaves: one that accepts the connection and never answers, one whose answer never
 * ends. Each command must exit (never hang past its bounds) with its error status and a message
 * that says what happened, and must not buffer an endless answer.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import net from 'node:net';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

const CLI = path.resolve(import.meta.dirname, 'helpers/cli-main.ts');
/** Ports of this file (the s9b range). */
const HANG_PORT = 19730;
const ENDLESS_PORT = 19731;

function trellis(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    // The generous kill is only a backstop so a hung command fails the test instead of the run.
    execFile(process.execPath, ['--import', 'tsx', CLI, ...args], { encoding: 'utf8', timeout: 60_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? ((error as { code?: number }).code ?? null) : 0, stdout, stderr });
    });
  });
}

describe('operator commands against a hostile controller', () => {
  let hang: net.Server;
  let endless: http.Server;
  const sockets = new Set<net.Socket>();
  before(async () => {
    hang = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    endless = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const chunk = Buffer.alloc(1 << 20, 0x20);
      const pump = () => {
        while (res.write(chunk));
      };
      res.on('drain', pump);
      res.on('error', () => {});
      res.write('{"status": [');
      pump();
    });
    await new Promise<void>((r) => hang.listen(HANG_PORT, '127.0.0.1', r));
    await new Promise<void>((r) => endless.listen(ENDLESS_PORT, '127.0.0.1', r));
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    endless.closeAllConnections();
    await new Promise((r) => hang.close(r));
    await new Promise((r) => endless.close(r));
  });

  it('trellis wait --timeout 2s gives up on a controller that never answers, saying it timed out', async () => {
    const r = await trellis(['wait', 'trafficsplit/x', '--for', 'programmed', '-n', 'bookstore', '--timeout', '2s', '--controller', `http://127.0.0.1:${HANG_PORT}`]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /did not answer within 2 s/);
  });

  it('trellis explain gives up on a controller that never answers (exit 2)', async () => {
    const r = await trellis(['explain', '--from', 'a/b', '--to', 'c.d:80', '--controller', `http://127.0.0.1:${HANG_PORT}`]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /did not answer within \d+ s/);
  });

  for (const [name, args, code] of [
    ['status', ['status'], 1],
    ['proxies', ['proxies'], 1],
    ['explain', ['explain', '--from', 'a/b', '--to', 'c.d:80'], 2],
    ['wait', ['wait', 'trafficsplit/x', '--for', 'programmed', '--timeout', '30s'], 1],
  ] as const) {
    it(`trellis ${name} refuses an answer that never ends instead of buffering it`, async () => {
      const r = await trellis([...args, '--controller', `http://127.0.0.1:${ENDLESS_PORT}`]);
      assert.equal(r.code, code, r.stderr);
      assert.match(r.stderr, /answer is larger than \d+ MiB/);
    });
  }
});
