import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { authenticateFromPeerCertificate } from './ads-server.js';
import type { AdsCall } from './stream-common.js';

/** A call whose TLS session has this peer certificate (the shape of Node's `getPeerCertificate()`). */
function callWith(peer: Record<string, unknown> | undefined): AdsCall {
  return { getAuthContext: () => (peer ? { transportSecurityType: 'ssl', sslPeerCertificate: peer } : {}) } as unknown as AdsCall;
}

const CN = '6ba7b810-9dad-11d1-80b4-00c04fd430c8.sidecar.bookbuyer.bookbuyer.cluster.local';

describe('authenticateFromPeerCertificate', () => {
  it('is the verified proxy of the certificate\'s CommonName', () => {
    const proxy = authenticateFromPeerCertificate(callWith({ raw: Buffer.from([1]), subject: { CN, O: 'Open Service Mesh' } }));
    assert.equal(proxy.identity, 'bookbuyer/bookbuyer');
    assert.equal(proxy.uuid, '6ba7b810-9dad-11d1-80b4-00c04fd430c8');
    assert.equal(proxy.verified, true);
  });

  it('refuses no certificate, one without a CommonName, and one with several', () => {
    assert.throws(() => authenticateFromPeerCertificate(callWith(undefined)), /^Error: no client certificate on the stream \(mTLS required\)$/);
    assert.throws(() => authenticateFromPeerCertificate(callWith({ raw: Buffer.from([1]), subject: { O: 'x' } })), /^Error: client certificate has no CommonName$/);
    assert.throws(() => authenticateFromPeerCertificate(callWith({ raw: Buffer.from([1]), subject: { CN: [CN, 'other'] } })), /^Error: client certificate has 2 CommonNames: one is needed$/);
  });
});
