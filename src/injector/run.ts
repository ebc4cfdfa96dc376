/**
 * `trellis injector`: loads the mesh CA (from the controller's CA Secret, or a state directory),
 * issues the webhook's serving certificate from it (and a new one at 2/3 of its lifetime),
 * writes the CA bundle into the MutatingWebhookConfiguration, and serves the webhook
 * ({@link startWebhookServer}) with its bounds on bootstrap Secrets ({@link SecretCreationGate})
 * and their owners ({@link SecretAdopter}).
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CertificateManager } from '../certificate/manager.js';
import { readCaSecret, secretApiFor } from '../certificate/secret-store.js';
import { BOOTSTRAP_CERT_VALIDITY_SECONDS, loadExistingCa } from './ca.js';
import { kubernetesCluster, writeWebhookCaBundle, type InjectorCluster, type MeshConfigRef } from './cluster.js';
import type { InjectorSettings } from './inject.js';
import { startWebhookServer, type WebhookServer } from './webhook.js';
import { SecretAdopter } from './adopt.js';
import { DEFAULT_SECRET_CREATION_BOUNDS, SecretCreationGate, type SecretCreationBounds } from './secret-gate.js';

/** Name of the injector's Service and Deployment (OSM's). */
export const INJECTOR_NAME = 'osm-injector';
/** Lifetime of the webhook's serving certificate, in seconds (1 year; renewed at 2/3 of it, {@link SERVING_CERT_RENEW_FRACTION}). */
export const SERVING_CERT_VALIDITY_SECONDS = 365 * 24 * 3600;
/** The part of the serving certificate's lifetime (from its issuance) after which a new one is issued. */
export const SERVING_CERT_RENEW_FRACTION = 2 / 3;
/** Wait before a failed renewal is tried again, in ms (shorter when the certificate expires sooner). */
const RENEW_RETRY_MS = 30_000;
/** The longest delay `setTimeout` takes (2^31 − 1 ms, about 24.8 days); a longer wait is made of several. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Options of {@link runInjector}. */
export interface InjectorOptions {
  readonly kubeConfig: KubeConfig;
  readonly settings: InjectorSettings;
  /** The injector's namespace (its Service's, the CA Secret's, the MeshConfig's). */
  readonly namespace: string;
  /** The CA: the controller's Secret (`name` in {@link namespace}) or a state directory holding `ca.pem`/`ca-key.pem`. */
  readonly ca: { readonly secretName: string } | { readonly stateDir: string };
  readonly meshConfig: MeshConfigRef;
  /** The MutatingWebhookConfiguration to write the CA bundle into; undefined: none (a local run). */
  readonly webhookConfigName?: string;
  readonly host?: string;
  readonly port?: number;
  /** Extra DNS names and IPs of the serving certificate (besides the Service's names). */
  readonly dnsNames?: readonly string[];
  readonly ipAddresses?: readonly string[];
  readonly logger?: Logger;
  /** The cluster (default: {@link kubernetesCluster} of `kubeConfig`). */
  readonly cluster?: InjectorCluster;
  /** Bounds of the bootstrap Secret creations (default {@link DEFAULT_SECRET_CREATION_BOUNDS}). */
  readonly secretCreationBounds?: SecretCreationBounds;
  /** How long a bootstrap Secret waits for its pod to be stored before it is deleted, in ms (default 2 minutes, see {@link SecretAdopter}). */
  readonly adoptTimeoutMs?: number;
  /** Time between two looks for the pods of waiting Secrets, in ms (default 1 s). */
  readonly adoptPollMs?: number;
  /** Lifetime of the serving certificate, in seconds (default {@link SERVING_CERT_VALIDITY_SECONDS}; a test gives a few). */
  readonly servingCertValiditySeconds?: number;
  /** CA (PEM) of the API server's webhook client certificate: when given, AdmissionReviews without one are refused (403). */
  readonly clientCaPem?: string;
}

/** A running injector. */
export interface RunningInjector {
  readonly port: number;
  /** The mesh root, PEM (the webhook's CA bundle). */
  readonly caPem: string;
  stop(): Promise<void>;
}

/**
 * Starts the injector.
 * @throws Error when the CA cannot be loaded (no Secret: the controller makes it), the
 *   MutatingWebhookConfiguration is missing or cannot be patched, or the port cannot be bound.
 */
export async function runInjector(options: InjectorOptions): Promise<RunningInjector> {
  const ca =
    'secretName' in options.ca
      ? await readCaSecret({ api: secretApiFor(options.kubeConfig), namespace: options.namespace, name: options.ca.secretName })
      : await loadExistingCa(options.ca.stateDir);
  const service = `${INJECTOR_NAME}.${options.namespace}.svc`;
  const issueServing = () =>
    ca.issue({
      commonName: service,
      dnsNames: [...new Set([service, `${service}.cluster.local`, `${INJECTOR_NAME}.${options.namespace}`, INJECTOR_NAME, ...(options.dnsNames ?? [])])],
      ipAddresses: [...new Set(options.ipAddresses ?? [])],
      validitySeconds: options.servingCertValiditySeconds ?? SERVING_CERT_VALIDITY_SECONDS,
      usage: 'server',
    });
  const serving = await issueServing();
  const manager = new CertificateManager({ ca });
  const cluster = options.cluster ?? kubernetesCluster(options.kubeConfig, options.meshConfig);
  const adopter = new SecretAdopter({ cluster, logger: options.logger, adoptTimeoutMs: options.adoptTimeoutMs, pollMs: options.adoptPollMs });
  const server: WebhookServer = await startWebhookServer({
    cluster,
    secretGate: new SecretCreationGate(options.secretCreationBounds ?? DEFAULT_SECRET_CREATION_BOUNDS),
    adopter,
    clientCaPem: options.clientCaPem,
    settings: options.settings,
    injectorNamespace: options.namespace,
    logger: options.logger,
    issueCertificate: (uuid, namespace, serviceAccount) => manager.issueProxyCertificate(uuid, namespace, serviceAccount, BOOTSTRAP_CERT_VALIDITY_SECONDS),
    host: options.host,
    port: options.port,
    certPem: serving.certPem,
    keyPem: serving.keyPem,
  });
  const writeCaBundle = async () => {
    if (options.webhookConfigName === undefined) return;
    const changed = await writeWebhookCaBundle(options.kubeConfig, options.webhookConfigName, ca.caPem);
    options.logger?.info({ webhookConfiguration: options.webhookConfigName, changed }, 'CA bundle written into the MutatingWebhookConfiguration');
  };
  try {
    await writeCaBundle();
  } catch (err) {
    await server.close();
    manager.stop();
    throw err;
  }
  adopter.start();

  // The serving certificate is renewed before it expires: new connections get the new one, the
  // listener and open connections stay; the caBundle is written again (a no-op unless edited).
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const schedule = (at: number, notAfter: number) => {
    if (stopped) return;
    timer = setTimeout(() => (Date.now() < at ? schedule(at, notAfter) : void renew(notAfter)), Math.min(Math.max(at - Date.now(), 0), MAX_TIMER_MS)).unref();
  };
  const renewAt = (issuedAt: number, notAfter: number) => issuedAt + (notAfter - issuedAt) * SERVING_CERT_RENEW_FRACTION;
  const renew = async (notAfter: number) => {
    try {
      const issuedAt = Date.now();
      const next = await issueServing();
      if (stopped) return;
      server.setCertificate(next.certPem, next.keyPem);
      options.logger?.info({ notAfter: next.notAfter.toISOString() }, 'webhook serving certificate renewed');
      await writeCaBundle().catch((err: unknown) => options.logger?.warn({ err: err instanceof Error ? err.message : String(err) }, 'CA bundle not written again'));
      schedule(renewAt(issuedAt, next.notAfter.getTime()), next.notAfter.getTime());
    } catch (err) {
      options.logger?.error({ err: err instanceof Error ? err.message : String(err), notAfter: new Date(notAfter).toISOString() }, 'webhook serving certificate not renewed: trying again');
      schedule(Date.now() + Math.max(1000, Math.min(RENEW_RETRY_MS, (notAfter - Date.now()) / 4)), notAfter);
    }
  };
  schedule(renewAt(Date.now(), serving.notAfter.getTime()), serving.notAfter.getTime());

  options.logger?.info({ port: server.port }, 'sidecar injector serving');
  return {
    port: server.port,
    caPem: ca.caPem,
    stop: async () => {
      stopped = true;
      clearTimeout(timer);
      manager.stop();
      await adopter.stop();
      await server.close();
    },
  };
}
