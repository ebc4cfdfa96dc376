/**
 * `trellis controller` on SIGTERM: a signal during start-up waits for the start and then stops in
 * order, and a second signal while stopping does not cut the stop short (both used to end the
 * process through Node's default handler: killed by SIGTERM, no ordered stop).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

const REPO = path.resolve(import.meta.dirname, '..');

/** Starts the built controller on the example; resolves its exit (code or signal) and output. */
function startController(stateDir: string, onFirstOutput: (pid: number) => void): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  const child = spawn(process.execPath, [
    'bin/trellis.js', 'controller', '--manifests', 'examples/bookstore', '--state-dir', stateDir,
    '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--log-level', 'info',
  ], { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  let signalled = false;
  const collect = (chunk: Buffer): void => {
    output += chunk.toString();
    if (!signalled && output.includes('"msg"')) {
      signalled = true;
      onFirstOutput(child.pid!);
    }
  };
  child.stdout.on('data', collect);
  child.stderr.on('data', collect);
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  return new Promise((resolve) => child.once('exit', (code, signal) => {
    clearTimeout(timer);
    resolve({ code, signal, output });
  }));
}

describe('trellis controller on SIGTERM', () => {
  it('during start-up, sent twice: finishes starting, stops in order and exits 0', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-signals-'));
    try {
      // At its first log line the controller is still starting (the manifests are loaded before
      // the certificate authority, the mesh controller and the ADS server start).
      const result = await startController(path.join(dir, 'state'), (pid) => {
        process.kill(pid, 'SIGTERM');
        process.kill(pid, 'SIGTERM');
      });
      assert.equal(result.signal, null, `not killed by the signal:\n${result.output}`);
      assert.equal(result.code, 0, result.output);
      assert.match(result.output, /"msg":"shutting down"/);
      assert.doesNotMatch(result.output, /"level":(50|60)/, 'no error or fatal line');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
