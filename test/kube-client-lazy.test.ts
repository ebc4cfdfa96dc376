/**
 * `@kubernetes/client-node` (about 0.5 s to import) is loaded in Kubernetes mode only: the
 * `trellis` command line, run in a child process from the sources with a hook that records every
 * module resolution, starts a manifests-mode controller to /readyz without resolving it once.
 * The same hook sees it resolved when a Kubernetes command runs (the recording works).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const CLIENT_NODE = pathToFileURL(path.join(ROOT, 'node_modules/@kubernetes/client-node/')).href;
const SRC = pathToFileURL(path.join(ROOT, 'src/')).href;

/** One module resolution of the child, as test/helpers/module-resolutions-hooks.mjs records it. */
interface Resolution {
  specifier: string;
  parent: string | null;
  url: string;
}

/** Starts `trellis ARGS…` from the sources with every module resolution recorded to `record`. */
function trellis(args: readonly string[], record: string) {
  const child = spawn(process.execPath, ['--import', 'tsx', '--import', './test/helpers/module-resolutions.mjs', 'test/helpers/cli-main.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, TRELLIS_MODULE_RESOLUTIONS: record },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

async function resolutions(record: string): Promise<Resolution[]> {
  return (await readFile(record, 'utf8')).split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Resolution);
}

/** The imports of client-node from outside it, as `importer -> specifier` lines. */
function clientNodeLoads(all: readonly Resolution[]): string[] {
  return all
    .filter((r) => (r.url.startsWith(CLIENT_NODE) || r.specifier.startsWith('@kubernetes/client-node')) && !r.parent?.startsWith(CLIENT_NODE))
    .map((r) => `${r.parent} -> ${r.specifier}`);
}

describe('@kubernetes/client-node is loaded in Kubernetes mode only', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-kube-lazy-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('`trellis controller --manifests` serves /readyz 200 without loading it', async () => {
    const record = path.join(dir, 'manifests-mode.jsonl');
    const run = trellis(
      ['controller', '--manifests', 'examples/bookstore', '--state-dir', path.join(dir, 'state'), '--xds-address', '127.0.0.1:0', '--xds-plaintext-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0'],
      record,
    );
    try {
      let httpPort = 0;
      await eventually(() => {
        httpPort = Number(/"httpPort":(\d+)/.exec(run.output())?.[1] ?? 0);
        return httpPort > 0 || run.child.exitCode !== null;
      }, 'the controller started', 60_000, 20);
      assert.ok(httpPort > 0, `the controller did not start: ${run.output()}`);
      const ready = await fetch(`http://127.0.0.1:${httpPort}/readyz`);
      assert.equal(ready.status, 200);
    } finally {
      run.child.kill('SIGTERM');
    }
    assert.equal(await run.exited, 0, run.output());
    const all = await resolutions(record);
    // The record holds the controller's own modules and the packages they import.
    for (const module of ['src/main.ts', 'src/cli/main.ts', 'src/sources/manifests/manifests-source.ts', 'src/xds/server/ads-server.ts']) {
      assert.ok(all.some((r) => r.url === `${SRC}${module.slice('src/'.length)}`), `${module} recorded`);
    }
    assert.ok(all.some((r) => r.specifier === '@grpc/grpc-js'), 'a package import recorded');
    assert.deepEqual(clientNodeLoads(all), [], 'nothing on the manifests-mode path imports @kubernetes/client-node');
  });

  it('the recording sees it loaded when a Kubernetes command runs', async () => {
    const record = path.join(dir, 'kube-command.jsonl');
    const run = trellis(['namespace', 'list', '--kubeconfig', path.join(dir, 'no-such-kubeconfig')], record);
    assert.equal(await run.exited, 1, run.output());
    assert.match(run.output(), /trellis namespace list: .*no-such-kubeconfig/);
    assert.notDeepEqual(clientNodeLoads(await resolutions(record)), []);
  });
});
