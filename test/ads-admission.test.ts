import 'reflect-metadata';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { Registry } from 'prom-client';
import { TypeUrl } from '../src/api/type-urls.js';
import { CertificateAuthority } from '../src/certificate/authority.js';
import { CertificateManager } from '../src/certificate/manager.js';
import { MeshController } from '../src/controller/mesh-controller.js';
import { PROXY_UUID_LABEL } from '../src/proxy/pod-check.js';
import { serviceIdentity } from '../src/proxy/types.js';
import { ObjectStore } from '../src/store/object-store.js';
import { SnapshotCache } from '../src/xds/cache/snapshot-cache.js';
import { AdsServer, authenticateFromNodeId, authenticateFromPeerCertificate } from '../src/xds/server/ads-server.js';
import { bookstoreMesh, k8s } from './fixtures/mesh.js';
import { AdsTestClient, decodeResources, type AdsTestStream } from './helpers/ads-client.js';
import { SimulatedSidecar } from './helpers/sidecar.js';
import { eventually } from './helpers/wait.js';

type Decoded = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const UUID = '0c0c0c0c-0c0c-4c0c-8c0c-0c0c0c0c0c0c';
const BUYER = serviceIdentity('bookbuyer', 'bookbuyer');
const THIEF = serviceIdentity('bookthief', 'bookthief');

/** Every Secret with a private key a stream was ever sent: its name and key. */
function keysReceived(stream: AdsTestStream): { name: string; key: string }[] {
  return stream.responses
    .filter((r) => r.type_url === TypeUrl.Secret)
    .flatMap((r) => decodeResources(r) as Decoded[])
    .filter((s) => s.tls_certificate?.private_key)
    .map((s) => ({ name: String(s.name), key: String(s.tls_certificate.private_key.inline_string) }));
}

/**
 * The controller's parts composed as `runController` composes them (store, certificate manager,
 * mesh controller, ADS server with an mTLS and a plaintext listener), on the bookstore mesh, with
 * a push kept pending (long debounce) until a proxy's admission runs it.
 */
async function startMesh(dir: string, options: { verifyPodIdentity?: boolean } = {}) {
  const ca = await CertificateAuthority.loadOrCreate(path.join(dir, String(Math.random())));
  const certificates = new CertificateManager({ ca, validitySeconds: 3600 });
  const store = new ObjectStore();
  store.replaceAll('test', bookstoreMesh());
  const cache = new SnapshotCache();
  const controller = new MeshController({
    store,
    certificates,
    cache,
    logger: pino({ level: 'silent' }),
    metrics: new Registry(),
    meshName: 'osm',
    debounceQuietMs: 60_000,
    debounceMaxDelayMs: 60_000,
    resyncIntervalMs: 0,
    verifyPodIdentity: options.verifyPodIdentity,
    podIdentityGraceMs: 30_000,
  });
  controller.start();
  const ads = new AdsServer({
    watcher: cache,
    hooks: {
      onStreamOpen: (proxy, streamId, node) => controller.onStreamOpen(proxy, streamId, node ?? null),
      onStreamClose: (proxy, streamId) => controller.onStreamClose(proxy, streamId),
    },
  });
  const server = await certificates.issueServerCertificate({});
  const mtlsPort = await ads.start({
    address: '127.0.0.1:0',
    credentials: grpc.ServerCredentials.createSsl(Buffer.from(ca.caPem), [{ cert_chain: Buffer.from(server.certPem), private_key: Buffer.from(server.keyPem) }], true),
    authenticate: authenticateFromPeerCertificate,
  });
  const plainPort = await ads.start({ address: '127.0.0.1:0', credentials: grpc.ServerCredentials.createInsecure(), authenticate: authenticateFromNodeId });
  const clients: AdsTestClient[] = [];
  const sidecars: SimulatedSidecar[] = [];
  const track = (client: AdsTestClient, nodeId: string): SimulatedSidecar => {
    clients.push(client);
    const sidecar = new SimulatedSidecar(client.openStream(nodeId)).start();
    sidecars.push(sidecar);
    return sidecar;
  };
  return {
    store,
    certificates,
    controller,
    ads,
    /** A sidecar on the mTLS listener with a client certificate of `uuid` and `identity`. */
    async mtls(uuid: string, namespace: string, serviceAccount: string): Promise<SimulatedSidecar> {
      const cert = await certificates.issueProxyCertificate(uuid, namespace, serviceAccount, 3600);
      const credentials = grpc.credentials.createSsl(Buffer.from(ca.caPem), Buffer.from(cert.keyPem), Buffer.from(cert.certPem));
      return track(new AdsTestClient(`127.0.0.1:${mtlsPort}`, credentials), cert.commonName);
    },
    /** A sidecar on the plaintext listener that says it is `nodeId`. */
    plaintext(nodeId: string): SimulatedSidecar {
      return track(new AdsTestClient(`127.0.0.1:${plainPort}`), nodeId);
    },
    async stop(): Promise<void> {
      for (const s of sidecars) s.stop();
      for (const c of clients) c.close();
      controller.stop();
      await ads.stop(1000);
      certificates.stop();
    },
  };
}

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'trellis-admission-'));
});
after(() => rm(dir, { recursive: true, force: true }));

describe('proxy admission', () => {

  it('admits one of two streams with one UUID and two identities opened while a push is pending, and no stream gets another identity\'s key', async () => {
    const mesh = await startMesh(dir, { verifyPodIdentity: true });
    try {
      // Both proxies connect before their pods are in the store: the pod check holds them.
      const buyer = await mesh.mtls(UUID, 'bookbuyer', 'bookbuyer');
      const thief = await mesh.mtls(UUID, 'bookthief', 'bookthief');
      const ended = () => [buyer, thief].filter((s) => s.stream.status !== undefined).length;
      await eventually(() => mesh.ads.streams().length + ended() === 2, 'both streams authenticated');
      // Their pods appear in one change: a push is pending while both are admitted.
      mesh.store.replaceAll('test', [
        ...bookstoreMesh(),
        k8s.pod('bookbuyer', 'bookbuyer-uuid', 'bookbuyer', { app: 'bookbuyer', [PROXY_UUID_LABEL]: UUID }, '10.244.1.11'),
        k8s.pod('bookthief', 'bookthief-uuid', 'bookthief', { app: 'bookthief', [PROXY_UUID_LABEL]: UUID }, '10.244.1.21'),
      ]);
      const served = (s: SimulatedSidecar) => keysReceived(s.stream).length > 0;
      await eventually(() => [buyer, thief].every((s) => s.stream.status !== undefined || served(s)), 'each stream refused or sent its key', 10_000);
      assert.equal(mesh.controller.registry.get(UUID)?.streamIds.size, 1, 'one stream of the UUID registered');
      const refused = [buyer, thief].filter((s) => s.stream.status !== undefined);
      assert.equal(refused.length, 1, 'exactly one stream refused');
      assert.equal(refused[0].stream.status!.code, grpc.status.PERMISSION_DENIED);
      assert.match(String(refused[0].stream.status!.details), new RegExp(`proxy UUID ${UUID} is in use`));
      for (const [sidecar, identity] of [[buyer, BUYER], [thief, THIEF]] as const) {
        for (const { name, key } of keysReceived(sidecar.stream)) {
          assert.equal(name, 'service-cert', `a stream of ${identity} was sent ${name}`);
          assert.equal(key, mesh.certificates.peekServiceCertificate(identity)?.keyPem);
        }
      }
    } finally {
      await mesh.stop();
    }
  });

  it('a reconnect of the same proxy replaces its old stream; another identity is refused', async () => {
    const mesh = await startMesh(dir);
    try {
      const first = await mesh.mtls(UUID, 'bookbuyer', 'bookbuyer');
      await first.until((s) => s.names(TypeUrl.Secret).includes('service-cert'), 'the first stream served');
      const again = await mesh.mtls(UUID, 'bookbuyer', 'bookbuyer');
      await again.until((s) => s.names(TypeUrl.Secret).includes('service-cert'), 'the reconnect served');
      await eventually(() => first.stream.status !== undefined, 'the old stream ended');
      assert.equal(first.stream.status!.code, grpc.status.UNAVAILABLE);
      assert.match(String(first.stream.status!.details), /replaced by a newer stream/);
      const impostor = await mesh.mtls(UUID, 'bookthief', 'bookthief');
      await eventually(() => impostor.stream.status !== undefined, 'the other identity refused');
      assert.equal(impostor.stream.status!.code, grpc.status.PERMISSION_DENIED);
      assert.deepEqual(keysReceived(impostor.stream), []);
      assert.equal(again.stream.status, undefined, 'the reconnected stream is still served');
      assert.deepEqual([...(mesh.controller.registry.get(UUID)?.streamIds ?? [])].length, 1);
    } finally {
      await mesh.stop();
    }
  });
});

describe('plaintext ADS listener', () => {

  it('serves a sidecar that claims a mesh identity its configuration without any private key, and issues no certificate', async () => {
    const mesh = await startMesh(dir);
    try {
      const sidecar = mesh.plaintext(`${UUID}.sidecar.bookbuyer.bookbuyer.cluster.local`);
      await sidecar.until((s) => s.names(TypeUrl.Listener).includes('outbound-listener') && s.names(TypeUrl.Secret).length > 0, 'listeners and secrets');
      assert.deepEqual(keysReceived(sidecar.stream), [], 'no Secret with a private key');
      assert.ok(sidecar.names(TypeUrl.Secret).every((n) => n !== 'service-cert'), sidecar.names(TypeUrl.Secret).join(' '));
      assert.ok(sidecar.names(TypeUrl.Cluster).includes('bookstore/bookstore-v1|14001'), 'the rest of its configuration');
      assert.equal(mesh.certificates.peekServiceCertificate(BUYER), undefined, 'no certificate issued for a claimed identity');
    } finally {
      await mesh.stop();
    }
  });

  it('refuses an identity outside the mesh and issues it no certificate', async () => {
    const mesh = await startMesh(dir);
    try {
      const before = mesh.certificates.size;
      const madeUp = serviceIdentity('nowhere', 'nobody');
      const sidecar = mesh.plaintext(`${UUID}.sidecar.nobody.nowhere.cluster.local`);
      await eventually(() => sidecar.stream.status !== undefined, 'refused');
      assert.equal(sidecar.stream.status!.code, grpc.status.PERMISSION_DENIED);
      assert.match(String(sidecar.stream.status!.details), /identity nowhere\/nobody .* is not in mesh osm/);
      assert.deepEqual(sidecar.stream.responses, []);
      assert.equal(mesh.certificates.peekServiceCertificate(madeUp), undefined);
      assert.equal(mesh.certificates.size, before, 'certificate manager unchanged');
      await eventually(() => mesh.controller.registry.get(UUID) === undefined, 'not registered');
    } finally {
      await mesh.stop();
    }
  });
});
