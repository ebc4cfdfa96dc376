import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { parseCommonName, serviceIdentity } from '../proxy/types.js';
import { CertificateAuthority, type IssuedCertificate } from './authority.js';
import { commonNameFromCertificate } from './identity.js';
import { CertificateManager } from './manager.js';

/** A one-method service carrying raw bytes, enough to complete a call over mTLS. */
const ECHO_PATH = '/trellis.test.Echo/Echo';
const identityBytes = (b: Buffer): Buffer => b;
const echoService: grpc.ServiceDefinition = {
  Echo: {
    path: ECHO_PATH,
    requestStream: false,
    responseStream: false,
    requestSerialize: identityBytes,
    requestDeserialize: identityBytes,
    responseSerialize: identityBytes,
    responseDeserialize: identityBytes,
  },
};

const UUID = '0b7d6a52-1f0c-4c4e-9f5e-2a8c2b7a9d11';

function call(port: number, client: IssuedCertificate, caPem: string): Promise<Buffer> {
  const creds = grpc.credentials.createSsl(Buffer.from(caPem), Buffer.from(client.keyPem), Buffer.from(client.certPem));
  const c = new grpc.Client(`localhost:${port}`, creds);
  return new Promise<Buffer>((resolve, reject) => {
    c.makeUnaryRequest(ECHO_PATH, identityBytes, identityBytes, Buffer.from('ping'), { deadline: Date.now() + 10_000 }, (err, value) => {
      c.close();
      if (err) reject(err);
      else resolve(value as Buffer);
    });
  });
}

describe('mTLS with grpc-js using certificates from the mesh CA', () => {
  let dir: string;
  let manager: CertificateManager;
  let otherManager: CertificateManager;
  let server: grpc.Server;
  let port: number;
  const peerCommonNames: string[] = [];

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-mtls-'));
    manager = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(path.join(dir, 'mesh')) });
    otherManager = new CertificateManager({ ca: await CertificateAuthority.loadOrCreate(path.join(dir, 'other')) });
    const serverCert = await manager.issueServerCertificate();
    server = new grpc.Server();
    server.addService(echoService, {
      Echo: (c: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        const raw = c.getAuthContext().sslPeerCertificate?.raw;
        peerCommonNames.push(raw ? commonNameFromCertificate(raw) : '(none)');
        cb(null, Buffer.concat([Buffer.from('pong:'), c.request]));
      },
    });
    const creds = grpc.ServerCredentials.createSsl(
      Buffer.from(manager.caPem),
      [{ cert_chain: Buffer.from(serverCert.certPem), private_key: Buffer.from(serverCert.keyPem) }],
      true,
    );
    port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('localhost:0', creds, (err, p) => (err ? reject(err) : resolve(p))),
    );
  });

  after(async () => {
    await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
    manager.stop();
    otherManager.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('completes a call with a proxy client certificate, and the server reads the proxy identity from the peer certificate', async () => {
    const client = await manager.issueProxyCertificate(UUID, 'bookstore', 'bookstore-v1', 600);
    const reply = await call(port, client, manager.caPem);
    assert.equal(reply.toString(), 'pong:ping');
    assert.equal(peerCommonNames.length, 1);
    const proxy = parseCommonName(peerCommonNames[0]);
    assert.equal(proxy.uuid, UUID);
    assert.equal(proxy.identity, serviceIdentity('bookstore', 'bookstore-v1'));
  });

  it('also accepts a service certificate (usage both) as a client certificate', async () => {
    const svc = await manager.getServiceCertificate(serviceIdentity('bookstore', 'bookstore-v2'));
    assert.equal((await call(port, svc, manager.caPem)).toString(), 'pong:ping');
  });

  it('refuses a client certificate from another CA', async () => {
    const before = peerCommonNames.length;
    const foreign = await otherManager.issueProxyCertificate(UUID, 'bookstore', 'bookstore-v1', 600);
    await assert.rejects(call(port, foreign, manager.caPem), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE);
    assert.equal(peerCommonNames.length, before, 'the handler never ran');
  });

  it('refuses a server whose certificate is from another CA', async () => {
    const client = await manager.issueProxyCertificate(UUID, 'bookstore', 'bookstore-v1', 600);
    await assert.rejects(call(port, client, otherManager.caPem), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE);
  });
});
