/**
 * The package as users get it: `npm pack` (which builds dist/ first), the tarball installed in a
 * directory of its own, and its `trellis controller` started on a copy of examples/bookstore,
 * nothing of this checkout in reach. Anything the runtime reads that the `files` list of
 * package.json leaves out (a CRD schema, a compiled module) makes it fail.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { watchController } from './helpers/controller-process.js';

const REPO = path.resolve(import.meta.dirname, '..');
const EXAMPLE = path.join(REPO, 'examples/bookstore');
const run = promisify(execFile);

/**
 * The environment for an npm started here: without the `npm_*` variables of an `npm test`
 * around this process (npm reads `npm_config_*` as its settings), and with this Node first on PATH.
 */
function npmEnv(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
  return { ...env, PATH: `${path.dirname(process.execPath)}${path.delimiter}${env.PATH ?? ''}` };
}

/** Runs npm with `args` in `cwd`; resolves with its stdout, rejects with its output when it fails. */
async function npm(args: readonly string[], cwd: string): Promise<string> {
  try {
    return (await run('npm', [...args], { cwd, env: npmEnv(), maxBuffer: 16 * 1024 * 1024 })).stdout;
  } catch (err) {
    const e = err as Error & { stdout?: string; stderr?: string };
    throw new Error(`npm ${args.join(' ')} failed in ${cwd}: ${e.message}\n${e.stdout ?? ''}\n${e.stderr ?? ''}`);
  }
}

/** `namespace/name` of every TrafficTarget in the manifests under `dir` (the example's policies). */
async function trafficTargetNames(dir: string): Promise<string[]> {
  const names: string[] = [];
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.yaml')).sort()) {
    for (const doc of parseAllDocuments(await readFile(path.join(dir, file), 'utf8'))) {
      const object = doc.toJS() as { kind?: string; metadata?: { name?: string; namespace?: string } } | null;
      if (object?.kind === 'TrafficTarget') names.push(`${object.metadata?.namespace}/${object.metadata?.name}`);
    }
  }
  return names.sort();
}

describe('the packed tarball', () => {
  let dir: string;
  let tarball: string;
  let installed: string;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-package-'));
    const packDir = path.join(dir, 'pack');
    await mkdir(packDir);
    const packed = JSON.parse(await npm(['pack', '--json', '--pack-destination', packDir], REPO)) as Array<{ filename: string }>;
    tarball = path.join(packDir, packed[0].filename);
    installed = path.join(dir, 'install');
    await mkdir(installed);
    await writeFile(path.join(installed, 'package.json'), `${JSON.stringify({ name: 'trellis-package-test', private: true })}\n`);
    await npm(['install', '--no-audit', '--no-fund', '--prefer-offline', tarball], installed);
  });

  after(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('holds package.json, README.md, bin/ and the compiled dist/ (JavaScript, source maps, the CRD schemas, the mesh page): no TypeScript, tests or benchmarks', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.split('\n').filter((f) => f !== '').map((f) => f.replace(/^package\//, ''));
    const unexpected = files.filter((f) => !/^(package\.json|README\.md|bin\/[\w-]+\.js|dist\/.+\.js(\.map)?|dist\/sources\/manifests\/schemas\/crds\/[\w.]+\.(yaml|txt)|dist\/debug\/page\/[\w-]+\.(html|css))$/.test(f));
    assert.deepEqual(unexpected, []);
    assert.ok(files.includes('dist/cli/main.js'));
    assert.ok(files.includes('dist/sources/manifests/schemas/crds/smi_traffic_access.yaml'));
    for (const page of ['index.html', 'mesh.js', 'mesh.css']) assert.ok(files.includes(`dist/debug/page/${page}`), `dist/debug/page/${page} is packed`);
  });

  it('installs with its runtime dependencies only: no TypeScript compiler or loader', async () => {
    const modules = await readdir(path.join(installed, 'node_modules'));
    assert.ok(modules.includes('trellis'));
    assert.deepEqual(modules.filter((m) => m === 'tsx' || m === 'typescript' || m === 'esbuild'), []);
  });

  it('runs `trellis controller` on the example: /readyz 200, every TrafficTarget loaded, the mesh page served, no error logged', async () => {
    const manifests = path.join(dir, 'bookstore');
    await cp(EXAMPLE, manifests, { recursive: true });
    const bin = path.join(installed, 'node_modules', '.bin', 'trellis');
    const child = spawn(bin, [
      'controller', '--manifests', manifests, '--state-dir', path.join(dir, 'state'),
      '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--warm-up-config', '0', '--resync-interval', '0',
    ], { cwd: installed, env: npmEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const controller = watchController(child);
    try {
      const httpPort = await controller.httpPort;
      assert.equal((await fetch(`http://127.0.0.1:${httpPort}/readyz`)).status, 200);
      const policies = (await (await fetch(`http://127.0.0.1:${httpPort}/debug/policies`)).json()) as { trafficTargets: Array<{ name: string }>; manifestErrors: unknown[] };
      assert.deepEqual(policies.manifestErrors, []);
      assert.deepEqual(policies.trafficTargets.map((t) => t.name).sort(), await trafficTargetNames(manifests));
      for (const page of ['/', '/mesh.js', '/mesh.css']) assert.equal((await fetch(`http://127.0.0.1:${httpPort}${page}`)).status, 200, `${page} is served`);
      const output = controller.output();
      const errors = output.split('\n').filter((line) => /"level":(5\d|60)/.test(line));
      assert.deepEqual(errors, [], 'no error logged');
      assert.ok(!output.includes(REPO), `nothing read from the checkout ${REPO}`);
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0, `exits cleanly on SIGTERM:\n${controller.output()}`);
  });
});
