import 'reflect-metadata';
import { createHash, createPrivateKey, createPublicKey, randomBytes, webcrypto } from 'node:crypto';
import { chmod, link, mkdir, readFile, stat, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import * as x509 from '@peculiar/x509';
import { deriveP256PrivateKey, deterministicSigningCrypto, jwkScalar } from './deterministic.js';

x509.cryptoProvider.set(webcrypto as unknown as Crypto);

/** WebCrypto parameters of every key Trellis generates: ECDSA on NIST P-256 (RFC 5480). */
const EC_KEY_ALGORITHM: EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };
/** Signature algorithm of every certificate Trellis signs: ecdsa-with-SHA256 (RFC 5758 §3.2). */
const SIGNING_ALGORITHM: EcdsaParams = { name: 'ECDSA', hash: 'SHA-256' };

/** File name of the root certificate (PEM) inside the state directory; mode 0644. */
export const CA_CERT_FILE = 'ca.pem';
/** File name of the root private key (PKCS#8 PEM) inside the state directory; mode 0600. */
export const CA_KEY_FILE = 'ca-key.pem';
/** Subject CommonName of the root certificate Trellis creates. */
export const ROOT_COMMON_NAME = 'trellis-mesh-root';
/** Validity of a newly created root certificate, in seconds (10 years of 365 days). */
export const ROOT_VALIDITY_SECONDS = 10 * 365 * 24 * 60 * 60;
/** How far a leaf certificate's notBefore is set in the past to tolerate clock skew, in ms. */
export const NOT_BEFORE_BACKDATE_MS = 60_000;

/** A source of the current time, in ms since the Unix epoch (injectable for tests). */
export interface Clock {
  now(): number;
}

/** The system clock (`Date.now()`). */
export const systemClock: Clock = { now: () => Date.now() };

/**
 * What a certificate may be used for, written as the Extended Key Usage extension
 * (RFC 5280 §4.2.1.12): `client` = id-kp-clientAuth, `server` = id-kp-serverAuth, `both` = both.
 */
export type CertificateUsage = 'client' | 'server' | 'both';

/** A request to {@link CertificateAuthority.issue}. */
export interface IssueRequest {
  /** Subject CommonName (RFC 5280 §4.1.2.6, X.520 id-at-commonName). Must be non-empty. */
  commonName: string;
  /** Subject Alternative Names of type dNSName (RFC 5280 §4.2.1.6). */
  dnsNames?: readonly string[];
  /** Subject Alternative Names of type iPAddress, IPv4 dotted or IPv6 text form (RFC 5280 §4.2.1.6). */
  ipAddresses?: readonly string[];
  /** Subject Alternative Names of type uniformResourceIdentifier, e.g. a SPIFFE ID (RFC 5280 §4.2.1.6). */
  uris?: readonly string[];
  /** Lifetime from now, in seconds; a positive integer. Cut to the root's notAfter when longer. */
  validitySeconds: number;
  /** Extended Key Usage of the certificate. */
  usage: CertificateUsage;
}

/** A certificate issued by the mesh CA together with its private key. */
export interface IssuedCertificate {
  /** The leaf certificate, PEM (`-----BEGIN CERTIFICATE-----`). */
  readonly certPem: string;
  /** The leaf's ECDSA P-256 private key, PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, RFC 5958). */
  readonly keyPem: string;
  /** The root certificate that signed it, PEM: the trust anchor peers validate against. */
  readonly caPem: string;
  /** Serial number, lower-case hex without separators (RFC 5280 §4.1.2.2). */
  readonly serialNumber: string;
  /** Start of validity (already backdated by {@link NOT_BEFORE_BACKDATE_MS}). */
  readonly notBefore: Date;
  /** End of validity. */
  readonly notAfter: Date;
  /** Subject CommonName, as requested. */
  readonly commonName: string;
}

/** Options of {@link CertificateAuthority.loadOrCreate}. */
export interface CertificateAuthorityOptions {
  /** Clock used for validity periods; defaults to {@link systemClock}. */
  clock?: Clock;
}

/**
 * Trellis' built-in mesh certificate authority: one self-signed ECDSA P-256 root
 * (RFC 5280 profile: basicConstraints cA=TRUE critical, keyUsage keyCertSign|cRLSign critical)
 * that signs every leaf certificate of the mesh directly (no intermediates).
 *
 * The root and its key live in a state directory so that a restart keeps the same trust
 * anchor: every certificate issued before a restart still verifies after it.
 */
export class CertificateAuthority {
  private readonly clock: Clock;

  private constructor(
    private readonly rootCert: x509.X509Certificate,
    private readonly rootKey: CryptoKey,
    private readonly rootPem: string,
    clock: Clock,
    private readonly rootKeyPem: string,
  ) {
    this.clock = clock;
  }

  /**
   * Loads the root from `<stateDir>/ca.pem` and `<stateDir>/ca-key.pem`, or, when neither file
   * exists, creates a new root (CN {@link ROOT_COMMON_NAME}, valid {@link ROOT_VALIDITY_SECONDS} s)
   * and writes it there: the directory is created with mode 0700, `ca.pem` with 0644 and
   * `ca-key.pem` with 0600 (each written to a temporary file, then linked into place).
   * Existing files are never overwritten. Like OpenSSH with an unprotected private key, a key
   * file that group or others may read, write or execute (any of mode 0077) is refused: whoever
   * reads it can sign a certificate for any identity of the mesh.
   * @param stateDir directory holding the CA state.
   * @throws Error naming the file and its mode when the key file is open to group or others;
   *   naming the file when exactly one of the two files exists, when a file is not a
   *   PEM certificate / private key, when the certificate is not a CA certificate, when the key is
   *   not ECDSA P-256, when the key does not match the certificate, or when the root has expired.
   */
  static async loadOrCreate(stateDir: string, options: CertificateAuthorityOptions = {}): Promise<CertificateAuthority> {
    const clock = options.clock ?? systemClock;
    const certPath = path.join(stateDir, CA_CERT_FILE);
    const keyPath = path.join(stateDir, CA_KEY_FILE);
    const certText = await readIfExists(certPath);
    const keyText = await readIfExists(keyPath);
    if (certText === undefined && keyText === undefined) {
      return CertificateAuthority.create(stateDir, clock);
    }
    if (certText === undefined) {
      throw new Error(`CA state: ${certPath} is missing but ${keyPath} exists; restore it or remove both to create a new root`);
    }
    if (keyText === undefined) {
      throw new Error(`CA state: ${keyPath} is missing but ${certPath} exists; restore it or remove both to create a new root`);
    }
    await checkKeyFileMode(keyPath);
    return CertificateAuthority.load(certPath, certText, keyPath, keyText, clock);
  }

  private static async create(stateDir: string, clock: Clock): Promise<CertificateAuthority> {
    const { cert, keys, certPem, keyPem } = await CertificateAuthority.generateRoot(clock);
    await mkdir(stateDir, { recursive: true, mode: 0o700 });
    // Key first: a crash between the two writes leaves only the key, which loadOrCreate reports.
    await writeFileAtomic(path.join(stateDir, CA_KEY_FILE), keyPem, 0o600);
    await writeFileAtomic(path.join(stateDir, CA_CERT_FILE), certPem, 0o644);
    return new CertificateAuthority(cert, keys.privateKey, certPem, clock, keyPem);
  }

  /**
   * Creates a new root in memory (CN {@link ROOT_COMMON_NAME}, valid {@link ROOT_VALIDITY_SECONDS} s),
   * persisted nowhere: the caller stores {@link exportPem} where it wants (e.g. a Kubernetes Secret).
   */
  static async generate(options: CertificateAuthorityOptions = {}): Promise<CertificateAuthority> {
    const clock = options.clock ?? systemClock;
    const { cert, keys, certPem, keyPem } = await CertificateAuthority.generateRoot(clock);
    return new CertificateAuthority(cert, keys.privateKey, certPem, clock, keyPem);
  }

  /**
   * Builds the CA from a root certificate and its private key, both PEM (as {@link exportPem}
   * gives them), with the checks of {@link loadOrCreate}.
   * @param source names where the PEMs come from, in error messages (e.g. `secret osm-system/trellis-ca`).
   * @throws Error naming `source` when the certificate or key is invalid, mismatched or expired.
   */
  static async fromPem(certPem: string, keyPem: string, source: string, options: CertificateAuthorityOptions = {}): Promise<CertificateAuthority> {
    return CertificateAuthority.load(`${source} ${CA_CERT_FILE}`, certPem, `${source} ${CA_KEY_FILE}`, keyPem, options.clock ?? systemClock);
  }

  private static async generateRoot(clock: Clock): Promise<{ cert: x509.X509Certificate; keys: CryptoKeyPair; certPem: string; keyPem: string }> {
    const keys = (await webcrypto.subtle.generateKey(EC_KEY_ALGORITHM, true, ['sign', 'verify'])) as CryptoKeyPair;
    const now = clock.now();
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: randomSerialNumber(),
      name: [{ CN: [ROOT_COMMON_NAME] }, { O: ['trellis'] }],
      notBefore: new Date(now - NOT_BEFORE_BACKDATE_MS),
      notAfter: new Date(now + ROOT_VALIDITY_SECONDS * 1000),
      keys,
      signingAlgorithm: SIGNING_ALGORITHM,
      extensions: [
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign | x509.KeyUsageFlags.digitalSignature, true),
        await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      ],
    });
    const certPem = cert.toString('pem') + '\n';
    const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
    const keyPem = x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') + '\n';
    return { cert, keys, certPem, keyPem };
  }

  private static async load(
    certPath: string,
    certText: string,
    keyPath: string,
    keyText: string,
    clock: Clock,
  ): Promise<CertificateAuthority> {
    let cert: x509.X509Certificate;
    try {
      if (!certText.includes('-----BEGIN CERTIFICATE-----')) throw new Error('no PEM CERTIFICATE block');
      cert = new x509.X509Certificate(certText);
    } catch (e) {
      throw new Error(`CA state: ${certPath} is not a valid PEM certificate: ${(e as Error).message}`);
    }
    const bc = cert.getExtension(x509.BasicConstraintsExtension);
    if (!bc?.ca) throw new Error(`CA state: ${certPath} is not a CA certificate (basicConstraints cA is not TRUE)`);
    if (cert.notAfter.getTime() <= clock.now()) {
      throw new Error(`CA state: ${certPath} expired at ${cert.notAfter.toISOString()}`);
    }

    let pkcs8: Buffer;
    let spki: Buffer;
    try {
      const keyObject = createPrivateKey({ key: keyText, format: 'pem' });
      if (keyObject.asymmetricKeyType !== 'ec' || keyObject.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
        throw new Error(`want an ECDSA P-256 key, got ${keyObject.asymmetricKeyType ?? 'unknown'} ${keyObject.asymmetricKeyDetails?.namedCurve ?? ''}`.trim());
      }
      pkcs8 = keyObject.export({ type: 'pkcs8', format: 'der' });
      spki = createPublicKey(keyObject).export({ type: 'spki', format: 'der' });
    } catch (e) {
      throw new Error(`CA state: ${keyPath} is not a valid PEM private key: ${(e as Error).message}`);
    }
    if (!spki.equals(Buffer.from(cert.publicKey.rawData))) {
      throw new Error(`CA state: the key in ${keyPath} does not match the certificate in ${certPath}`);
    }
    const key = await webcrypto.subtle.importKey('pkcs8', pkcs8, EC_KEY_ALGORITHM, false, ['sign']);
    const rootPem = cert.toString('pem') + '\n';
    const rootKeyPem = x509.PemConverter.encode(new Uint8Array(pkcs8), 'PRIVATE KEY') + '\n';
    return new CertificateAuthority(cert, key, rootPem, clock, rootKeyPem);
  }

  /** The root certificate, PEM: the trust anchor of the mesh (Envoy `trusted_ca`, gRPC root certs). */
  get caPem(): string {
    return this.rootPem;
  }

  /** The root certificate, parsed. */
  get certificate(): x509.X509Certificate {
    return this.rootCert;
  }

  /** The root certificate and its private key (PKCS#8), PEM: what {@link fromPem} takes back. */
  exportPem(): { certPem: string; keyPem: string } {
    return { certPem: this.rootPem, keyPem: this.rootKeyPem };
  }

  /**
   * Issues a leaf certificate (RFC 5280 profile) with a fresh ECDSA P-256 key, signed by the root:
   * subject CN = `commonName`, SANs as requested (extension omitted when there are none),
   * basicConstraints cA=FALSE (critical), keyUsage digitalSignature (critical), the Extended Key
   * Usage of `usage`, subject and authority key identifiers, a random positive 127-bit serial.
   * Validity runs from now − {@link NOT_BEFORE_BACKDATE_MS} to now + `validitySeconds`, cut to the
   * root's notAfter.
   * @throws Error when `commonName` is empty or `validitySeconds` is not a positive integer.
   */
  async issue(request: IssueRequest): Promise<IssuedCertificate> {
    if (!request.commonName) throw new Error('issue: commonName is empty');
    if (!Number.isInteger(request.validitySeconds) || request.validitySeconds <= 0) {
      throw new Error(`issue: validitySeconds must be a positive integer, got ${request.validitySeconds}`);
    }
    const now = this.clock.now();
    const keys = (await webcrypto.subtle.generateKey(EC_KEY_ALGORITHM, true, ['sign', 'verify'])) as CryptoKeyPair;
    return this.build(request, keys, randomSerialNumber(), now, webcrypto);
  }

  /**
   * Issues a certificate like {@link issue}, but as a pure function of the root, `request` and
   * `issuedAt`: the key is derived from the root key and the request, the serial number from the
   * request, validity runs from `issuedAt` − {@link NOT_BEFORE_BACKDATE_MS}, and the signature
   * uses RFC 6979 nonces (see `deterministic.ts`). Controller replicas that share the root issue
   * byte-identical certificates for the same identity and window, so proxies get the same SDS
   * resources (and versions) from any replica.
   * @param issuedAt start of validity (before backdating), ms since the epoch; callers quantise it.
   * @throws Error as {@link issue}.
   */
  async issueDeterministic(request: IssueRequest, issuedAt: number): Promise<IssuedCertificate> {
    if (!request.commonName) throw new Error('issue: commonName is empty');
    if (!Number.isInteger(request.validitySeconds) || request.validitySeconds <= 0) {
      throw new Error(`issue: validitySeconds must be a positive integer, got ${request.validitySeconds}`);
    }
    const label = JSON.stringify([request.commonName, request.dnsNames ?? [], request.ipAddresses ?? [], request.uris ?? [], request.validitySeconds, request.usage, issuedAt]);
    const caScalar = jwkScalar(createPrivateKey({ key: this.rootKeyPem, format: 'pem' }).export({ format: 'jwk' }));
    const jwk = deriveP256PrivateKey(caScalar, label);
    const privateKey = await webcrypto.subtle.importKey('jwk', jwk, EC_KEY_ALGORITHM, true, ['sign']);
    const publicKey = await webcrypto.subtle.importKey('jwk', { kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y, ext: true }, EC_KEY_ALGORITHM, true, ['verify']);
    const serial = createHash('sha256').update(`trellis serial\0${label}`).digest().subarray(0, 16);
    serial[0] = (serial[0] & 0x7f) | 0x01;
    return this.build(request, { privateKey, publicKey }, serial.toString('hex'), issuedAt, deterministicSigningCrypto(caScalar));
  }

  private async build(request: IssueRequest, keys: CryptoKeyPair, serialNumber: string, issuedAt: number, crypto: webcrypto.Crypto): Promise<IssuedCertificate> {
    const notBefore = new Date(issuedAt - NOT_BEFORE_BACKDATE_MS);
    const notAfter = new Date(Math.min(issuedAt + request.validitySeconds * 1000, this.rootCert.notAfter.getTime()));

    const sans: x509.JsonGeneralName[] = [
      ...(request.dnsNames ?? []).map((value): x509.JsonGeneralName => ({ type: 'dns', value })),
      ...(request.ipAddresses ?? []).map((value): x509.JsonGeneralName => ({ type: 'ip', value })),
      ...(request.uris ?? []).map((value): x509.JsonGeneralName => ({ type: 'url', value })),
    ];
    const usages: string[] =
      request.usage === 'client'
        ? [x509.ExtendedKeyUsage.clientAuth]
        : request.usage === 'server'
          ? [x509.ExtendedKeyUsage.serverAuth]
          : [x509.ExtendedKeyUsage.serverAuth, x509.ExtendedKeyUsage.clientAuth];
    const extensions: x509.Extension[] = [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension(usages, false),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
      await x509.AuthorityKeyIdentifierExtension.create(this.rootCert.publicKey),
    ];
    if (sans.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(sans, false));

    const cert = await x509.X509CertificateGenerator.create({
      serialNumber,
      subject: [{ CN: [request.commonName] }],
      issuer: this.rootCert.subjectName,
      notBefore,
      notAfter,
      publicKey: keys.publicKey,
      signingKey: this.rootKey,
      signingAlgorithm: SIGNING_ALGORITHM,
      extensions,
    }, crypto as Crypto);
    const pkcs8 = await webcrypto.subtle.exportKey('pkcs8', keys.privateKey);
    return {
      certPem: cert.toString('pem') + '\n',
      keyPem: x509.PemConverter.encode(pkcs8, 'PRIVATE KEY') + '\n',
      caPem: this.rootPem,
      serialNumber: cert.serialNumber.toLowerCase(),
      notBefore: cert.notBefore,
      notAfter: cert.notAfter,
      commonName: request.commonName,
    };
  }
}

/** A random positive serial number of 16 octets, hex (RFC 5280 §4.1.2.2: positive, ≤ 20 octets, unique). */
function randomSerialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] & 0x7f) | 0x01; // positive, and no leading zero octet to strip
  return bytes.toString('hex');
}

/**
 * Refuses a private key file that group or others have any permission on (mode & 0077), as
 * OpenSSH does ("UNPROTECTED PRIVATE KEY FILE").
 * @throws Error naming the file, its mode and the fix.
 */
async function checkKeyFileMode(file: string): Promise<void> {
  const mode = (await stat(file)).mode & 0o777;
  if ((mode & 0o077) !== 0) {
    throw new Error(
      `CA state: ${file} has mode 0${mode.toString(8)}: the mesh CA private key must not be open to group or others (anyone who reads it can sign certificates for any identity); run chmod 600 ${file}`,
    );
  }
}

async function readIfExists(file: string): Promise<string | undefined> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`CA state: cannot read ${file}: ${(e as Error).message}`);
  }
}

/**
 * Writes `data` to a temporary file with `mode`, then hard-links it to `file`, which fails
 * (EEXIST) rather than overwrite a file another process created meanwhile.
 */
async function writeFileAtomic(file: string, data: string, mode: number): Promise<void> {
  const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
  try {
    await writeFile(tmp, data, { mode, flag: 'wx' });
    await chmod(tmp, mode); // the umask may have narrowed it
    await link(tmp, file);
  } catch (e) {
    throw new Error(`CA state: cannot write ${file}: ${(e as Error).message}`);
  } finally {
    await unlink(tmp).catch(() => undefined);
  }
}
