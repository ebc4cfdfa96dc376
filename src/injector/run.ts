/**
 * `trellis injector`: loads the mesh CA (from the controller's CA Secret, or a state directory),
 * issues the webhook's serving certificate from it, writes the CA bundle into the
 * MutatingWebhookConfiguration, and serves the webhook ({@link startWebhookServer}).
 */
import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { CertificateManager } from '../certificate/manager.js';
import { readCaSecret, secretApiFor } from '../certificate/secret-store.js';
import { BOOTSTRAP_CERT_VALIDITY_SECONDS, loadExistingCa } from './ca.js';
import { kubernetesCluster, writeWebhookCaBundle, type InjectorCluster, type MeshConfigRef } from './cluster.js';
import type { InjectorSettings } from './inject.js';
import { startWebhookServer, type WebhookServer } from './webhook.js';

/** Name of the injector's Service and Deployment (OSM's). */
export const INJECTOR_NAME = 'osm-injector';
/** Lifetime of the webhook's serving certificate, in seconds (1 year; a restart issues a new one). */
export const SERVING_CERT_VALIDITY_SECONDS = 365 * 24 * 3600;

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
  const serving = await ca.issue({
    commonName: service,
    dnsNames: [...new Set([service, `${service}.cluster.local`, `${INJECTOR_NAME}.${options.namespace}`, INJECTOR_NAME, ...(options.dnsNames ?? [])])],
    ipAddresses: [...new Set(options.ipAddresses ?? [])],
    validitySeconds: SERVING_CERT_VALIDITY_SECONDS,
    usage: 'server',
  });
  const manager = new CertificateManager({ ca });
  const server: WebhookServer = await startWebhookServer({
    cluster: options.cluster ?? kubernetesCluster(options.kubeConfig, options.meshConfig),
    settings: options.settings,
    injectorNamespace: options.namespace,
    logger: options.logger,
    issueCertificate: (uuid, namespace, serviceAccount) => manager.issueProxyCertificate(uuid, namespace, serviceAccount, BOOTSTRAP_CERT_VALIDITY_SECONDS),
    host: options.host,
    port: options.port,
    certPem: serving.certPem,
    keyPem: serving.keyPem,
  });
  try {
    if (options.webhookConfigName !== undefined) {
      const changed = await writeWebhookCaBundle(options.kubeConfig, options.webhookConfigName, ca.caPem);
      options.logger?.info({ webhookConfiguration: options.webhookConfigName, changed }, 'CA bundle written into the MutatingWebhookConfiguration');
    }
  } catch (err) {
    await server.close();
    manager.stop();
    throw err;
  }
  options.logger?.info({ port: server.port }, 'sidecar injector serving');
  return {
    port: server.port,
    caPem: ca.caPem,
    stop: async () => {
      manager.stop();
      await server.close();
    },
  };
}
