import { randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'yaml';
import type { CertificateAuthority } from '../certificate/authority.js';
import { BOOTSTRAP_CERT_VALIDITY_SECONDS, loadExistingCa } from '../injector/ca.js';
import { CertificateManager } from '../certificate/manager.js';
import { envoyBootstrap } from '../envoy/bootstrap.js';
import { proxyCommonName, type CommonName } from '../proxy/types.js';
import { splitHostPort } from '../util/address.js';

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

/** Options of {@link writeProxyBootstrap}; the `trellis bootstrap` flags. */
export interface BootstrapCommandOptions {
  readonly namespace: string;
  readonly serviceAccount: string;
  /** Output directory for bootstrap.yaml, cert.pem, key.pem, ca.pem. */
  readonly out: string;
  /** The controller's state directory (where the CA lives); ignored when `ca` is given. */
  readonly stateDir: string;
  /** The mesh CA (e.g. read from the controller's Secret with `--kubernetes`) instead of `stateDir`'s. */
  readonly ca?: CertificateAuthority;
  /** `host:port` of the controller's mTLS ADS listener. */
  readonly xdsAddress: string;
  /** Proxy UUID (default: a random one). */
  readonly uuid?: string;
  /** Validity of the xDS client certificate, in seconds (default 1 year). */
  readonly validitySeconds?: number;
  /** Incremental (delta) xDS: `api_type: DELTA_GRPC`. */
  readonly delta?: boolean;
  /** Admin interface on this Unix socket instead of 127.0.0.1:15000. */
  readonly adminSocketPath?: string;
  /** Admin interface on 127.0.0.1:`adminPort` instead of 15000. */
  readonly adminPort?: number;
}

/** What {@link writeProxyBootstrap} wrote. */
export interface BootstrapResult {
  readonly commonName: CommonName;
  readonly files: { bootstrap: string; cert: string; key: string; ca: string };
}

/**
 * Issues an xDS client certificate from the mesh CA (CN
 * `<uuid>.sidecar.<sa>.<ns>.cluster.local`) and writes `bootstrap.yaml` (Envoy v3 bootstrap:
 * admin 127.0.0.1:15000 unless told, ADS over TLS to the controller, node id = the CN), `cert.pem`,
 * `key.pem` (mode 0600) and `ca.pem` to `out`.
 * @throws Error when the state directory has no CA (the controller creates it), the CA cannot
 *   be loaded, the names are not DNS labels, the UUID is not one, or a file cannot be written.
 */
export async function writeProxyBootstrap(options: BootstrapCommandOptions): Promise<BootstrapResult> {
  for (const [flag, value] of [['--namespace', options.namespace], ['--service-account', options.serviceAccount]] as const) {
    if (!DNS_LABEL.test(value)) throw new Error(`${flag} "${value}" is not a DNS label (lower-case letters, digits and '-', at most 63)`);
  }
  if (options.uuid !== undefined && !UUID.test(options.uuid)) throw new Error(`--uuid "${options.uuid}" is not a UUID`);
  // Never a new CA: only the controller's (see loadExistingCa).
  const ca = options.ca ?? (await loadExistingCa(options.stateDir));
  const manager = new CertificateManager({ ca });
  const uuid = options.uuid ?? randomUUID();
  const commonName = proxyCommonName(uuid, 'sidecar', options.namespace, options.serviceAccount);
  const cert = await manager.issueProxyCertificate(uuid, options.namespace, options.serviceAccount, options.validitySeconds ?? BOOTSTRAP_CERT_VALIDITY_SECONDS);
  manager.stop();
  const out = path.resolve(options.out);
  await mkdir(out, { recursive: true });
  const files = {
    bootstrap: path.join(out, 'bootstrap.yaml'),
    cert: path.join(out, 'cert.pem'),
    key: path.join(out, 'key.pem'),
    ca: path.join(out, 'ca.pem'),
  };
  const xds = splitHostPort(options.xdsAddress);
  const bootstrap = envoyBootstrap({
    nodeId: commonName,
    xdsHost: xds.host,
    xdsPort: xds.port,
    certFile: files.cert,
    keyFile: files.key,
    caFile: files.ca,
    delta: options.delta,
    adminSocketPath: options.adminSocketPath,
    adminPort: options.adminPort,
  });
  await writeFile(files.cert, cert.certPem);
  await writeFile(files.key, cert.keyPem, { mode: 0o600 });
  await writeFile(files.ca, ca.caPem);
  await writeFile(files.bootstrap, stringify(bootstrap));
  return { commonName, files };
}
