import 'reflect-metadata';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { Registry } from 'prom-client';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromPeerCertificate, type ListenOptions } from '../src/xds/server/ads-server.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { eventually } from './helpers/wait.js';

/**
 * The mTLS listener's handshake queue against a client that opens connections and never sends a
 * ClientHello (a slowloris, from another loopback address): a real proxy connecting after it must
 * still get its stream within about one handshake timeout, not wait behind every idle connection
 * (a FIFO of 10 s slots), nor find the queue filled by that one client and be refused. And the
 * queue has timers: a connection whose handshake never completes is cut at the handshake timeout
 * even when its client keeps it busy (a ClientHello sent a byte at a time resets an idle timer,
 * not a deadline), and a connection waiting for a handshake slot is cut after the queue timeout.
 */

/** Where the idle connections come from (loopback, not the proxy's 127.0.0.1). */
const ATTACKER = '127.0.0.2';
/** The handshake timeout of these listeners: each idle connection holds its slot this long. */
const HANDSHAKE_TIMEOUT_MS = 2000;
/** The timers' tests: shorter timeouts. */
const SHORT_HANDSHAKE_TIMEOUT_MS = 1000;
const QUEUE_TIMEOUT_MS = 1500;

/** The first bytes of a TLS record announcing a 16 KiB handshake message: the server waits for the rest. */
const RECORD_HEADER = Buffer.from([0x16, 0x03, 0x01, 0x40, 0x00]);

describe('ADS mTLS handshake queue against idle connections', () => {
  let dir: string;
  let certificates: CertificateManager;
  let serverCert: { certPem: string; keyPem: string };
  let proxyCredentials: grpc.ChannelCredentials;
  const nodeId = '5e1501d0-0000-4000-8000-00000000b8b8.sidecar.bookbuyer.bookbuyer.cluster.local';

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-s8b-handshake-'));
    certificates = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(dir) });
    serverCert = await certificates.issueServerCertificate({});
    const cert = await certificates.issueProxyCertificate('5e1501d0-0000-4000-8000-00000000b8b8', 'bookbuyer', 'bookbuyer', 3600);
    proxyCredentials = grpc.credentials.createSsl(Buffer.from(certificates.caPem), Buffer.from(cert.keyPem), Buffer.from(cert.certPem));
  });

  after(async () => {
    certificates.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** Starts an mTLS ADS server on a loopback port with `options`; resolves with its port. */
  function startServer(server: AdsServer, options: Partial<ListenOptions>): Promise<number> {
    return server.start({
      address: '127.0.0.1:0',
      mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
      authenticate: authenticateFromPeerCertificate,
      tlsHandshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
      ...options,
    });
  }

  /** Opens one real proxy stream to `port` (its client into `clients`); resolves once `server` serves it. */
  async function proxyServed(server: AdsServer, port: number, clients: AdsTestClient[], what: string, timeoutMs: number): Promise<void> {
    const client = new AdsTestClient(`127.0.0.1:${port}`, proxyCredentials);
    clients.push(client);
    const failures: string[] = [];
    const stream = client.openStream(nodeId);
    stream.call.on('error', (err: grpc.ServiceError) => failures.push(err.details));
    stream.request('type.googleapis.com/envoy.config.cluster.v3.Cluster');
    await eventually(() => server.streams().length === 1 || failures.length > 0, what, timeoutMs, 50);
    assert.deepEqual(failures, []);
  }

  /** Starts a server, opens `idle` silent connections from {@link ATTACKER}, then one real proxy stream; resolves once the stream is served. */
  async function proxyServedBehind(idle: number, options: Partial<ListenOptions>): Promise<void> {
    const server = new AdsServer({ watcher: new SnapshotCache() });
    const sockets: net.Socket[] = [];
    const clients: AdsTestClient[] = [];
    try {
      const port = await startServer(server, options);
      let connected = 0;
      for (let i = 0; i < idle; i++) {
        const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER }, () => connected++);
        s.on('error', () => undefined);
        sockets.push(s);
      }
      await eventually(() => connected === idle, `${idle} idle connections`, 10_000);
      // Let the server accept them (and queue them) before the proxy connects.
      await new Promise((r) => setTimeout(r, 300));
      // Served: the idle connections delay it by one handshake timeout (a FIFO: idle / slots of them).
      await proxyServed(server, port, clients, 'the proxy stream behind the idle connections', 8 * HANDSHAKE_TIMEOUT_MS);
    } finally {
      for (const c of clients) c.close();
      for (const s of sockets) s.destroy();
      await server.stop(500);
    }
  }

  it('serves a proxy from another address behind 100 idle connections holding every handshake slot', async () => {
    // 2 slots, 100 idle: first come, first served, the proxy would wait 50 handshake timeouts.
    await proxyServedBehind(100, { maxConcurrentHandshakes: 2 });
  });

  it('serves a proxy from another address when idle connections of one address fill the queue', async () => {
    // 1 slot and 10 places, 30 idle: the queue is full when the proxy arrives.
    await proxyServedBehind(30, { maxConcurrentHandshakes: 1, maxQueuedConnections: 10 });
  });

  it('cuts a handshake that never completes (a byte at a time) and a connection waiting behind it, then serves a real proxy', async () => {
    const metrics = new Registry();
    const server = new AdsServer({ watcher: new SnapshotCache(), metrics });
    const sockets: net.Socket[] = [];
    const timers: NodeJS.Timeout[] = [];
    const clients: AdsTestClient[] = [];
    try {
      const port = await startServer(server, { maxConcurrentHandshakes: 2, tlsHandshakeTimeoutMs: SHORT_HANDSHAKE_TIMEOUT_MS, tlsQueueTimeoutMs: QUEUE_TIMEOUT_MS });
      const closed = new Set<net.Socket>();
      const open = (): Promise<net.Socket> =>
        new Promise((resolve, reject) => {
          const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER }, () => resolve(s));
          s.on('error', () => undefined);
          s.once('error', reject);
          s.on('close', () => closed.add(s));
          sockets.push(s);
        });
      // Two that hold both slots, sending a byte every 100 ms (never a whole ClientHello), then
      // eight that connect and say nothing: they wait in the queue behind the first two.
      const dribblers = [await open(), await open()];
      for (const s of dribblers) {
        s.write(RECORD_HEADER);
        timers.push(setInterval(() => s.writable && s.write(Buffer.from([0])), 100));
      }
      await new Promise((r) => setTimeout(r, 200));
      const silent: net.Socket[] = [];
      for (let i = 0; i < 8; i++) silent.push(await open());

      await eventually(() => dribblers.every((s) => closed.has(s)), 'the server to cut the handshakes sending a byte at a time', 20 * SHORT_HANDSHAKE_TIMEOUT_MS, 50);
      await eventually(() => silent.every((s) => closed.has(s)), 'the server to cut the silent connections (in the queue, then in a handshake)', 20 * QUEUE_TIMEOUT_MS, 50);

      // The slots are free again: a real proxy connects and gets its stream.
      await proxyServed(server, port, clients, 'the proxy stream', 20_000);

      const text = await metrics.metrics();
      const refused = (reason: string): number => Number(new RegExp(`trellis_xds_connections_refused_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      assert.ok(refused('tls_handshake') >= 2, `the handshakes cut are counted as tls_handshake refusals:\n${text}`);
    } finally {
      for (const t of timers) clearInterval(t);
      for (const c of clients) c.close();
      for (const s of sockets) s.destroy();
      await server.stop(500);
    }
  });

  it('serves a real proxy while many silent connections arrive beside it, each cut after the queue and handshake timeouts', async () => {
    const server = new AdsServer({ watcher: new SnapshotCache() });
    const sockets: net.Socket[] = [];
    const clients: AdsTestClient[] = [];
    try {
      const port = await startServer(server, { maxConcurrentHandshakes: 4, tlsHandshakeTimeoutMs: SHORT_HANDSHAKE_TIMEOUT_MS, tlsQueueTimeoutMs: QUEUE_TIMEOUT_MS });
      let closedCount = 0;
      for (let i = 0; i < 200; i++) {
        const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER });
        s.on('error', () => undefined);
        s.on('close', () => closedCount++);
        sockets.push(s);
      }
      await proxyServed(server, port, clients, 'the proxy stream beside 200 silent connections', 20_000);
      // None of them is held for ever: the queue's and the handshake's timers end every one.
      await eventually(() => closedCount === sockets.length, `the 200 silent connections cut (${closedCount} so far)`, 30_000, 100);
    } finally {
      for (const c of clients) c.close();
      for (const s of sockets) s.destroy();
      await server.stop(500);
    }
  });
});
