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
import { AdsServer, authenticateFromPeerCertificate } from '../src/xds/server/ads-server.js';
import { AdsTestClient } from './helpers/ads-client.js';
import { eventually } from './helpers/wait.js';

/**
 * The mTLS listener's handshake queue has timers: a connection whose handshake never completes
 * is cut at the handshake timeout even when its client keeps it busy (a ClientHello sent a byte
 * at a time resets an idle timer, not a deadline), and a connection waiting for a handshake slot
 * is cut after the queue timeout. Real sockets on loopback; many such clients must not keep a
 * real mTLS gRPC client from connecting.
 */

/** Where the hostile connections come from (loopback, not the proxy's 127.0.0.1). */
const ATTACKER = '127.0.0.3';
const HANDSHAKE_TIMEOUT_MS = 1000;
const QUEUE_TIMEOUT_MS = 1500;

/** The first bytes of a TLS record announcing a 16 KiB handshake message: the server waits for the rest. */
const RECORD_HEADER = Buffer.from([0x16, 0x03, 0x01, 0x40, 0x00]);

describe('ADS mTLS handshake queue timers', () => {
  let dir: string;
  let certificates: CertificateManager;
  let serverCert: { certPem: string; keyPem: string };
  let proxyCredentials: grpc.ChannelCredentials;
  const nodeId = '5e1501d0-0000-4000-8000-00000000c3c3.sidecar.bookbuyer.bookbuyer.cluster.local';

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 's10h-handshake-'));
    certificates = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(dir) });
    serverCert = await certificates.issueServerCertificate({});
    const cert = await certificates.issueProxyCertificate('5e1501d0-0000-4000-8000-00000000c3c3', 'bookbuyer', 'bookbuyer', 3600);
    proxyCredentials = grpc.credentials.createSsl(Buffer.from(certificates.caPem), Buffer.from(cert.keyPem), Buffer.from(cert.certPem));
  });

  after(async () => {
    certificates.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('cuts a handshake that never completes (a byte at a time) and a connection waiting behind it, then serves a real proxy', async () => {
    const metrics = new Registry();
    const server = new AdsServer({ watcher: new SnapshotCache(), metrics });
    const sockets: net.Socket[] = [];
    const timers: NodeJS.Timeout[] = [];
    let client: AdsTestClient | undefined;
    try {
      const port = await server.start({
        address: '127.0.0.1:0',
        mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
        authenticate: authenticateFromPeerCertificate,
        maxConcurrentHandshakes: 2,
        tlsHandshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
        tlsQueueTimeoutMs: QUEUE_TIMEOUT_MS,
      });
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

      await eventually(() => dribblers.every((s) => closed.has(s)), 'the server to cut the handshakes sending a byte at a time', 20 * HANDSHAKE_TIMEOUT_MS, 50);
      await eventually(() => silent.every((s) => closed.has(s)), 'the server to cut the silent connections (in the queue, then in a handshake)', 20 * QUEUE_TIMEOUT_MS, 50);

      // The slots are free again: a real proxy connects and gets its stream.
      client = new AdsTestClient(`127.0.0.1:${port}`, proxyCredentials);
      const failures: string[] = [];
      const stream = client.openStream(nodeId);
      stream.call.on('error', (err: grpc.ServiceError) => failures.push(err.details));
      stream.request('type.googleapis.com/envoy.config.cluster.v3.Cluster');
      await eventually(() => server.streams().length === 1 || failures.length > 0, 'the proxy stream', 20_000, 50);
      assert.deepEqual(failures, []);

      const text = await metrics.metrics();
      const refused = (reason: string): number => Number(new RegExp(`trellis_xds_connections_refused_total\\{reason="${reason}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
      assert.ok(refused('tls_handshake') >= 2, `the handshakes cut are counted as tls_handshake refusals:\n${text}`);
    } finally {
      for (const t of timers) clearInterval(t);
      client?.close();
      for (const s of sockets) s.destroy();
      await server.stop(500);
    }
  });

  it('serves a real proxy while many silent connections arrive beside it, each cut after the queue and handshake timeouts', async () => {
    const server = new AdsServer({ watcher: new SnapshotCache() });
    const sockets: net.Socket[] = [];
    let client: AdsTestClient | undefined;
    try {
      const port = await server.start({
        address: '127.0.0.1:0',
        mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
        authenticate: authenticateFromPeerCertificate,
        maxConcurrentHandshakes: 4,
        tlsHandshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
        tlsQueueTimeoutMs: QUEUE_TIMEOUT_MS,
      });
      let closedCount = 0;
      for (let i = 0; i < 200; i++) {
        const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER });
        s.on('error', () => undefined);
        s.on('close', () => closedCount++);
        sockets.push(s);
      }
      client = new AdsTestClient(`127.0.0.1:${port}`, proxyCredentials);
      const failures: string[] = [];
      const stream = client.openStream(nodeId);
      stream.call.on('error', (err: grpc.ServiceError) => failures.push(err.details));
      stream.request('type.googleapis.com/envoy.config.cluster.v3.Cluster');
      await eventually(() => server.streams().length === 1 || failures.length > 0, 'the proxy stream beside 200 silent connections', 20_000, 50);
      assert.deepEqual(failures, []);
      // None of them is held for ever: the queue's and the handshake's timers end every one.
      await eventually(() => closedCount === sockets.length, `the 200 silent connections cut (${closedCount} so far)`, 30_000, 100);
    } finally {
      client?.close();
      for (const s of sockets) s.destroy();
      await server.stop(500);
    }
  });
});
