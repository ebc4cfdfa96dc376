import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { TypeUrl } from '../src/api/type-urls.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { isLoopbackHost, routeGrpcLogs, runController } from '../src/main.js';
import { REFUSAL_LOG_LIMIT } from '../src/xds/server/ads-server.js';
import { AdsTestClient, TEST_NODE_ID } from './helpers/ads-client.js';
import { freePort } from './helpers/ports.js';
import { eventually } from './helpers/wait.js';

describe('plaintext ADS listener', () => {
  it('knows loopback hosts', () => {
    for (const host of ['localhost', '127.0.0.1', '127.1.2.3', '::1']) assert.equal(isLoopbackHost(host), true, host);
    for (const host of ['0.0.0.0', '10.0.0.1', '::', 'example.com']) assert.equal(isLoopbackHost(host), false, host);
  });

  it('refuses a non-loopback address unless insecureAllowRemote is set', async () => {
    await assert.rejects(
      runController({
        manifests: 'examples/bookstore',
        meshName: 'osm',
        stateDir: '/nonexistent-never-created',
        xdsAddress: '127.0.0.1:0',
        xdsPlaintextAddress: '0.0.0.0:0',
        httpAddress: '127.0.0.1:0',
        resyncIntervalMs: 0,
        logger: pino({ level: 'silent' }),
      }),
      /not a loopback address.*--insecure-allow-remote/,
    );
  });
});

describe('refused mTLS connections', () => {
  /** A controller on the bookstore example in a new temporary directory, its warnings and errors collected (parsed JSON lines). */
  async function startController(prefix: string) {
    const dir = await mkdtemp(path.join(tmpdir(), prefix));
    const lines: Record<string, unknown>[] = [];
    const running = await runController({
      manifests: 'examples/bookstore',
      meshName: 'osm',
      stateDir: path.join(dir, 'state'),
      xdsAddress: '127.0.0.1:0',
      httpAddress: '127.0.0.1:0',
      resyncIntervalMs: 0,
      warmUpConfigurationBytes: 0,
      logger: pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
    });
    return { dir, lines, running };
  }

  it('logs (rate-limited) and counts a client whose certificate is of another CA, and one without a certificate', async () => {
    const { dir, lines, running } = await startController('trellis-refused-');
    const clients: AdsTestClient[] = [];
    try {
      const caPem = await readFile(path.join(dir, 'state', 'ca.pem'));
      const other = await CertificateAuthority.loadOrCreate(path.join(dir, 'other'));
      const foreign = await other.issue({ commonName: `${TEST_NODE_ID}`, validitySeconds: 3600, usage: 'client' });
      const attempt = async (credentials: grpc.ChannelCredentials): Promise<void> => {
        const client = new AdsTestClient(`127.0.0.1:${running.xdsPort}`, credentials);
        clients.push(client);
        const stream = client.openStream();
        stream.request(TypeUrl.Cluster);
        await stream.ended(10_000);
        assert.notEqual(stream.status?.code, grpc.status.OK);
        client.close();
      };
      const attempts = 15;
      for (let i = 0; i < attempts; i++) await attempt(grpc.credentials.createSsl(caPem, Buffer.from(foreign.keyPem), Buffer.from(foreign.certPem)));
      await attempt(grpc.credentials.createSsl(caPem));
      const count = async (reason: string): Promise<number> => {
        const text = await (await fetch(`http://127.0.0.1:${running.httpPort}/metrics`)).text();
        return Number(new RegExp(`trellis_xds_connections_refused_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      };
      await eventually(async () => (await count('untrusted_certificate')) >= attempts && (await count('no_client_certificate')) >= 1, 'both refusals counted');
      const refusals = lines.filter((l) => l.msg !== undefined && String(l.msg).startsWith('ADS connection refused'));
      const untrusted = refusals.filter((l) => l.reason === 'untrusted_certificate');
      assert.ok(untrusted.length >= 1 && untrusted.length <= REFUSAL_LOG_LIMIT, `${untrusted.length} lines for ${attempts} refusals`);
      assert.match(String(untrusted[0].msg), /client certificate refused: UNABLE_TO_VERIFY_LEAF_SIGNATURE/);
      assert.ok(untrusted.every((l) => String(l.peer).startsWith('127.0.0.1:')));
      assert.ok(refusals.some((l) => l.reason === 'no_client_certificate'), 'no certificate logged');
    } finally {
      for (const c of clients) c.close();
      await running.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
  it('counts a client that refuses the controller\'s certificate (a TLS alert) as server_certificate_refused, not as its own', async () => {
    const { dir, lines, running } = await startController('trellis-refused-server-');
    try {
      // OpenSSL's client, trusting another CA and failing on verification, sends an
      // unknown_ca alert as Envoy (BoringSSL) does.
      const other = await CertificateAuthority.loadOrCreate(path.join(dir, 'other'));
      await writeFile(path.join(dir, 'other-ca.pem'), other.caPem);
      const exit = await new Promise<number | null>((resolve) => {
        const child = spawn('openssl', ['s_client', '-connect', `127.0.0.1:${running.xdsPort}`, '-CAfile', path.join(dir, 'other-ca.pem'), '-verify_return_error', '-alpn', 'h2'], { stdio: ['ignore', 'ignore', 'ignore'] });
        child.on('exit', resolve);
      });
      assert.notEqual(exit, 0, 'openssl refused the handshake');
      const count = async (): Promise<number> => {
        const text = await (await fetch(`http://127.0.0.1:${running.httpPort}/metrics`)).text();
        return Number(/trellis_xds_connections_refused_total\{reason="server_certificate_refused"\} (\d+)/.exec(text)?.[1] ?? 0);
      };
      await eventually(async () => (await count()) === 1, 'the refusal counted as the client\'s refusal of the server certificate');
      const line = lines.find((l) => l.reason === 'server_certificate_refused');
      assert.match(String(line?.msg), /ALERT_UNKNOWN_CA/);
    } finally {
      await running.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('an ADS address in use', () => {
  /** Runs `trellis controller` with one of its ADS addresses taken; resolves with its exit code and every output line. */
  async function runWithBusyPort(flag: '--xds-address' | '--xds-plaintext-address'): Promise<{ code: number | null; lines: string[]; address: string }> {
    const dir = await mkdtemp(path.join(tmpdir(), 'trellis-busy-'));
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const address = `127.0.0.1:${(busy.address() as net.AddressInfo).port}`;
    try {
      const args = ['bin/trellis.js', 'controller', '--manifests', 'examples/bookstore', '--state-dir', path.join(dir, 'state'), '--http-address', '127.0.0.1:0', '--warm-up-config', '0'];
      args.push(...(flag === '--xds-address' ? ['--xds-address', address] : ['--xds-address', '127.0.0.1:0', '--xds-plaintext-address', address]));
      const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
      return { code, lines: out.split('\n').filter((l) => l.trim() !== ''), address };
    } finally {
      busy.close();
      await rm(dir, { recursive: true, force: true });
    }
  }

  for (const flag of ['--xds-address', '--xds-plaintext-address'] as const) {
    it(`${flag}: the controller exits with one JSON error line naming the address, and every line it wrote is JSON`, async () => {
      const { code, lines, address } = await runWithBusyPort(flag);
      assert.equal(code, 1);
      const parsed = lines.map((l) => {
        try {
          return JSON.parse(l) as Record<string, unknown>;
        } catch {
          assert.fail(`not a JSON line: ${l}`);
        }
      });
      const errors = parsed.filter((l) => Number(l.level) >= 50);
      assert.equal(errors.length, 1, JSON.stringify(errors));
      assert.match(String(errors[0].err), new RegExp(`cannot listen on ${flag} ${address}: .*EADDRINUSE`));
    });
  }
});

describe('the ordered start and stop', () => {

  /** True when `port` on 127.0.0.1 can be bound (nothing listens on it any more). */
  async function portIsFree(port: number): Promise<boolean> {
    const server = net.createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (bound) await new Promise<void>((resolve) => server.close(() => resolve()));
    return bound;
  }

  const failures: { part: string; options: (dir: string, busy: string) => Partial<Parameters<typeof runController>[0]>; message: RegExp }[] = [
    { part: 'Kubernetes client', options: (dir) => ({ kubernetes: { kubeconfig: path.join(dir, 'no-such-kubeconfig') } }), message: /^Kubernetes client: .*no-such-kubeconfig/ },
    { part: 'certificate authority', options: (dir) => ({ manifests: 'examples/bookstore', stateDir: path.join(dir, 'key-only') }), message: /^certificate authority: CA state: .*ca\.pem is missing/ },
    { part: 'manifests source', options: (dir) => ({ manifests: path.join(dir, 'no-such-dir') }), message: /^manifests source: manifests directory .*no-such-dir: does not exist \(ENOENT\)/ },
    { part: 'plaintext ADS listener', options: (_dir, busy) => ({ manifests: 'examples/bookstore', xdsPlaintextAddress: busy }), message: /^plaintext ADS listener: cannot listen on --xds-plaintext-address .*EADDRINUSE/ },
  ];
  for (const failure of failures) {
    it(`a failure to start the ${failure.part} names it and stops what had started (the listeners are closed)`, async () => {
      const dir = await mkdtemp(path.join(tmpdir(), 'trellis-unwind-'));
      await mkdir(path.join(dir, 'key-only'));
      await writeFile(path.join(dir, 'key-only', 'ca-key.pem'), 'a key without its certificate\n');
      const busy = net.createServer();
      await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
      try {
        const httpPort = await freePort();
        const xdsPort = await freePort();
        const lines: Record<string, unknown>[] = [];
        await assert.rejects(
          runController({
            meshName: 'osm',
            stateDir: path.join(dir, 'state'),
            xdsAddress: `127.0.0.1:${xdsPort}`,
            httpAddress: `127.0.0.1:${httpPort}`,
            resyncIntervalMs: 0,
            warmUpConfigurationBytes: 0,
            logger: pino({ level: 'warn' }, { write: (line: string) => void lines.push(JSON.parse(line)) }),
            ...failure.options(dir, `127.0.0.1:${(busy.address() as net.AddressInfo).port}`),
          }),
          (err: unknown) => {
            assert.ok(err instanceof Error);
            assert.match(err.message, failure.message);
            assert.equal((err as { part?: string }).part, failure.part);
            return true;
          },
        );
        assert.equal(await portIsFree(httpPort), true, 'the operations server is closed');
        assert.equal(await portIsFree(xdsPort), true, 'the mTLS ADS listener is closed (or never opened)');
        assert.deepEqual(lines.filter((l) => Number(l.level) >= 50), [], 'every part stopped cleanly');
      } finally {
        busy.close();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }

  it('stop closes every listener, and a second stop (also one made meanwhile) is the same stop', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'trellis-stop-'));
    try {
      const running = await runController({
        manifests: 'examples/bookstore',
        meshName: 'osm',
        stateDir: path.join(dir, 'state'),
        xdsAddress: '127.0.0.1:0',
        xdsPlaintextAddress: '127.0.0.1:0',
        httpAddress: '127.0.0.1:0',
        resyncIntervalMs: 0,
        warmUpConfigurationBytes: 0,
        logger: pino({ level: 'silent' }),
      });
      assert.equal((await fetch(`http://127.0.0.1:${running.httpPort}/readyz`)).status, 200);
      const first = running.stop();
      const second = running.stop();
      await Promise.all([first, second]);
      await running.stop();
      for (const port of [running.httpPort, running.xdsPort, running.xdsPlaintextPort!]) assert.equal(await portIsFree(port), true, `port ${port} closed`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('routeGrpcLogs', () => {
  it("sends grpc-js's own log lines to the pino logger as JSON", async () => {
    const lines: Record<string, unknown>[] = [];
    routeGrpcLogs(pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) }));
    const busy = net.createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const server = new grpc.Server();
    try {
      await assert.rejects(
        new Promise((resolve, reject) =>
          server.bindAsync(`127.0.0.1:${(busy.address() as net.AddressInfo).port}`, grpc.ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))),
        ),
      );
      assert.ok(lines.some((l) => l.level === 50 && /No address added/.test(String(l.msg))), JSON.stringify(lines));
    } finally {
      server.forceShutdown();
      busy.close();
      routeGrpcLogs(pino({ level: 'silent' }));
    }
  });
});
