import { createECDH, createHash, createHmac, webcrypto } from 'node:crypto';

/**
 * Deterministic ECDSA P-256 for certificates that several controller replicas must issue
 * byte-for-byte alike (so that SDS `service-cert` resources, hence their xDS versions, are the
 * same whichever replica a proxy connects to):
 *
 * - the leaf key is derived from the CA key and what the certificate is for
 *   ({@link deriveP256PrivateKey}): anyone holding the CA key can derive it, but anyone holding the
 *   CA key can already mint any certificate of the mesh;
 * - the signature nonce `k` is RFC 6979's (HMAC-DRBG over the private key and the message hash,
 *   section 3.2), so signing the same to-be-signed bytes twice gives the same signature.
 *
 * The point multiplication `k·G` is done by Node's ECDH (`createECDH('prime256v1')`), the rest is
 * arithmetic modulo the group order.
 */

/** Order `n` of the P-256 base point (FIPS 186-4 D.1.2.3). */
export const P256_ORDER = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

function toBigInt(bytes: Uint8Array): bigint {
  return bytes.length === 0 ? 0n : BigInt(`0x${Buffer.from(bytes).toString('hex')}`);
}

function toBytes32(value: bigint): Buffer {
  return Buffer.from(value.toString(16).padStart(64, '0'), 'hex');
}

function modPow(base: bigint, exponent: bigint, modulus: bigint): bigint {
  let result = 1n;
  let b = base % modulus;
  let e = exponent;
  while (e > 0n) {
    if (e & 1n) result = (result * b) % modulus;
    b = (b * b) % modulus;
    e >>= 1n;
  }
  return result;
}

function hmac(key: Buffer, ...parts: Uint8Array[]): Buffer {
  const h = createHmac('sha256', key);
  for (const p of parts) h.update(p);
  return h.digest();
}

/**
 * The RFC 6979 (section 3.2) nonce for P-256 with SHA-256: the first candidate in [1, n−1]
 * produced by HMAC-DRBG seeded with the private key `d` and the message hash `h1`.
 */
export function rfc6979Nonce(d: bigint, h1: Uint8Array): bigint {
  const x = toBytes32(d);
  const h1Reduced = toBytes32(toBigInt(h1) % P256_ORDER);
  let v: Buffer = Buffer.alloc(32, 0x01);
  let k: Buffer = Buffer.alloc(32, 0x00);
  k = hmac(k, v, Buffer.from([0x00]), x, h1Reduced);
  v = hmac(k, v);
  k = hmac(k, v, Buffer.from([0x01]), x, h1Reduced);
  v = hmac(k, v);
  for (;;) {
    v = hmac(k, v);
    const candidate = toBigInt(v);
    if (candidate >= 1n && candidate < P256_ORDER) return candidate;
    k = hmac(k, v, Buffer.from([0x00]));
    v = hmac(k, v);
  }
}

/**
 * Signs `data` with ECDSA P-256 / SHA-256 and the RFC 6979 nonce.
 * @param d the private scalar.
 * @returns the signature as WebCrypto returns it: `r ‖ s`, 32 octets each (IEEE P1363).
 */
export function signP256Deterministic(d: bigint, data: Uint8Array): Buffer {
  const h1 = createHash('sha256').update(data).digest();
  const e = toBigInt(h1) % P256_ORDER;
  let k = rfc6979Nonce(d, h1);
  for (;;) {
    const ecdh = createECDH('prime256v1');
    ecdh.setPrivateKey(toBytes32(k));
    const point = ecdh.getPublicKey(null, 'uncompressed');
    const r = toBigInt(point.subarray(1, 33)) % P256_ORDER;
    const s = r === 0n ? 0n : (modPow(k, P256_ORDER - 2n, P256_ORDER) * ((e + r * d) % P256_ORDER)) % P256_ORDER;
    if (r !== 0n && s !== 0n) return Buffer.concat([toBytes32(r), toBytes32(s)]);
    // Astronomically unlikely; step to another nonce deterministically.
    k = (k % (P256_ORDER - 1n)) + 1n;
  }
}

/**
 * Derives a P-256 private key from a secret (the CA's private scalar) and a label (what the key
 * is for, e.g. identity and validity window): HMAC-SHA256 in counter mode, reduced into [1, n−1].
 * @returns the key as a JWK (`d`, `x`, `y`), ready for `importKey('jwk', …)`.
 */
export function deriveP256PrivateKey(secret: bigint, label: string): webcrypto.JsonWebKey {
  const seed = Buffer.concat([
    hmac(toBytes32(secret), Buffer.from(`trellis derived key 1\0${label}`)),
    hmac(toBytes32(secret), Buffer.from(`trellis derived key 2\0${label}`)),
  ]);
  const d = (toBigInt(seed) % (P256_ORDER - 1n)) + 1n;
  const ecdh = createECDH('prime256v1');
  ecdh.setPrivateKey(toBytes32(d));
  const point = ecdh.getPublicKey(null, 'uncompressed');
  return {
    kty: 'EC',
    crv: 'P-256',
    d: toBytes32(d).toString('base64url'),
    x: point.subarray(1, 33).toString('base64url'),
    y: point.subarray(33, 65).toString('base64url'),
    ext: true,
  };
}

/** The private scalar of a P-256 JWK (`d`, base64url). */
export function jwkScalar(jwk: webcrypto.JsonWebKey): bigint {
  if (!jwk.d) throw new Error('the JWK has no private part');
  return toBigInt(Buffer.from(jwk.d, 'base64url'));
}

/**
 * A WebCrypto object that is Node's, except that `subtle.sign` signs ECDSA deterministically with
 * the scalar `d` (whatever key it is given): for `@peculiar/x509`'s certificate generator, which
 * takes the crypto provider to sign with.
 */
export function deterministicSigningCrypto(d: bigint): webcrypto.Crypto {
  const subtle = new Proxy(webcrypto.subtle, {
    get(target, property) {
      if (property === 'sign') {
        return async (_algorithm: unknown, _key: unknown, data: ArrayBuffer | ArrayBufferView): Promise<ArrayBuffer> => {
          const bytes = ArrayBuffer.isView(data) ? new Uint8Array(data.buffer, data.byteOffset, data.byteLength) : new Uint8Array(data);
          const signature = signP256Deterministic(d, bytes);
          return signature.buffer.slice(signature.byteOffset, signature.byteOffset + signature.byteLength) as ArrayBuffer;
        };
      }
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
  return new Proxy(webcrypto, {
    get(target, property) {
      if (property === 'subtle') return subtle;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
