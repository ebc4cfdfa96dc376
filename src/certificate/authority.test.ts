import 'reflect-metadata';
import assert from 'node:assert/strict';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { chmod, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import { CA_CERT_FILE, CA_KEY_FILE, CertificateAuthority, ROOT_COMMON_NAME, ROOT_VALIDITY_SECONDS } from './authority.js';

const dirs: string[] = [];
async function tempDir(): Promise<string> {
  const d = await mkdtemp(path.join(tmpdir(), 'trellis-ca-'));
  dirs.push(d);
  return d;
}
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

/** A clock on a whole second, so that X.509 times (second precision) compare exactly. */
const NOW = Math.floor(Date.now() / 1000) * 1000;
const clock = { now: () => NOW };

function ekus(cert: x509.X509Certificate): string[] {
  return [...(cert.getExtension(x509.ExtendedKeyUsageExtension)?.usages ?? [])].map(String).sort();
}

describe('CertificateAuthority.loadOrCreate', () => {
  it('creates a P-256 root CA with restrictive file modes, and loads the same root on the next call', async () => {
    const stateDir = path.join(await tempDir(), 'state');
    const ca1 = await CertificateAuthority.loadOrCreate(stateDir, { clock });
    assert.equal((await stat(stateDir)).mode & 0o777, 0o700);
    assert.equal((await stat(path.join(stateDir, CA_CERT_FILE))).mode & 0o777, 0o644);
    assert.equal((await stat(path.join(stateDir, CA_KEY_FILE))).mode & 0o777, 0o600);
    assert.equal(await readFile(path.join(stateDir, CA_CERT_FILE), 'utf8'), ca1.caPem);

    const root = new x509.X509Certificate(ca1.caPem);
    assert.deepEqual(root.subjectName.getField('CN'), [ROOT_COMMON_NAME]);
    assert.equal(root.subject, root.issuer);
    assert.ok(await root.isSelfSigned());
    const bc = root.getExtension(x509.BasicConstraintsExtension);
    assert.ok(bc?.ca && bc.critical);
    const ku = root.getExtension(x509.KeyUsagesExtension);
    assert.ok(ku && ku.critical);
    assert.ok(ku.usages & x509.KeyUsageFlags.keyCertSign);
    assert.ok(ku.usages & x509.KeyUsageFlags.cRLSign);
    assert.equal(root.notAfter.getTime(), NOW + ROOT_VALIDITY_SECONDS * 1000);
    assert.deepEqual(root.publicKey.algorithm, { name: 'ECDSA', namedCurve: 'P-256' });

    const issued = await ca1.issue({ commonName: 'before-restart', validitySeconds: 3600, usage: 'both' });
    const ca2 = await CertificateAuthority.loadOrCreate(stateDir, { clock });
    assert.equal(ca2.caPem, ca1.caPem);
    const leaf = new x509.X509Certificate(issued.certPem);
    assert.ok(await leaf.verify({ publicKey: ca2.certificate.publicKey, date: new Date(NOW) }), 'issued before restart verifies after');
    const afterRestart = new x509.X509Certificate((await ca2.issue({ commonName: 'after', validitySeconds: 60, usage: 'client' })).certPem);
    assert.ok(await afterRestart.verify({ publicKey: root.publicKey, date: new Date(NOW) }));
  });

  it('refuses a corrupt key file, naming it, and leaves both files untouched', async () => {
    const stateDir = await tempDir();
    await CertificateAuthority.loadOrCreate(stateDir, { clock });
    const keyPath = path.join(stateDir, CA_KEY_FILE);
    const certBefore = await readFile(path.join(stateDir, CA_CERT_FILE), 'utf8');
    await writeFile(keyPath, '-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n');
    await assert.rejects(CertificateAuthority.loadOrCreate(stateDir, { clock }), (e: Error) => e.message.includes(keyPath));
    assert.match(await readFile(keyPath, 'utf8'), /bm90IGEga2V5/);
    assert.equal(await readFile(path.join(stateDir, CA_CERT_FILE), 'utf8'), certBefore);
  });

  it('refuses a corrupt certificate file, naming it', async () => {
    const stateDir = await tempDir();
    await CertificateAuthority.loadOrCreate(stateDir, { clock });
    const certPath = path.join(stateDir, CA_CERT_FILE);
    await writeFile(certPath, 'garbage\n');
    await assert.rejects(CertificateAuthority.loadOrCreate(stateDir, { clock }), (e: Error) => e.message.includes(certPath));
  });

  it('refuses a key that does not match the certificate, naming both files', async () => {
    const a = await tempDir();
    const b = await tempDir();
    await CertificateAuthority.loadOrCreate(a, { clock });
    await CertificateAuthority.loadOrCreate(b, { clock });
    await writeFile(path.join(a, CA_KEY_FILE), await readFile(path.join(b, CA_KEY_FILE)));
    await assert.rejects(
      CertificateAuthority.loadOrCreate(a, { clock }),
      (e: Error) => e.message.includes(path.join(a, CA_KEY_FILE)) && e.message.includes(path.join(a, CA_CERT_FILE)) && /does not match/.test(e.message),
    );
  });

  it('refuses to create a new root when only one of the two files is there', async () => {
    const stateDir = await tempDir();
    await CertificateAuthority.loadOrCreate(stateDir, { clock });
    await rm(path.join(stateDir, CA_CERT_FILE));
    await assert.rejects(CertificateAuthority.loadOrCreate(stateDir, { clock }), (e: Error) =>
      e.message.includes(path.join(stateDir, CA_CERT_FILE)),
    );
  });

  it('refuses a CA key file that group or others can read, naming the file and its mode', async () => {
    for (const mode of [0o644, 0o640, 0o604]) {
      const stateDir = await tempDir();
      await CertificateAuthority.loadOrCreate(stateDir, { clock });
      const keyPath = path.join(stateDir, CA_KEY_FILE);
      await chmod(keyPath, mode);
      await assert.rejects(CertificateAuthority.loadOrCreate(stateDir, { clock }), (e: Error) => e.message.includes(keyPath) && e.message.includes(`mode 0${mode.toString(8)}`) && /chmod 600/.test(e.message));
      await chmod(keyPath, 0o600);
      await CertificateAuthority.loadOrCreate(stateDir, { clock });
    }
  });

  it('refuses an expired root, naming the file', async () => {
    const stateDir = await tempDir();
    await CertificateAuthority.loadOrCreate(stateDir, { clock });
    const later = { now: () => NOW + (ROOT_VALIDITY_SECONDS + 1) * 1000 };
    await assert.rejects(CertificateAuthority.loadOrCreate(stateDir, { clock: later }), (e: Error) =>
      e.message.includes(path.join(stateDir, CA_CERT_FILE)) && /expired/.test(e.message),
    );
  });
});

describe('CertificateAuthority.issue', () => {
  it('issues a leaf that chains to the root, with the requested CN, SANs, usage and validity', async () => {
    const ca = await CertificateAuthority.loadOrCreate(await tempDir(), { clock });
    const issued = await ca.issue({
      commonName: 'bookstore-v1.bookstore.cluster.local',
      dnsNames: ['bookstore-v1.bookstore.cluster.local'],
      ipAddresses: ['10.1.2.3', '::1'],
      uris: ['spiffe://cluster.local/ns/bookstore/sa/bookstore-v1'],
      validitySeconds: 7200,
      usage: 'server',
    });
    const cert = new x509.X509Certificate(issued.certPem);
    assert.ok(await cert.verify({ publicKey: ca.certificate.publicKey, date: new Date(NOW) }));
    assert.equal(cert.issuer, ca.certificate.subject);
    assert.deepEqual(cert.subjectName.getField('CN'), ['bookstore-v1.bookstore.cluster.local']);
    assert.equal(issued.commonName, 'bookstore-v1.bookstore.cluster.local');
    const san = cert.getExtension(x509.SubjectAlternativeNameExtension);
    assert.deepEqual(
      san?.names.toJSON().map((n) => `${n.type}:${n.value}`),
      ['dns:bookstore-v1.bookstore.cluster.local', 'ip:10.1.2.3', 'ip:::1', 'url:spiffe://cluster.local/ns/bookstore/sa/bookstore-v1'],
    );
    assert.deepEqual(ekus(cert), [x509.ExtendedKeyUsage.serverAuth]);
    assert.equal(cert.getExtension(x509.BasicConstraintsExtension)?.ca, false);
    assert.equal(cert.notBefore.getTime(), NOW - 60_000);
    assert.equal(cert.notAfter.getTime(), NOW + 7200_000);
    assert.deepEqual([issued.notBefore, issued.notAfter], [cert.notBefore, cert.notAfter]);
    assert.equal(issued.serialNumber, cert.serialNumber.toLowerCase());
    assert.equal(issued.caPem, ca.caPem);
    assert.deepEqual(cert.publicKey.algorithm, { name: 'ECDSA', namedCurve: 'P-256' });
    // The key is the certificate's.
    const spki = createPublicKey(createPrivateKey(issued.keyPem)).export({ type: 'spki', format: 'der' });
    assert.ok(spki.equals(Buffer.from(cert.publicKey.rawData)));
  });

  it('sets the extended key usages of client and both, omits SANs when none, and gives distinct serials', async () => {
    const ca = await CertificateAuthority.loadOrCreate(await tempDir(), { clock });
    const client = await ca.issue({ commonName: 'c', validitySeconds: 60, usage: 'client' });
    const both = await ca.issue({ commonName: 'b', validitySeconds: 60, usage: 'both' });
    const c = new x509.X509Certificate(client.certPem);
    assert.deepEqual(ekus(c), [x509.ExtendedKeyUsage.clientAuth]);
    assert.equal(c.getExtension(x509.SubjectAlternativeNameExtension), null);
    assert.deepEqual(ekus(new x509.X509Certificate(both.certPem)), [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth].sort());
    assert.notEqual(client.serialNumber, both.serialNumber);
  });

  it('rejects an empty CommonName and a non-positive or fractional validity', async () => {
    const ca = await CertificateAuthority.loadOrCreate(await tempDir(), { clock });
    await assert.rejects(ca.issue({ commonName: '', validitySeconds: 60, usage: 'client' }), /commonName/);
    for (const v of [0, -1, 1.5, Number.NaN]) {
      await assert.rejects(ca.issue({ commonName: 'x', validitySeconds: v, usage: 'client' }), /validitySeconds/);
    }
  });

  it('does not issue beyond the root notAfter', async () => {
    const ca = await CertificateAuthority.loadOrCreate(await tempDir(), { clock });
    const issued = await ca.issue({ commonName: 'x', validitySeconds: ROOT_VALIDITY_SECONDS + 86400, usage: 'client' });
    assert.equal(issued.notAfter.getTime(), ca.certificate.notAfter.getTime());
  });
});
