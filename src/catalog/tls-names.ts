/**
 * The TLS cipher suite and ECDH curve names Envoy accepts in `TlsParameters` (Envoy 1.40, built
 * on BoringSSL), for MeshConfig `spec.sidecar.cipherSuites` and `ecdhCurves`: a name Envoy does
 * not know makes it reject the whole configuration that carries the TLS context (a NACK, found
 * with a real Envoy: `Failed to initialize cipher suites NOT-A-CIPHER. The following ciphers were
 * rejected when tried individually: NOT-A-CIPHER`, `Failed to initialize ECDH curves P-224`).
 */

/**
 * BoringSSL's TLS 1.0–1.2 cipher suite names (every one accepted by Envoy 1.40, checked with the
 * real binary). TLS 1.3 suites (`TLS_AES_128_GCM_SHA256`, …) are not configurable and are refused.
 */
export const ENVOY_CIPHER_SUITES: readonly string[] = [
  'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-RSA-CHACHA20-POLY1305', 'ECDHE-PSK-CHACHA20-POLY1305',
  'ECDHE-ECDSA-AES128-SHA', 'ECDHE-RSA-AES128-SHA', 'ECDHE-PSK-AES128-CBC-SHA', 'ECDHE-ECDSA-AES256-SHA', 'ECDHE-RSA-AES256-SHA',
  'ECDHE-PSK-AES256-CBC-SHA', 'ECDHE-RSA-AES128-SHA256', 'AES128-GCM-SHA256', 'AES256-GCM-SHA384', 'AES128-SHA', 'PSK-AES128-CBC-SHA',
  'AES256-SHA', 'PSK-AES256-CBC-SHA', 'DES-CBC3-SHA',
];

/**
 * ECDH curve (group) names Envoy 1.40 accepts, each with the group it names (BoringSSL's aliases
 * name the same group: listing a group twice is refused too). `P-224` and the draft Kyber hybrid
 * are refused by Envoy 1.40.
 */
export const ENVOY_ECDH_CURVES: ReadonlyMap<string, string> = new Map([
  ['X25519MLKEM768', 'X25519MLKEM768'], ['MLKEM1024', 'MLKEM1024'],
  ['X25519', 'X25519'], ['x25519', 'X25519'],
  ['P-256', 'P-256'], ['prime256v1', 'P-256'],
  ['P-384', 'P-384'], ['secp384r1', 'P-384'],
  ['P-521', 'P-521'], ['secp521r1', 'P-521'],
]);

/** One name left out, with why. */
export interface RefusedTlsName {
  /** Index in the MeshConfig list. */
  readonly index: number;
  readonly message: string;
}

/**
 * The entries of `cipherSuites` Envoy accepts: a name of {@link ENVOY_CIPHER_SUITES}, or an
 * equal-preference group `[A|B|…]` of them. Other entries (unknown names, TLS 1.3 suites,
 * BoringSSL's rule words such as `HIGH` or `!aNULL`, which this does not interpret) are refused.
 * Pure.
 */
export function checkCipherSuites(cipherSuites: readonly unknown[]): { accepted: string[]; refused: RefusedTlsName[] } {
  const known = new Set(ENVOY_CIPHER_SUITES);
  const accepted: string[] = [];
  const refused: RefusedTlsName[] = [];
  cipherSuites.forEach((entry, index) => {
    const group = typeof entry === 'string' ? /^\[(.+)\]$/.exec(entry) : null;
    const names = typeof entry !== 'string' ? [] : group ? group[1]!.split('|') : [entry];
    if (names.length > 0 && names.every((n) => known.has(n))) accepted.push(entry as string);
    else refused.push({ index, message: `${JSON.stringify(entry)} is not a TLS 1.0–1.2 cipher suite Envoy accepts (BoringSSL's names, such as ECDHE-ECDSA-AES128-GCM-SHA256, or [A|B] for equal preference); it is left out` });
  });
  return { accepted, refused };
}

/**
 * The entries of `ecdhCurves` Envoy accepts: names of {@link ENVOY_ECDH_CURVES}, each group once
 * (a second name of a group already listed is refused, as Envoy refuses it). Pure.
 */
export function checkEcdhCurves(ecdhCurves: readonly unknown[]): { accepted: string[]; refused: RefusedTlsName[] } {
  const accepted: string[] = [];
  const refused: RefusedTlsName[] = [];
  const groups = new Map<string, string>();
  ecdhCurves.forEach((entry, index) => {
    const group = typeof entry === 'string' ? ENVOY_ECDH_CURVES.get(entry) : undefined;
    if (group === undefined) {
      refused.push({ index, message: `${JSON.stringify(entry)} is not an ECDH curve Envoy accepts (${[...new Set(ENVOY_ECDH_CURVES.values())].join(', ')}); it is left out` });
    } else if (groups.has(group)) {
      refused.push({ index, message: `"${entry as string}" names the curve ${group} again (listed as "${groups.get(group)!}"); it is left out` });
    } else {
      groups.set(group, entry as string);
      accepted.push(entry as string);
    }
  });
  return { accepted, refused };
}
