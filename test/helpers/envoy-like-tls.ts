import tls from 'node:tls';
import { uriSansFromCertificate } from '../../src/certificate/identity.js';

/** What {@link connectLikeEnvoy} presents and requires, as a bootstrap's `UpstreamTlsContext` says. */
export interface EnvoyLikeTlsOptions {
  readonly port: number;
  /** `trusted_ca`: the PEM the server's chain must end in. */
  readonly caPem: string | Buffer;
  /** `tls_certificates`: the client certificate and key, PEM. */
  readonly certPem: string | Buffer;
  readonly keyPem: string | Buffer;
  /** `match_typed_subject_alt_names` of `san_type: URI` with `exact`: one of them must be a URI SAN of the server. */
  readonly uriSans: readonly string[];
  /** `sni`, when the bootstrap sets one. */
  readonly servername?: string;
}

/**
 * Opens a TLS connection to `127.0.0.1:<port>` and verifies the server as Envoy verifies an
 * upstream with a `CertificateValidationContext` of `trusted_ca` and URI `exact` SAN matchers: the
 * chain must end in the CA, and a URI SAN of the leaf must equal one of `uriSans` (no matcher means
 * no SAN check, as in Envoy). ALPN `h2`. Resolves with the server certificate's URI SANs once the
 * handshake is done; rejects with the verification error otherwise.
 */
export function connectLikeEnvoy(options: EnvoyLikeTlsOptions): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({
      host: '127.0.0.1',
      port: options.port,
      ca: options.caPem,
      cert: options.certPem,
      key: options.keyPem,
      ALPNProtocols: ['h2'],
      ...(options.servername !== undefined ? { servername: options.servername } : {}),
      rejectUnauthorized: true,
      checkServerIdentity: (_host, peer) => {
        if (options.uriSans.length === 0) return undefined;
        const uris = uriSansFromCertificate(peer.raw);
        return uris.some((u) => options.uriSans.includes(u))
          ? undefined
          : new Error(`no URI SAN of the server certificate (${uris.join(', ') || 'none'}) matches ${options.uriSans.join(', ')}`);
      },
    });
    socket.setTimeout(10_000, () => socket.destroy(new Error('TLS handshake timed out')));
    socket.once('secureConnect', () => {
      const uris = uriSansFromCertificate(socket.getPeerCertificate().raw);
      socket.end();
      resolve(uris);
    });
    socket.once('error', reject);
  });
}
