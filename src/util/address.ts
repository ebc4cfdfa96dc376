/**
 * Splits a `host:port` listening or dialling address (`[::1]:15128` for IPv6) into the host,
 * without brackets, and the port.
 * @returns `port` is NaN when the text after the last `:` is not a number; `host` is empty when
 *   there is no `:`.
 */
export function splitHostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  if (i < 0) return { host: '', port: Number.NaN };
  const portText = address.slice(i + 1);
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: /^\d+$/.test(portText) ? Number(portText) : Number.NaN };
}
