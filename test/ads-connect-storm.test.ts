import 'reflect-metadata';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromPeerCertificate } from '../src/xds/server/ads-server.js';
import { AdsTestClient } from './helpers/ads-client.js';

/**
 * A fleet connecting at once (Envoys reconnecting after a controller restart): the mTLS listener
 * must hold and serve what it can accept, not let the kernel drop it (listen backlog) nor reset
 * it itself (handshake timers running while it works through the others).
 */

/** Client sockets of this process to `port` on 127.0.0.1 still in SYN-SENT (their SYN was not answered). */
function synSentTo(port: number): number {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  return readFileSync('/proc/net/tcp', 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length > 3 && f[2] === `0100007F:${hexPort}` && f[3] === '02').length;
}

const until = async (what: string, ok: () => boolean, timeoutMs = 60_000): Promise<void> => {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};

describe('ADS mTLS listener under a connection storm', () => {
  let dir: string;
  let certificates: CertificateManager;
  let server: AdsServer;
  let port: number;

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'trellis-connect-storm-'));
    certificates = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(dir) });
    const serverCert = await certificates.issueServerCertificate({});
    server = new AdsServer({ watcher: new SnapshotCache() });
    port = await server.start({
      address: '127.0.0.1:0',
      mutualTls: { caPem: certificates.caPem, certPem: serverCert.certPem, keyPem: serverCert.keyPem },
      authenticate: authenticateFromPeerCertificate,
      // Far fewer than the clients of the second test, so that most of them wait their turn.
      maxConcurrentHandshakes: 64,
    });
  });

  after(async () => {
    await server.stop(500);
    certificates.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('lets the kernel hold 1500 connections that arrive while the event loop is busy (a listen backlog above 511)', async () => {
    const sockets: net.Socket[] = [];
    for (let i = 0; i < 1500; i++) {
      const s = net.connect({ host: '127.0.0.1', port });
      s.on('error', () => undefined);
      sockets.push(s);
    }
    // net.connect issues its connect(2) on the next tick: let those run, not the event loop (the
    // server would accept).
    await new Promise<void>((resolve) => process.nextTick(resolve));
    // The event loop is held (as by a long generation) while the kernel answers the SYNs: those
    // beyond the accept queue are dropped and their clients stay in SYN-SENT, retrying later.
    execFileSync('sleep', ['1']);
    const unanswered = synSentTo(port);
    for (const s of sockets) s.destroy();
    assert.equal(unanswered, 0, `${unanswered} of 1500 connections were not accepted by the kernel (their SYN was dropped: the listen queue was full)`);
  });

  it('serves 640 real gRPC mTLS clients connecting at once, ten times what it handshakes at a time', async () => {
    const n = 640;
    const ca = Buffer.from(certificates.caPem);
    const clients: AdsTestClient[] = [];
    const failures: string[] = [];
    const ids: string[] = [];
    const credentials: grpc.ChannelCredentials[] = [];
    for (let i = 0; i < n; i++) {
      const uuid = `5e1501d0-0000-4000-8000-${String(i).padStart(12, '0')}`;
      const cert = await certificates.issueProxyCertificate(uuid, 'storm', `sa-${i % 10}`, 3600);
      ids.push(`${uuid}.sidecar.sa-${i % 10}.storm.cluster.local`);
      credentials.push(grpc.credentials.createSsl(ca, Buffer.from(cert.keyPem), Buffer.from(cert.certPem)));
    }
    try {
      for (let i = 0; i < n; i++) {
        const client = new AdsTestClient(`127.0.0.1:${port}`, credentials[i]);
        clients.push(client);
        const stream = client.openStream(ids[i]);
        stream.call.on('error', (err: grpc.ServiceError) => failures.push(err.details));
        stream.request('type.googleapis.com/envoy.config.cluster.v3.Cluster');
      }
      await until(`${n} streams`, () => server.streams().length + failures.length >= n);
      assert.deepEqual(failures, []);
      assert.equal(server.streams().length, n);
    } finally {
      for (const c of clients) c.close();
    }
  });
});
