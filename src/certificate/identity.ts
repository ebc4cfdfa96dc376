import 'reflect-metadata';
import { webcrypto } from 'node:crypto';
import * as x509 from '@peculiar/x509';
import { identityParts, TRUST_DOMAIN, type ServiceIdentity } from '../proxy/types.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

/**
 * The CommonName of a service certificate (the one served over SDS as `service-cert`):
 * `<serviceaccount>.<namespace>.cluster.local`, as OSM names it.
 */
export function serviceCertificateCommonName(identity: ServiceIdentity): string {
  const { namespace, serviceAccount } = identityParts(identity);
  return `${serviceAccount}.${namespace}.${TRUST_DOMAIN}`;
}

/**
 * The SPIFFE ID of a service identity, `spiffe://cluster.local/ns/<namespace>/sa/<serviceaccount>`
 * (SPIFFE ID specification, with the Kubernetes path convention used by Istio and OSM); it goes
 * in the certificate as a URI Subject Alternative Name (X.509-SVID specification §2).
 */
export function spiffeId(identity: ServiceIdentity): string {
  const { namespace, serviceAccount } = identityParts(identity);
  return `spiffe://${TRUST_DOMAIN}/ns/${namespace}/sa/${serviceAccount}`;
}

/**
 * Parses a certificate given as DER bytes (e.g. grpc-js
 * `call.getAuthContext().sslPeerCertificate?.raw`) or as PEM text.
 * @throws Error when the input is not an X.509 certificate.
 */
export function parseCertificate(derOrPem: Uint8Array | string): x509.X509Certificate {
  try {
    return new x509.X509Certificate(typeof derOrPem === 'string' ? derOrPem : Buffer.from(derOrPem));
  } catch (e) {
    throw new Error(`not an X.509 certificate: ${(e as Error).message}`);
  }
}

/**
 * The subject CommonName (RFC 5280 §4.1.2.6, X.520 id-at-commonName 2.5.4.3) of a certificate,
 * DER bytes or PEM. When the subject holds several CNs, the last one (most specific) is returned.
 * @throws Error when the input is not a certificate or its subject has no CommonName.
 */
export function commonNameFromCertificate(derOrPem: Uint8Array | string): string {
  const cert = parseCertificate(derOrPem);
  const cns = cert.subjectName.getField('CN');
  const cn = cns[cns.length - 1];
  if (!cn) throw new Error(`certificate "${cert.subject}" has no CommonName`);
  return cn;
}

/** Subject Alternative Names of the given GeneralName type (RFC 5280 §4.2.1.6), in certificate order. */
function sansOfType(derOrPem: Uint8Array | string, type: x509.GeneralNameType): string[] {
  const cert = parseCertificate(derOrPem);
  const ext = cert.getExtension(x509.SubjectAlternativeNameExtension);
  if (!ext) return [];
  return ext.names.items.filter((n) => n.type === type).map((n) => n.value);
}

/**
 * The uniformResourceIdentifier Subject Alternative Names (e.g. SPIFFE IDs) of a certificate,
 * DER bytes or PEM, in certificate order; empty when there are none.
 * @throws Error when the input is not a certificate.
 */
export function uriSansFromCertificate(derOrPem: Uint8Array | string): string[] {
  return sansOfType(derOrPem, 'url');
}

/**
 * The dNSName Subject Alternative Names of a certificate, DER bytes or PEM; empty when none.
 * @throws Error when the input is not a certificate.
 */
export function dnsSansFromCertificate(derOrPem: Uint8Array | string): string[] {
  return sansOfType(derOrPem, 'dns');
}
