import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { HELLO_TARGET, ProxylessMesh, assertSplitScenario, type Outcome } from './helpers/proxyless-mesh.js';

/** Debian's interpreter, which sees `python3-grpcio` (not a pyenv `python3` on PATH). */
const PYTHON = '/usr/bin/python3';
const CLIENT_SCRIPT = path.resolve(import.meta.dirname, 'python/xds_client.py');

/** Why the C-core client cannot run here, or undefined when it can. */
function grpcioMissing(): string | undefined {
  const probe = spawnSync(PYTHON, ['-c', 'import grpc; print(grpc.__version__)'], { encoding: 'utf8', timeout: 20_000 });
  if (probe.error) return `${PYTHON} cannot run: ${probe.error.message}`;
  if (probe.status !== 0) return `${PYTHON} cannot import grpc (${probe.stderr.trim().split('\n').at(-1)}); install it with: apt-get install -y python3-grpcio`;
  return undefined;
}

const missing = grpcioMissing();
// In CI (.ci/run installs python3-grpcio) a missing client is a failure, not a skip.
const skip = missing !== undefined && !process.env.CI ? `gRPC C-core client unavailable: ${missing}` : false;

/** test/python/xds_client.py in a child process: one command line in, one JSON line out. */
class PythonClient {
  private readonly child: ChildProcessWithoutNullStreams;
  private buffer = '';
  private readonly lines: string[] = [];
  private waiter?: () => void;
  private stderr = '';
  private exited = false;

  constructor(bootstrapFile: string) {
    this.child = spawn(PYTHON, [CLIENT_SCRIPT, HELLO_TARGET], {
      env: {
        ...process.env,
        GRPC_XDS_BOOTSTRAP: bootstrapFile,
        // C-core idles its poller; poll often so xDS updates are applied promptly.
        GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS: '100',
        GRPC_VERBOSITY: 'ERROR',
      },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (chunk: string) => {
      this.buffer += chunk;
      let i: number;
      while ((i = this.buffer.indexOf('\n')) >= 0) {
        const line = this.buffer.slice(0, i).trim();
        this.buffer = this.buffer.slice(i + 1);
        if (line) this.lines.push(line);
      }
      this.waiter?.();
    });
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (chunk: string) => (this.stderr += chunk));
    this.child.on('exit', () => {
      this.exited = true;
      this.waiter?.();
    });
  }

  private async nextLine(timeoutMs: number): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    while (this.lines.length === 0) {
      if (this.exited) throw new Error(`python client exited: ${this.stderr.slice(-2000)}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`python client gave no answer in ${timeoutMs} ms: ${this.stderr.slice(-2000)}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
    return this.lines.shift()!;
  }

  /** Waits for the client's start-up line. */
  async ready(): Promise<void> {
    const line = JSON.parse(await this.nextLine(20_000)) as { ready?: boolean };
    assert.equal(line.ready, true);
  }

  /** Makes `n` RPCs (concurrently, in the client) and returns replies by backend and errors by status. */
  async run(n: number, options: { timeoutSeconds?: number; waitForReady?: boolean } = {}): Promise<Outcome> {
    const timeout = options.timeoutSeconds ?? 5;
    this.child.stdin.write(`${JSON.stringify({ n, timeout, wait_for_ready: options.waitForReady ?? false })}\n`);
    return JSON.parse(await this.nextLine(timeout * 1000 + 10_000)) as Outcome;
  }

  /** Ends the client: closes its stdin, then kills it (by its own PID) if it lingers. */
  async stop(): Promise<void> {
    if (this.exited) return;
    this.child.stdin.end();
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

describe('proxyless gRPC C-core (python3-grpcio) through the controller', { skip }, () => {
  let mesh: ProxylessMesh;
  const clients: PythonClient[] = [];

  before(async () => {
    if (missing) throw new Error(`CI is set but the gRPC C-core client cannot run: ${missing}`);
    mesh = await ProxylessMesh.start([75, 25]);
  });

  after(async () => {
    for (const c of clients) await c.stop();
    await mesh?.stop();
  });

  async function client(serviceAccount: string): Promise<PythonClient> {
    const file = path.join(mesh.dir, `bootstrap-${serviceAccount}.json`);
    await writeFile(file, JSON.stringify(mesh.bootstrap('client', serviceAccount, randomUUID())));
    const c = new PythonClient(file);
    clients.push(c);
    await c.ready();
    return c;
  }

  it('splits RPCs by the TrafficSplit, follows a new split, and stops using a removed endpoint', async (t) => {
    const greeter = await client('greeter');
    await assertSplitScenario(mesh, { first: () => greeter.run(1, { waitForReady: true, timeoutSeconds: 10 }), run: (n) => greeter.run(n) }, t);
  });

  it('fails RPCs of a source without a TrafficTarget with UNAVAILABLE', async () => {
    const stranger = await client('stranger');
    assert.deepEqual(await stranger.run(5, { timeoutSeconds: 10 }), { counts: {}, errors: { UNAVAILABLE: 5 } });
  });

  it('registers the clients as proxyless and receives no NACK', async () => {
    const proxies = await mesh.proxies();
    assert.ok(proxies.length >= 2);
    assert.ok(proxies.every((p) => p.clientType === 'grpc'));
    assert.deepEqual(await mesh.nacks(), []);
  });
});
