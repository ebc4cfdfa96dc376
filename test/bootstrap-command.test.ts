/** `trellis bootstrap` through bin/trellis.js: where the admin interface goes, and flags that contradict each other. */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { CertificateAuthority } from '../src/certificate/authority.js';

const run = promisify(execFile);
const BIN = path.resolve(import.meta.dirname, '../bin/trellis.js');

describe('trellis bootstrap', () => {
  let dir: string;
  let stateDir: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-bootstrap-'));
    stateDir = path.join(dir, 'state');
    await CertificateAuthority.loadOrCreate(stateDir);
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  async function bootstrap(out: string, ...flags: string[]): Promise<{ code: number; stderr: string; admin?: unknown }> {
    try {
      await run(process.execPath, [BIN, 'bootstrap', '--namespace', 'bookbuyer', '--service-account', 'bookbuyer', '--state-dir', stateDir, '--out', path.join(dir, out), ...flags]);
    } catch (err) {
      const e = err as { code: number; stderr: string };
      return { code: e.code, stderr: e.stderr };
    }
    const config = parse(await readFile(path.join(dir, out, 'bootstrap.yaml'), 'utf8')) as { admin: { address: unknown } };
    return { code: 0, stderr: '', admin: config.admin.address };
  }

  it('puts the admin interface on 127.0.0.1:15000, or on --admin-port', async () => {
    assert.deepEqual((await bootstrap('default')).admin, { socket_address: { address: '127.0.0.1', port_value: 15000 } });
    assert.deepEqual((await bootstrap('port', '--admin-port', '25150')).admin, { socket_address: { address: '127.0.0.1', port_value: 25150 } });
  });

  it('refuses a port out of range, and --admin-port with --admin-socket', async () => {
    const bad = await bootstrap('bad', '--admin-port', '70000');
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /"70000" is not a port \(1-65535\)/);
    const both = await bootstrap('both', '--admin-port', '25150', '--admin-socket', path.join(dir, 'admin.sock'));
    assert.equal(both.code, 1);
    assert.match(both.stderr, /^trellis bootstrap: --admin-socket and --admin-port both place the admin interface: give one\n$/);
  });
});
