import 'reflect-metadata';
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { webcrypto } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import * as x509 from '@peculiar/x509';
import { SnapshotCache, ResourceInterner, buildProxySnapshot } from '../src/xds/cache/snapshot-cache.js';
import { encodeAny } from '../src/api/codec.js';
import { TypeUrl } from '../src/api/type-urls.js';
import { AdsServer, authenticateFromNodeId, authenticateFromPeerCertificate } from '../src/xds/server/ads-server.js';
import type { Proxy } from '../src/proxy/types.js';
import { AdsTestClient, TEST_NODE_ID } from './helpers/ads-client.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const CERT_CN = '0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9.sidecar.bookstore.bookstore.cluster.local';

interface Issued {
  certPem: Buffer;
  keyPem: Buffer;
}

async function keyPem(key: CryptoKey): Promise<Buffer> {
  const der = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', key as webcrypto.CryptoKey));
  return Buffer.from(x509.PemConverter.encode(der, 'PRIVATE KEY'));
}

/** A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate with the given CN. */
async function makePki(clientCn: string): Promise<{ ca: Buffer; server: Issued; client: Issued }> {
  const caKeys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    name: 'CN=trellis test CA',
    keys: caKeys,
    signingAlgorithm: ALG,
    extensions: [new x509.BasicConstraintsExtension(true, 0, true), new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true)],
  });
  const issue = async (cn: string, san: x509.JsonGeneralName[]): Promise<Issued> => {
    const keys = (await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify'])) as CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.create({
      subject: `CN=${cn}`,
      issuer: ca.subject,
      publicKey: keys.publicKey,
      signingKey: caKeys.privateKey,
      signingAlgorithm: ALG,
      extensions: [new x509.BasicConstraintsExtension(false, undefined, true), new x509.SubjectAlternativeNameExtension(san)],
    });
    return { certPem: Buffer.from(cert.toString('pem')), keyPem: await keyPem(keys.privateKey) };
  };
  return {
    ca: Buffer.from(ca.toString('pem')),
    server: await issue('trellis-ads', [{ type: 'ip', value: '127.0.0.1' }, { type: 'dns', value: 'localhost' }]),
    client: await issue(clientCn, [{ type: 'dns', value: 'client.example' }]),
  };
}

describe('ADS server over mTLS and plaintext listeners', () => {
  let pki: Awaited<ReturnType<typeof makePki>>;
  let server: AdsServer;
  let mtlsPort: number;
  let plainPort: number;
  const opened: Proxy[] = [];
  const cache = new SnapshotCache();
  const clients: AdsTestClient[] = [];

  before(async () => {
    pki = await makePki(CERT_CN);
    server = new AdsServer({
      watcher: cache,
      hooks: {
        onStreamOpen: (proxy) => {
          opened.push(proxy);
          const name = `cluster-of-${proxy.identity}`;
          cache.setSnapshot(
            proxy.uuid,
            buildProxySnapshot(new Map([[TypeUrl.Cluster, [{ name, resource: encodeAny(TypeUrl.Cluster, { name }) }]]]), new ResourceInterner()),
          );
        },
      },
    });
    mtlsPort = await server.start({
      address: '127.0.0.1:0',
      credentials: grpc.ServerCredentials.createSsl(pki.ca, [{ private_key: pki.server.keyPem, cert_chain: pki.server.certPem }], true),
      authenticate: authenticateFromPeerCertificate,
    });
    plainPort = await server.start({
      address: '127.0.0.1:0',
      credentials: grpc.ServerCredentials.createInsecure(),
      authenticate: authenticateFromNodeId,
    });
  });

  after(async () => {
    for (const c of clients) c.close();
    await server.stop(1000);
  });

  it('identifies the proxy by its certificate CN on the mTLS listener, not by node.id', async () => {
    const client = new AdsTestClient(
      `127.0.0.1:${mtlsPort}`,
      grpc.credentials.createSsl(pki.ca, pki.client.keyPem, pki.client.certPem),
    );
    clients.push(client);
    const s = client.openStream(TEST_NODE_ID); // claims another identity in node.id
    s.request(TypeUrl.Cluster);
    const r = await s.next();
    assert.equal(r.type_url, TypeUrl.Cluster);
    assert.equal(opened.at(-1)?.commonName, CERT_CN);
    assert.equal(opened.at(-1)?.uuid, '0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9');
    const info = server.streams().find((x) => x.proxy.commonName === CERT_CN);
    assert.equal(info?.listener, '127.0.0.1:0');
    s.cancel();
  });

  it('identifies the proxy by node.id on the plaintext listener of the same server', async () => {
    const client = new AdsTestClient(`127.0.0.1:${plainPort}`);
    clients.push(client);
    const s = client.openStream(TEST_NODE_ID);
    s.request(TypeUrl.Cluster);
    await s.next();
    assert.equal(opened.at(-1)?.commonName, TEST_NODE_ID);
    s.cancel();
  });

  it('authenticateFromPeerCertificate rejects a stream without a peer certificate', () => {
    const call = { getAuthContext: () => ({ transportSecurityType: 'insecure' }) } as unknown as Parameters<
      typeof authenticateFromPeerCertificate
    >[0];
    assert.throws(() => authenticateFromPeerCertificate(call), /no client certificate/);
  });
});
