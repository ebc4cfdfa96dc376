/**
 * The command line's conventions (issue 16 item 6): `trellis --version` (package version and the
 * git commit recorded at build time), `--log-format text|json` (text on a terminal, JSON
 * otherwise) for the long-running commands, and expected conditions (a manifest error, an API
 * server that is down, a port in use) logged at info or warn, without stack traces.
 * Runs bin/trellis.js: `npm run build` first when run alone.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { createLogger, defaultLogFormat, escapeForTerminal } from '../src/cli/logging.js';
import { readBuildInfo, versionText } from '../src/cli/version.js';
import { freePort } from './helpers/ports.js';
import { eventually } from './helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '..');
const BIN = path.join(ROOT, 'bin/trellis.js');
const run = promisify(execFile);

/** `git …` in `cwd`, its stdout trimmed. */
async function git(cwd: string, ...args: string[]): Promise<string> {
  return (await run('git', args, { cwd })).stdout.trim();
}

/** A `trellis ARGS…` child with stdout and stderr collected; `exited` resolves with its exit code. */
function trellis(args: readonly string[], options: { command?: readonly string[] } = {}) {
  const [command, ...rest] = options.command ?? [process.execPath, BIN];
  const child = spawn(command, [...rest, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => output, exited };
}

/** The text format's line: `[2026-12-02 02:24:31.600 +0000] LEVEL: message {json}`. */
const TEXT_LINE = /^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} [+-]\d{4}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL): /;

describe('trellis --version', () => {
  it('prints the package version and the commit dist/ was built from (the checkout\'s HEAD)', async () => {
    const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const head = await git(ROOT, 'rev-parse', 'HEAD');
    const { stdout } = await run(process.execPath, [BIN, '--version']);
    assert.match(stdout, new RegExp(`^trellis ${pkg.version.replaceAll('.', '\\.')} \\(commit ${head}(-dirty)?\\)\\n$`));
    assert.equal((await run(process.execPath, [BIN, '-V'])).stdout, stdout);
  });

  it('scripts/build-info.sh records the commit of the checkout it is in, -dirty when a tracked file differs, unknown outside a checkout', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'trellis-build-info-'));
    try {
      const copy = path.join(dir, 'copy');
      await mkdir(path.join(copy, 'scripts'), { recursive: true });
      await cp(path.join(ROOT, 'scripts/build-info.sh'), path.join(copy, 'scripts/build-info.sh'));
      const info = async (root: string) => JSON.parse((await run('bash', [path.join(root, 'scripts/build-info.sh')])).stdout) as { commit: string };
      assert.deepEqual(await info(copy), { commit: 'unknown' });

      await git(copy, 'init', '-q');
      await writeFile(path.join(copy, 'README.md'), 'one\n');
      await git(copy, 'add', '.');
      await git(copy, '-c', 'user.name=t', '-c', 'user.email=t@example.com', 'commit', '-q', '-m', 'one');
      const head = await git(copy, 'rev-parse', 'HEAD');
      assert.deepEqual(await info(copy), { commit: head });
      await writeFile(path.join(copy, 'untracked.txt'), 'not part of the build\n');
      assert.deepEqual(await info(copy), { commit: head }, 'an untracked file does not make it dirty');
      await writeFile(path.join(copy, 'README.md'), 'two\n');
      assert.deepEqual(await info(copy), { commit: `${head}-dirty` });

      // A copy of the sources inside another checkout is not that checkout's commit.
      const nested = path.join(copy, 'nested');
      await mkdir(path.join(nested, 'scripts'), { recursive: true });
      await cp(path.join(ROOT, 'scripts/build-info.sh'), path.join(nested, 'scripts/build-info.sh'));
      assert.deepEqual(await info(nested), { commit: 'unknown' });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reads unknown when the code directory has no build-info.json (run from the sources)', () => {
    const info = readBuildInfo(path.join(ROOT, 'src'));
    assert.equal(info.commit, 'unknown');
    assert.match(versionText(info), /^trellis \d+\.\d+\.\d+\S* \(commit unknown\)$/);
  });
});

describe('--log-format', () => {
  /** Every line written to a logger made by createLogger (a Writable, not a terminal). */
  function capture(): { stream: Writable; lines: () => string[] } {
    let text = '';
    const stream = new Writable({ write: (chunk: Buffer, _enc, done) => { text += chunk.toString(); done(); } });
    return { stream, lines: () => text.split('\n').filter((l) => l !== '') };
  }

  it('is text on a terminal and JSON otherwise', () => {
    assert.equal(defaultLogFormat({ isTTY: true }), 'text');
    assert.equal(defaultLogFormat({ isTTY: false }), 'json');
    assert.equal(defaultLogFormat({}), 'json');
  });

  it('text: one line a record (an error object and a message with control characters too), time, level, message, fields', () => {
    const { stream, lines } = capture();
    const logger = createLogger({ logLevel: 'info', logFormat: 'text' }, stream);
    logger.warn({ err: new Error('boom'), proxy: 'p\u202e1' }, 'two\nlines \u001b[31mred');
    logger.info({ n: 1 }, 'plain');
    const [warn, info] = lines();
    assert.equal(lines().length, 2, lines().join('\n'));
    assert.match(warn, TEXT_LINE);
    assert.ok(warn.includes('WARN: two\\nlines \\u001b[31mred {'), warn);
    assert.ok(warn.includes('"proxy":"p\\u202e1"'), warn);
    assert.ok(warn.includes('"message":"boom"'), warn);
    assert.ok(!/[\u0000-\u0008\u000b-\u001f\u202e]/.test(warn), 'no control or bidirectional character');
    assert.match(info, /INFO: plain \{"n":1\}$/);
    assert.equal(escapeForTerminal('a\tb\u0085c\u2028'), 'a\\tb\\u0085c\\u2028');
  });

  it('json: pino\'s own lines', () => {
    const { stream, lines } = capture();
    createLogger({ logLevel: 'info', logFormat: 'json' }, stream).info({ n: 1 }, 'plain');
    const record = JSON.parse(lines()[0]) as Record<string, unknown>;
    assert.equal(record.msg, 'plain');
    assert.equal(record.level, 30);
    assert.equal(record.n, 1);
  });
});

describe('the controller\'s log lines', () => {
  let dir: string;
  let manifests: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-conventions-'));
    manifests = path.join(dir, 'bookstore');
    await cp(path.join(ROOT, 'examples/bookstore'), manifests, { recursive: true });
    // A manifest error: an expected condition, a warning naming file and line.
    await writeFile(path.join(manifests, 'zz-bad.yaml'), 'apiVersion: v1\nkind: Service\nmetadata:\n  name: Bad_Name\n  namespace: bookstore\nspec:\n  ports:\n  - port: 80\n');
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** `trellis controller` on the copy of the example, on free ports, with `extra` flags. */
  function controller(extra: readonly string[], options: { command?: readonly string[]; httpAddress?: string } = {}) {
    return trellis([
      'controller', '--manifests', manifests, '--state-dir', path.join(dir, 'state'),
      '--xds-address', '127.0.0.1:0', '--http-address', options.httpAddress ?? '127.0.0.1:0', '--warm-up-config', '0', '--resync-interval', '0', ...extra,
    ], options);
  }

  async function stopped(c: ReturnType<typeof controller>): Promise<void> {
    c.child.kill('SIGTERM');
    assert.equal(await c.exited, 0, c.output());
  }

  it('are JSON when stdout is not a terminal; the manifest error is a warning without a stack', async () => {
    const c = controller([]);
    await eventually(() => c.output().includes('"msg":"controller started"'), 'controller started', 60_000);
    await stopped(c);
    const records = c.output().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { level: number; msg: string; err?: unknown });
    const invalid = records.filter((r) => r.msg.startsWith('invalid manifest:'));
    assert.equal(invalid.length, 1, c.output());
    assert.equal(invalid[0].level, 40);
    assert.match(invalid[0].msg, /zz-bad\.yaml:4: Service bookstore\/Bad_Name: metadata\.name: /);
    assert.deepEqual(records.filter((r) => r.level >= 50), [], 'nothing at error or fatal');
    assert.ok(!c.output().includes('"stack"'), 'no stack trace');
  });

  it('are text with --log-format text: one line a record', async () => {
    const c = controller(['--log-format', 'text']);
    await eventually(() => /INFO: controller started \{.*"httpPort":\d+/.test(c.output()), 'controller started', 60_000);
    await stopped(c);
    const lines = c.output().split('\n').filter((l) => l !== '');
    for (const line of lines) assert.match(line, TEXT_LINE);
    assert.ok(lines.some((l) => /WARN: invalid manifest: \S+zz-bad\.yaml:4: Service bookstore\/Bad_Name/.test(l)), c.output());
  });

  it('are text by default on a terminal (script(1) gives the controller a pseudo-terminal)', { skip: process.platform !== 'linux' }, async () => {
    const argv = [process.execPath, BIN, 'controller', '--manifests', manifests, '--state-dir', path.join(dir, 'state'),
      '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--warm-up-config', '0', '--resync-interval', '0'];
    const c = trellis([], { command: ['script', '-qefc', argv.map((a) => `'${a}'`).join(' '), '/dev/null'] });
    await eventually(() => /INFO.*controller started/.test(c.output()), 'controller started', 60_000);
    c.child.kill('SIGTERM');
    await c.exited;
    assert.ok(!c.output().includes('"msg":'), `no JSON line:\n${c.output()}`);
    assert.match(c.output(), /\] \S*INFO\S*: \S*controller started/);
  });

  it('the manifests directory removed while it runs: warnings without a stack, no error; the objects stay', async () => {
    const gone = path.join(dir, 'gone');
    await cp(path.join(ROOT, 'examples/bookstore'), gone, { recursive: true });
    const c = trellis(['controller', '--manifests', gone, '--state-dir', path.join(dir, 'state'), '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0', '--warm-up-config', '0', '--resync-interval', '0']);
    try {
      await eventually(() => c.output().includes('"msg":"controller started"'), 'controller started', 60_000);
      await rm(gone, { recursive: true, force: true });
      await eventually(() => c.output().includes('the manifests directory is gone'), 'the directory is gone warning', 30_000);
      const httpPort = Number(/"httpPort":(\d+)/.exec(c.output())![1]);
      const policies = (await (await fetch(`http://127.0.0.1:${httpPort}/debug/policies`)).json()) as { trafficTargets: unknown[] };
      assert.ok(policies.trafficTargets.length > 0, 'the objects loaded stay');
    } finally {
      c.child.kill('SIGTERM');
    }
    assert.equal(await c.exited, 0, c.output());
    const records = c.output().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { level: number; msg: string });
    assert.deepEqual(records.filter((r) => r.level >= 50), [], `nothing at error or fatal:\n${c.output()}`);
    assert.ok(!c.output().includes('"stack"'), 'no stack trace');
  });

  it('a port in use: one fatal line naming the flag and the address, without a stack; exit 1', async () => {
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const address = `127.0.0.1:${(busy.address() as net.AddressInfo).port}`;
    try {
      const c = controller([], { httpAddress: address });
      assert.equal(await c.exited, 1, c.output());
      const fatal = c.output().split('\n').filter((l) => l.includes('"level":60'));
      assert.equal(fatal.length, 1, c.output());
      assert.ok(fatal[0].includes(`cannot listen on --http-address ${address}`) && fatal[0].includes('EADDRINUSE'), fatal[0]);
      assert.ok(!c.output().includes('"stack"'), 'no stack trace');
    } finally {
      busy.close();
    }
  });

  it('an API server that is down: warnings that say so and retry, no error, no stack; SIGTERM stops the wait (exit 0)', async () => {
    const kubeconfig = path.join(dir, 'kubeconfig');
    const port = await freePort(); // nothing listens there: connection refused
    await writeFile(kubeconfig, [
      'apiVersion: v1', 'kind: Config', 'current-context: down',
      'clusters: [{name: down, cluster: {server: "http://127.0.0.1:' + port + '"}}]',
      'contexts: [{name: down, context: {cluster: down, user: u}}]',
      'users: [{name: u, user: {token: t}}]', '',
    ].join('\n'));
    const c = trellis(['controller', '--kubeconfig', kubeconfig, '--state-dir', path.join(dir, 'kube-state'), '--xds-address', '127.0.0.1:0', '--http-address', '127.0.0.1:0']);
    let code: number | null | 'still running';
    try {
      await eventually(() => (c.output().match(/ECONNREFUSED/g) ?? []).length >= 2, 'two refused attempts logged', 30_000);
      // A SIGTERM while it waits for the API server stops it (it used to wait for the start forever).
      c.child.kill('SIGTERM');
      code = await Promise.race([c.exited, new Promise<'still running'>((resolve) => setTimeout(() => resolve('still running'), 20_000).unref())]);
    } finally {
      c.child.kill('SIGKILL');
      await c.exited;
    }
    assert.equal(code, 0, `exits 0 on SIGTERM during start-up:\n${c.output()}`);
    assert.match(c.output(), /"msg":"shutting down"/);
    const records = c.output().split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as { level: number; msg: string });
    assert.ok(records.some((r) => r.level === 40 && /retrying/.test(r.msg)), c.output());
    assert.deepEqual(records.filter((r) => r.level >= 50), [], 'nothing at error or fatal');
    assert.ok(!c.output().includes('"stack"'), 'no stack trace');
  });
});

describe('LICENSE and CHANGELOG.md', () => {
  it('LICENSE is the Apache License 2.0 that package.json names', async () => {
    const license = await readFile(path.join(ROOT, 'LICENSE'), 'utf8');
    assert.match(license, /^\s*Apache License\n\s*Version 2\.0, January 2004\n/);
    assert.match(license, /END OF TERMS AND CONDITIONS/);
    assert.equal((JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { license: string }).license, 'Apache-2.0');
  });

  it('CHANGELOG.md is in the Keep a Changelog format: an Unreleased section, its change types, every entry naming its issue', async () => {
    const text = await readFile(path.join(ROOT, 'CHANGELOG.md'), 'utf8');
    assert.match(text, /^# Changelog\n/);
    assert.match(text, /\n## \[Unreleased\]\n/);
    const types = [...text.matchAll(/^### (.+)$/gm)].map((m) => m[1]);
    assert.ok(types.length > 0);
    for (const type of types) assert.ok(['Added', 'Changed', 'Deprecated', 'Removed', 'Fixed', 'Security'].includes(type), type);
    const entries = text.split('\n').filter((l) => l.startsWith('- '));
    assert.ok(entries.length > 0);
    for (const entry of entries) assert.match(entry, /^- \(#\d+(, #\d+)*\) /, entry);
  });
});
