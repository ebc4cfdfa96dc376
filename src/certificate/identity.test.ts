import 'reflect-metadata';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import { serviceIdentity } from '../proxy/types.js';
import { CertificateAuthority } from './authority.js';
import {
  commonNameFromCertificate,
  dnsSansFromCertificate,
  serviceCertificateCommonName,
  spiffeId,
  uriSansFromCertificate,
} from './identity.js';

const identity = serviceIdentity('bookstore', 'bookstore-v1');

describe('service identity names', () => {
  it('names the service certificate <sa>.<ns>.cluster.local and the SPIFFE ID spiffe://cluster.local/ns/<ns>/sa/<sa>', () => {
    assert.equal(serviceCertificateCommonName(identity), 'bookstore-v1.bookstore.cluster.local');
    assert.equal(spiffeId(identity), 'spiffe://cluster.local/ns/bookstore/sa/bookstore-v1');
  });
});

describe('reading certificates', () => {
  let dir: string;
  let ca: CertificateAuthority;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'trellis-id-'));
    ca = await CertificateAuthority.loadOrCreate(dir);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('reads the CommonName and SANs from DER bytes and from PEM', async () => {
    const issued = await ca.issue({
      commonName: serviceCertificateCommonName(identity),
      dnsNames: [serviceCertificateCommonName(identity)],
      uris: [spiffeId(identity), 'spiffe://cluster.local/ns/bookstore/sa/other'],
      validitySeconds: 60,
      usage: 'both',
    });
    const der = new Uint8Array(new x509.X509Certificate(issued.certPem).rawData);
    for (const input of [der, issued.certPem]) {
      assert.equal(commonNameFromCertificate(input), 'bookstore-v1.bookstore.cluster.local');
      assert.deepEqual(uriSansFromCertificate(input), [spiffeId(identity), 'spiffe://cluster.local/ns/bookstore/sa/other']);
      assert.deepEqual(dnsSansFromCertificate(input), ['bookstore-v1.bookstore.cluster.local']);
    }
  });

  it('gives no URI SANs for a certificate without SANs', async () => {
    const issued = await ca.issue({ commonName: 'x', validitySeconds: 60, usage: 'client' });
    assert.deepEqual(uriSansFromCertificate(issued.certPem), []);
  });

  it('throws on bytes that are not a certificate', () => {
    assert.throws(() => commonNameFromCertificate(new Uint8Array([1, 2, 3])), /not an X\.509 certificate/);
    assert.throws(() => uriSansFromCertificate('nope'), /not an X\.509 certificate/);
  });
});
