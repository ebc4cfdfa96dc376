import 'reflect-metadata';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
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
 * (a FIFO of 10 s slots), nor find the queue filled by that one client and be refused.
 */

/** Where the idle connections come from (loopback, not the proxy's 127.0.0.1). */
const ATTACKER = '127.0.0.2';
/** The handshake timeout of these listeners: each idle connection holds its slot this long. */
const HANDSHAKE_TIMEOUT_MS = 2000;

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

  /** Starts a server, opens `idle` silent connections from {@link ATTACKER}, then one real proxy stream; resolves once the stream is served. */
  async function proxyServedBehind(idle: number, options: Partial<ListenOptions>): Promise<void> {
    const server = new AdsServer({ watcher: new SnapshotCache() });
    const sockets: net.Socket[] = [];
    let client: AdsTestClient | undefined;
    try {
      const port = await server.start({
        address: '127.0.0.1:0',
        mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
        authenticate: authenticateFromPeerCertificate,
        tlsHandshakeTimeoutMs: HANDSHAKE_TIMEOUT_MS,
        ...options,
      });
      let connected = 0;
      for (let i = 0; i < idle; i++) {
        const s = net.connect({ host: '127.0.0.1', port, localAddress: ATTACKER }, () => connected++);
        s.on('error', () => undefined);
        sockets.push(s);
      }
      await eventually(() => connected === idle, `${idle} idle connections`, 10_000);
      // Let the server accept them (and queue them) before the proxy connects.
      await new Promise((r) => setTimeout(r, 300));
      client = new AdsTestClient(`127.0.0.1:${port}`, proxyCredentials);
      const failures: string[] = [];
      const stream = client.openStream(nodeId);
      stream.call.on('error', (err: grpc.ServiceError) => failures.push(err.details));
      stream.request('type.googleapis.com/envoy.config.cluster.v3.Cluster');
      // Served: the idle connections delay it by one handshake timeout (a FIFO: idle / slots of them).
      await eventually(() => server.streams().length === 1 || failures.length > 0, 'the proxy stream behind the idle connections', 8 * HANDSHAKE_TIMEOUT_MS, 50);
      assert.deepEqual(failures, []);
    } finally {
      client?.close();
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
});
