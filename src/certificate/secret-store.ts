import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { apiClientConfig, apiErrorMessage, apiStatusCode } from '../util/kube-api.js';
import { CA_CERT_FILE, CA_KEY_FILE, CertificateAuthority, type CertificateAuthorityOptions } from './authority.js';

/** Default name of the Secret holding the mesh CA, in the controller's namespace. */
export const DEFAULT_CA_SECRET_NAME = 'trellis-ca';

/** The narrow part of the Secrets API the CA store needs (client-node's `CoreV1Api` has it). */
export interface SecretApi {
  /** GET; rejects with an error whose status is 404 when absent. */
  readNamespacedSecret(param: { name: string; namespace: string }): Promise<V1Secret>;
  /** POST; rejects with status 409 when a Secret of that name exists. */
  createNamespacedSecret(param: { namespace: string; body: V1Secret }): Promise<V1Secret>;
}

/** Options of {@link loadOrCreateCaSecret}. */
export interface CaSecretOptions extends CertificateAuthorityOptions {
  /** The Secrets API, e.g. `kubeConfig.makeApiClient(CoreV1Api)` (see {@link secretApiFor}). */
  readonly api: SecretApi;
  /** The controller's namespace (`osm-system`). */
  readonly namespace: string;
  /** Secret name (default {@link DEFAULT_CA_SECRET_NAME}). */
  readonly name?: string;
  readonly logger?: Logger;
}

/** The outcome of {@link loadOrCreateCaSecret}. */
export interface CaSecretResult {
  readonly ca: CertificateAuthority;
  /** True when this call created the Secret (exactly one replica sees true). */
  readonly created: boolean;
}

/** The Secrets API of a kubeconfig (an `http://` server too, see {@link apiClientConfig}). */
export function secretApiFor(kubeConfig: KubeConfig): SecretApi {
  return apiClientConfig(kubeConfig).makeApiClient(CoreV1Api);
}

/**
 * Loads the mesh CA from the Secret `<namespace>/<name>` (data `ca.pem`, `ca-key.pem`, base64),
 * or creates it when absent: a new root is generated and POSTed; when another replica created the
 * Secret meanwhile (409 AlreadyExists), that one is read and used and the local root is dropped.
 * POST is atomic in the API server, so the root is created once however many replicas start
 * together, and every replica ends up with the same root.
 * @throws Error when the API cannot be reached or refuses (the caller retries), or when the Secret
 *   exists but does not hold a valid CA (never overwritten: an operator must fix or delete it).
 */
export async function loadOrCreateCaSecret(options: CaSecretOptions): Promise<CaSecretResult> {
  const name = options.name ?? DEFAULT_CA_SECRET_NAME;
  const where = `secret ${options.namespace}/${name}`;
  const existing = await readSecret(options.api, options.namespace, name);
  if (existing) return { ca: await caFromSecret(existing, where, options), created: false };

  const ca = await CertificateAuthority.generate(options);
  const { certPem, keyPem } = ca.exportPem();
  const body: V1Secret = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, namespace: options.namespace, labels: { 'app.kubernetes.io/name': 'trellis', 'app.kubernetes.io/component': 'ca' } },
    type: 'Opaque',
    data: { [CA_CERT_FILE]: Buffer.from(certPem).toString('base64'), [CA_KEY_FILE]: Buffer.from(keyPem).toString('base64') },
  };
  try {
    await options.api.createNamespacedSecret({ namespace: options.namespace, body });
    options.logger?.info({ secret: `${options.namespace}/${name}` }, 'mesh CA root created and stored');
    return { ca, created: true };
  } catch (err) {
    if (apiStatusCode(err) !== 409) throw new Error(`cannot create ${where}: ${apiErrorMessage(err)}`);
  }
  // Another replica won the race: use its root.
  const winner = await readSecret(options.api, options.namespace, name);
  if (!winner) throw new Error(`${where} was reported as existing, then not found`);
  options.logger?.info({ secret: `${options.namespace}/${name}` }, 'mesh CA root created by another replica; using it');
  return { ca: await caFromSecret(winner, where, options), created: false };
}

/**
 * Reads the mesh CA from the Secret `<namespace>/<name>` the controller created
 * ({@link loadOrCreateCaSecret}), never creating one: what the injector and
 * `trellis bootstrap --kubernetes` sign proxies' certificates with.
 * @throws Error naming the Secret when it does not exist (start the controller first), does not
 *   hold a valid CA, or cannot be read.
 */
export async function readCaSecret(options: Omit<CaSecretOptions, 'logger'>): Promise<CertificateAuthority> {
  const name = options.name ?? DEFAULT_CA_SECRET_NAME;
  const where = `secret ${options.namespace}/${name}`;
  const secret = await readSecret(options.api, options.namespace, name);
  if (!secret) throw new Error(`${where} not found: the controller creates the mesh CA there; start it first`);
  return caFromSecret(secret, where, options);
}

async function readSecret(api: SecretApi, namespace: string, name: string): Promise<V1Secret | undefined> {
  try {
    return await api.readNamespacedSecret({ name, namespace });
  } catch (err) {
    if (apiStatusCode(err) === 404) return undefined;
    throw new Error(`cannot read secret ${namespace}/${name}: ${apiErrorMessage(err)}`);
  }
}

async function caFromSecret(secret: V1Secret, where: string, options: CertificateAuthorityOptions): Promise<CertificateAuthority> {
  const field = (key: string): string => {
    const value = secret.data?.[key];
    if (!value) throw new Error(`${where} has no data.${key}; fix it or delete the Secret to create a new root`);
    return Buffer.from(value, 'base64').toString('utf8');
  };
  return CertificateAuthority.fromPem(field(CA_CERT_FILE), field(CA_KEY_FILE), where, options);
}
