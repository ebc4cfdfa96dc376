import 'reflect-metadata';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, beforeEach, describe, it } from 'node:test';
import * as x509 from '@peculiar/x509';
import { parseCommonName, serviceIdentity, XDS_SERVER_SPIFFE_ID, type ServiceIdentity } from '../proxy/types.js';
import { CertificateAuthority, type IssueRequest } from './authority.js';
import { commonNameFromCertificate, dnsSansFromCertificate, uriSansFromCertificate } from './identity.js';
import { CertificateManager, MAX_CHECK_INTERVAL_MS, renewalTime, type Timers } from './manager.js';

/** A clock that moves only when told, and one-shot timers that fire only when the clock passes them. */
class FakeTimers implements Timers {
  private t: number;
  private nextId = 1;
  readonly pending = new Map<number, { fn: () => void; at: number }>();
  constructor(start: number) {
    this.t = start;
  }
  now(): number {
    return this.t;
  }
  setTimer(fn: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.pending.set(id, { fn, at: this.t + ms });
    return id;
  }
  clearTimer(handle: unknown): void {
    this.pending.delete(handle as number);
  }
  /** Moves the clock to `to`, firing every timer due on the way, in order. */
  advanceTo(to: number): void {
    for (;;) {
      const due = [...this.pending.entries()].filter(([, t]) => t.at <= to).sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      this.pending.delete(due[0]);
      this.t = Math.max(this.t, due[1].at);
      due[1].fn();
    }
    this.t = to;
  }
  /** Moves the clock without firing anything. */
  jumpTo(to: number): void {
    this.t = to;
  }
}

const START = Math.floor(Date.now() / 1000) * 1000;
const A = serviceIdentity('bookstore', 'bookstore-v1');
const B = serviceIdentity('bookstore', 'bookstore-v2');
const HOUR_S = 3600;

let dir: string;
before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'trellis-mgr-'));
});
after(() => rm(dir, { recursive: true, force: true }));

describe('CertificateManager', () => {
  let timers: FakeTimers;
  let ca: CertificateAuthority;
  let issued: IssueRequest[];
  let manager: CertificateManager;
  let rotated: ServiceIdentity[];

  beforeEach(async () => {
    timers = new FakeTimers(START);
    ca = await CertificateAuthority.loadOrCreate(dir, { clock: timers });
    issued = [];
    const issue = ca.issue.bind(ca);
    ca.issue = (request) => {
      issued.push(request);
      return issue(request);
    };
    manager = new CertificateManager({ ca, validitySeconds: HOUR_S, timers });
    rotated = [];
    manager.onRotated((id) => rotated.push(id));
  });

  it('issues a service certificate with CN <sa>.<ns>.cluster.local, the SPIFFE URI SAN, the CN as DNS SAN, usage both', async () => {
    const cert = await manager.getServiceCertificate(A);
    assert.equal(cert.commonName, 'bookstore-v1.bookstore.cluster.local');
    assert.equal(commonNameFromCertificate(cert.certPem), 'bookstore-v1.bookstore.cluster.local');
    assert.deepEqual(uriSansFromCertificate(cert.certPem), ['spiffe://cluster.local/ns/bookstore/sa/bookstore-v1']);
    assert.deepEqual(dnsSansFromCertificate(cert.certPem), ['bookstore-v1.bookstore.cluster.local']);
    const eku = new x509.X509Certificate(cert.certPem).getExtension(x509.ExtendedKeyUsageExtension);
    assert.deepEqual([...(eku?.usages ?? [])].map(String).sort(), [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth].sort());
    assert.equal(cert.notAfter.getTime(), START + HOUR_S * 1000);
    assert.equal(cert.caPem, ca.caPem);
    assert.ok(await new x509.X509Certificate(cert.certPem).verify({ publicKey: ca.certificate.publicKey, date: new Date(START) }));
    manager.stop();
  });

  it('caches per identity, and concurrent requests for one identity share one issuance', async () => {
    const [a1, a2, a3, b1] = await Promise.all([
      manager.getServiceCertificate(A),
      manager.getServiceCertificate(A),
      manager.getServiceCertificate(A),
      manager.getServiceCertificate(B),
    ]);
    assert.equal(issued.length, 2);
    assert.equal(a1, a2);
    assert.equal(a1, a3);
    assert.notEqual(a1.serialNumber, b1.serialNumber);
    assert.equal(await manager.getServiceCertificate(A), a1);
    assert.equal(issued.length, 2);
    assert.deepEqual(rotated, [], 'a first issuance is not a rotation');
    manager.stop();
  });

  it('rotates each certificate once less than a third of its validity remains, and tells listeners that identity only', async () => {
    const a1 = await manager.getServiceCertificate(A);
    timers.advanceTo(START + 10 * 60_000);
    const b1 = await manager.getServiceCertificate(B);
    const renewA = START + (HOUR_S * 1000 * 2) / 3;
    const renewB = START + 10 * 60_000 + (HOUR_S * 1000 * 2) / 3;
    assert.ok(timers.pending.size === 1, 'one timer pending');

    timers.advanceTo(renewA - 1000);
    await manager.settled();
    assert.deepEqual(rotated, [], 'nothing rotates early');
    assert.equal(manager.peekServiceCertificate(A), a1);

    timers.advanceTo(renewA);
    await manager.settled();
    assert.deepEqual(rotated, [A]);
    const a2 = await manager.getServiceCertificate(A);
    assert.notEqual(a2.serialNumber, a1.serialNumber);
    assert.ok(a1.notAfter.getTime() - timers.now() >= (HOUR_S * 1000) / 3 - 1000, 'rotated before expiry, with a third of the validity left');
    assert.equal(a2.notAfter.getTime(), renewA + HOUR_S * 1000);
    assert.equal(await manager.getServiceCertificate(B), b1);

    timers.advanceTo(renewB);
    await manager.settled();
    assert.deepEqual(rotated, [A, B]);
    assert.notEqual((await manager.getServiceCertificate(B)).serialNumber, b1.serialNumber);
    manager.stop();
  });

  it('keeps a timer no longer than the maximum check interval, and stop() clears it', async () => {
    await manager.getServiceCertificate(A);
    const [timer] = [...timers.pending.values()];
    assert.equal(timer.at, START + MAX_CHECK_INTERVAL_MS);
    manager.stop();
    assert.equal(timers.pending.size, 0);
    await assert.rejects(manager.getServiceCertificate(A), /stopped/);
  });

  it('applies a new validity to certificates issued afterwards; existing ones rotate on their own schedule', async () => {
    const a1 = await manager.getServiceCertificate(A);
    manager.setValidity(2 * HOUR_S);
    const b1 = await manager.getServiceCertificate(B);
    assert.equal(a1.notAfter.getTime(), START + HOUR_S * 1000);
    assert.equal(b1.notAfter.getTime(), START + 2 * HOUR_S * 1000);
    const renewA = renewalTime(START, a1.notAfter);
    timers.advanceTo(renewA);
    await manager.settled();
    assert.deepEqual(rotated, [A]);
    assert.equal((await manager.getServiceCertificate(A)).notAfter.getTime(), renewA + 2 * HOUR_S * 1000);
    assert.throws(() => manager.setValidity(0), /positive integer/);
    manager.stop();
  });

  it('rotates on demand a certificate asked for past its renewal time, even when the timer has not fired', async () => {
    const a1 = await manager.getServiceCertificate(A);
    timers.jumpTo(renewalTime(START, a1.notAfter) + 1000);
    const a2 = await manager.getServiceCertificate(A);
    assert.notEqual(a2.serialNumber, a1.serialNumber);
    assert.deepEqual(rotated, [A]);
    manager.stop();
  });

  it('keeps the current certificate when a rotation fails, and retries later', async () => {
    const a1 = await manager.getServiceCertificate(A);
    const issue = ca.issue;
    let fail = true;
    ca.issue = (request) => (fail ? Promise.reject(new Error('HSM unplugged')) : issue(request));
    const renewA = renewalTime(START, a1.notAfter);
    timers.advanceTo(renewA);
    await manager.settled();
    assert.deepEqual(rotated, []);
    assert.equal(await manager.getServiceCertificate(A), a1, 'still valid, so still served');
    fail = false;
    timers.advanceTo(renewA + 60_000);
    await manager.settled();
    assert.deepEqual(rotated, [A]);
    assert.notEqual(manager.peekServiceCertificate(A)?.serialNumber, a1.serialNumber);
    manager.stop();
  });

  it('isolates a throwing listener from the others', async () => {
    const seen: ServiceIdentity[] = [];
    manager.onRotated(() => {
      throw new Error('boom');
    });
    const off = manager.onRotated((id) => seen.push(id));
    const a1 = await manager.getServiceCertificate(A);
    timers.advanceTo(renewalTime(START, a1.notAfter));
    await manager.settled();
    assert.deepEqual(seen, [A]);
    off();
    timers.advanceTo(renewalTime(timers.now(), new Date(timers.now() + HOUR_S * 1000)) + 1000);
    await manager.settled();
    assert.deepEqual(seen, [A], 'unsubscribed');
    assert.deepEqual(rotated, [A, A]);
    manager.stop();
  });

  it('issues proxy xDS client certificates whose CN parses back, with client usage only', async () => {
    const uuid = '0b7d6a52-1f0c-4c4e-9f5e-2a8c2b7a9d11';
    const cert = await manager.issueProxyCertificate(uuid, 'bookstore', 'bookstore-v1', 600);
    const proxy = parseCommonName(commonNameFromCertificate(cert.certPem));
    assert.deepEqual(proxy, { uuid, kind: 'sidecar', identity: A, commonName: cert.commonName });
    const x = new x509.X509Certificate(cert.certPem);
    assert.deepEqual([...(x.getExtension(x509.ExtendedKeyUsageExtension)?.usages ?? [])].map(String), [x509.ExtendedKeyUsage.clientAuth]);
    assert.equal(cert.notAfter.getTime(), START + 600_000);
    const gw = await manager.issueProxyCertificate(uuid, 'ingress', 'gw', 600, 'gateway');
    assert.equal(parseCommonName(gw.commonName).kind, 'gateway');
    manager.stop();
  });

  it('issues the controller server certificate with default and requested SANs, server usage', async () => {
    const cert = await manager.issueServerCertificate({ dnsNames: ['trellis.example', 'localhost'], ipAddresses: ['10.0.0.9'] });
    assert.equal(commonNameFromCertificate(cert.certPem), 'trellis-controller');
    assert.deepEqual(dnsSansFromCertificate(cert.certPem), [
      'localhost',
      'osm-controller.osm-system.svc',
      'osm-controller.osm-system.svc.cluster.local',
      'trellis.example',
    ]);
    const x = new x509.X509Certificate(cert.certPem);
    const ips = x.getExtension(x509.SubjectAlternativeNameExtension)?.names.items.filter((n) => n.type === 'ip').map((n) => n.value);
    assert.deepEqual(ips, ['127.0.0.1', '::1', '10.0.0.9']);
    assert.deepEqual([...(x.getExtension(x509.ExtendedKeyUsageExtension)?.usages ?? [])].map(String), [x509.ExtendedKeyUsage.serverAuth]);
    assert.deepEqual(uriSansFromCertificate(cert.certPem), [XDS_SERVER_SPIFFE_ID]);
    manager.stop();
  });

  it("never issues a service certificate carrying the controller's URI SAN, even for names made to look like it", async () => {
    // `svc/osm-controller.osm-system` gets DNS SAN osm-controller.osm-system.svc.cluster.local, one of
    // the controller's DNS names: why proxies pin the URI SAN and not a DNS name.
    const lookalikes = [
      serviceIdentity('svc', 'osm-controller.osm-system'),
      serviceIdentity('osm-system', 'osm-controller'),
      serviceIdentity('osm-controller', 'osm-controller'),
    ];
    for (const identity of lookalikes) {
      const cert = await manager.getServiceCertificate(identity);
      const uris = uriSansFromCertificate(cert.certPem);
      assert.equal(uris.length, 1, identity);
      assert.match(uris[0], /^spiffe:\/\/cluster\.local\/ns\/[^/]+\/sa\/[^/]+$/, identity);
      assert.ok(!uris.includes(XDS_SERVER_SPIFFE_ID), identity);
    }
    assert.deepEqual(dnsSansFromCertificate((await manager.getServiceCertificate(lookalikes[0])).certPem), ['osm-controller.osm-system.svc.cluster.local']);
    manager.stop();
  });
});
