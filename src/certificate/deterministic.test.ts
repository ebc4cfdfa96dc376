import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createHash, createPrivateKey, createPublicKey, verify, type JsonWebKey } from 'node:crypto';
import { describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import type { ServiceIdentity } from '../proxy/types.js';
import { CertificateAuthority } from './authority.js';
import { deriveP256PrivateKey, jwkScalar, rfc6979Nonce, signP256Deterministic } from './deterministic.js';
import { CertificateManager, deterministicWindowStart, renewalTime } from './manager.js';

describe('deterministic ECDSA P-256', () => {
  // RFC 6979 appendix A.2.5: P-256, SHA-256, message "sample".
  const d = 0xc9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721n;

  it('computes the RFC 6979 nonce and signature of the published test vector', () => {
    const h1 = createHash('sha256').update('sample').digest();
    assert.equal(rfc6979Nonce(d, h1).toString(16), 'a6e3c57dd01abe90086538398355dd4c3b17aa873382b0f24d6129493d8aad60');
    assert.equal(
      signP256Deterministic(d, Buffer.from('sample')).toString('hex'),
      'efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716' + 'f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8',
    );
  });

  it('derives a usable key pair and signs what Node verifies', () => {
    const jwk = deriveP256PrivateKey(d, 'bookbuyer');
    assert.deepEqual(deriveP256PrivateKey(d, 'bookbuyer'), jwk, 'same label, same key');
    assert.notEqual(deriveP256PrivateKey(d, 'bookthief').d, jwk.d, 'another label, another key');
    const publicKey = createPublicKey(createPrivateKey({ key: jwk as JsonWebKey, format: 'jwk' }));
    const data = Buffer.from('to be signed');
    assert.ok(verify('sha256', data, { key: publicKey, dsaEncoding: 'ieee-p1363' }, signP256Deterministic(jwkScalar(jwk), data)));
  });
});

describe('CertificateAuthority from PEM and deterministic issuance', () => {
  const request = {
    commonName: 'bookbuyer.bookbuyer.cluster.local',
    dnsNames: ['bookbuyer.bookbuyer.cluster.local'],
    uris: ['spiffe://cluster.local/ns/bookbuyer/sa/bookbuyer'],
    validitySeconds: 3600,
    usage: 'both' as const,
  };

  it('round-trips the root through exportPem/fromPem', async () => {
    const ca = await CertificateAuthority.generate();
    const { certPem, keyPem } = ca.exportPem();
    assert.match(keyPem, /BEGIN PRIVATE KEY/);
    const again = await CertificateAuthority.fromPem(certPem, keyPem, 'secret osm-system/trellis-ca');
    assert.equal(again.caPem, ca.caPem);
    assert.deepEqual(again.exportPem(), ca.exportPem());
    await assert.rejects(CertificateAuthority.fromPem(certPem, 'garbage', 'secret osm-system/trellis-ca'), /secret osm-system\/trellis-ca ca-key\.pem/);
  });

  it('issues byte-identical, valid certificates from two copies of one root', async () => {
    const root = await CertificateAuthority.generate();
    const a = await CertificateAuthority.fromPem(root.exportPem().certPem, root.exportPem().keyPem, 'a');
    const b = await CertificateAuthority.fromPem(root.exportPem().certPem, root.exportPem().keyPem, 'b');
    const at = Date.UTC(2030, 0, 1);
    const ca = await a.issueDeterministic(request, at);
    const cb = await b.issueDeterministic(request, at);
    assert.equal(ca.certPem, cb.certPem);
    assert.equal(ca.keyPem, cb.keyPem);
    assert.equal(ca.serialNumber, cb.serialNumber);
    const cert = new x509.X509Certificate(ca.certPem);
    assert.ok(await cert.verify({ publicKey: root.certificate.publicKey, signatureOnly: true }), 'signed by the root');
    const spki = createPublicKey(createPrivateKey(ca.keyPem)).export({ type: 'spki', format: 'der' });
    assert.ok(spki.equals(Buffer.from(cert.publicKey.rawData)), 'the key matches the certificate');
    const other = await a.issueDeterministic(request, at + 1000);
    assert.notEqual(other.certPem, ca.certPem, 'another window, another certificate');
    assert.notEqual(other.keyPem, ca.keyPem);
  });

  it('makes two certificate managers on one root serve the same service certificate', async () => {
    const root = await CertificateAuthority.generate();
    const { certPem, keyPem } = root.exportPem();
    const managers = await Promise.all(
      ['a', 'b'].map(async (n) => new CertificateManager({ ca: await CertificateAuthority.fromPem(certPem, keyPem, n), validitySeconds: 3600, deterministic: true })),
    );
    const identity = 'bookbuyer/bookbuyer' as ServiceIdentity;
    const [x, y] = await Promise.all(managers.map((m) => m.getServiceCertificate(identity)));
    assert.equal(x.certPem, y.certPem);
    assert.equal(x.keyPem, y.keyPem);
    for (const m of managers) m.stop();
  });

  it('aligns windows so that renewal falls on the next window', () => {
    for (const validity of [3600, 86_400, 7]) {
      const now = Date.UTC(2031, 5, 6, 7, 8, 9);
      const start = deterministicWindowStart(now, validity);
      assert.ok(start <= now);
      const notAfter = new Date(start + validity * 1000);
      const next = renewalTime(start, notAfter);
      assert.ok(next > now, 'a fresh certificate is not already due');
      assert.equal(deterministicWindowStart(next, validity), next, 'renewal starts a new window');
      assert.equal(deterministicWindowStart(next - 1, validity), start);
    }
  });
});
