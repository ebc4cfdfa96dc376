/** The mesh CA as the injector and `trellis bootstrap` load it from a state directory (no Kubernetes client here). */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { CA_CERT_FILE, CertificateAuthority } from '../certificate/authority.js';

/** Lifetime of the xDS client certificate of a proxy's bootstrap (`trellis bootstrap`, the injector's Secrets), in seconds: 1 year. */
export const BOOTSTRAP_CERT_VALIDITY_SECONDS = 365 * 24 * 3600;

/**
 * The controller's CA from its state directory, never creating one: a certificate signed by a
 * CA the controller does not use would be refused at connect time.
 * @throws Error when the directory has no `ca.pem` (the controller creates it), or the CA cannot be loaded.
 */
export async function loadExistingCa(stateDir: string): Promise<CertificateAuthority> {
  if (!existsSync(path.join(stateDir, CA_CERT_FILE))) {
    throw new Error(`no mesh CA in ${path.resolve(stateDir)}: start the controller first, or pass the controller's --state-dir`);
  }
  return CertificateAuthority.loadOrCreate(stateDir);
}
