import { isIP } from 'node:net';

/** A CIDR range split into its address and prefix length (Envoy `config.core.v3.CidrRange`). */
export interface CidrParts {
  readonly address: string;
  readonly prefixLength: number;
}

/**
 * Parses `address/prefix-length` (`10.0.0.0/8`, `2001:db8::/32`): the address must be an IP
 * literal and the length within 0–32 (IPv4) or 0–128 (IPv6), as Go's `net.ParseCIDR`
 * accepts (OSM validates IngressBackend `IPRange` sources and Egress `ipAddresses` with it).
 * @returns undefined when `text` is not such a range.
 */
export function parseCidr(text: string): CidrParts | undefined {
  const m = /^([^/\s]+)\/(\d{1,3})$/.exec(text);
  if (!m) return undefined;
  const family = isIP(m[1]);
  if (family === 0) return undefined;
  const prefixLength = Number(m[2]);
  if (prefixLength > (family === 4 ? 32 : 128)) return undefined;
  return { address: m[1], prefixLength };
}

/** The single-address CIDR of an IP literal: `<ip>/32`, or `<ip>/128` for IPv6. */
export function hostCidr(ip: string): string {
  return `${ip}/${isIP(ip) === 6 ? 128 : 32}`;
}
